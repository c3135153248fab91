// dist.h: the C interface of torchfit's c10d binding (dist.cc).
//
// The shim's conventions (torch/internal/capi/capi.h): every function
// returns NULL on success or a malloc'd error string (free it with
// tfd_free_error), results go through out-parameters, and nothing throws:
// each body catches every exception. An error string starts with a kind:
//   "T:" a collective or store wait passed its timeout
//   "P:" the connection to a peer failed (a rank died or its socket closed;
//        Gloo reports its own transport timeouts this way too)
//   "B:" the group is broken: an earlier collective failed or timed out
//   "O:" out of memory
//   "E:" anything else
// followed by the message without a C++ backtrace.
//
// Tensors are the shim's handles (tf_tensor: capi.h).
#ifndef TORCHFIT_DIST_H
#define TORCHFIT_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "capi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfd_err;
typedef struct tfd_store_s* tfd_store;
typedef struct tfd_group_s* tfd_group;
typedef struct tfd_reducer_s* tfd_reducer;

void tfd_free_error(tfd_err e);

// ---- stores -------------------------------------------------------------------
// A TCPStore client of the server at host:port (c10d's wire protocol).
tfd_err tfd_tcp_store(const char* host, int32_t port, int32_t world, int64_t timeout_ms, tfd_store* out);
// A FileStore on path shared by world processes.
tfd_err tfd_file_store(const char* path, int32_t world, int64_t timeout_ms, tfd_store* out);
// A PrefixStore: keys of base under "prefix/".
tfd_err tfd_prefix_store(const char* prefix, tfd_store base, tfd_store* out);
void tfd_store_free(tfd_store s);
tfd_err tfd_store_set(tfd_store s, const char* key, const void* value, size_t n);
// *value is malloc'd (free it with free()).
tfd_err tfd_store_get(tfd_store s, const char* key, void** value, size_t* n);
tfd_err tfd_store_add(tfd_store s, const char* key, int64_t delta, int64_t* out);

// ---- process groups ----------------------------------------------------------
enum { TFD_GLOO = 0, TFD_NCCL = 1 };
// tfd_has_nccl: 1 when this build has ProcessGroupNCCL (the cuda build tag).
int32_t tfd_has_nccl(void);
// A process group of size ranks on store. Gloo binds its sockets to host (an
// address of this machine) or, when iface is not empty, to that network
// interface. timeout_ms bounds rendezvous and every collective.
tfd_err tfd_group_new(tfd_store store, int32_t rank, int32_t size, int32_t backend, const char* host,
                      const char* iface, int64_t timeout_ms, int32_t threads, tfd_group* out);
// Frees the group. A broken group is left to the process (its threads may
// be blocked on a dead peer); *leaked says so.
void tfd_group_free(tfd_group g, int32_t* leaked);
// Python's init_process_group shares a random sequence number from rank 0
// (ProcessGroup::setSequenceNumberForGroup); a Go rank in a group with
// Python ranks does the same.
tfd_err tfd_group_set_sequence_number(tfd_group g);

// Collectives: each waits up to the group's timeout. op: c10d::ReduceOp
// (0 sum, 1 avg, 2 product, 3 min, 4 max).
tfd_err tfd_allreduce(tfd_group g, const tf_tensor* ts, int32_t n, int32_t op);
tfd_err tfd_broadcast(tfd_group g, const tf_tensor* ts, int32_t n, int32_t root);
// Flattens ts (same dtype and device) into buffers of at most bucket_bytes,
// broadcasts them from root and copies them back.
tfd_err tfd_broadcast_coalesced(tfd_group g, const tf_tensor* ts, int32_t n, int32_t root, int64_t bucket_bytes);
// outs[k] receives rank k's in (size outs: the group's size).
tfd_err tfd_allgather(tfd_group g, tf_tensor in, const tf_tensor* outs);
// out receives the op-reduction over ranks of ins[rank] (size ins: the
// group's size). Gloo in libtorch 1.13 has no reduce-scatter: it all-reduces
// the concatenation and keeps this rank's part.
tfd_err tfd_reduce_scatter(tfd_group g, const tf_tensor* ins, tf_tensor out, int32_t op);
tfd_err tfd_barrier(tfd_group g);
tfd_err tfd_send(tfd_group g, tf_tensor t, int32_t dst, int32_t tag);
tfd_err tfd_recv(tfd_group g, tf_tensor t, int32_t src, int32_t tag);

// ---- gradient reducer ----------------------------------------------------------
// A bucketed gradient all-reduce for data parallel training. Parameters that
// require grad are put in buckets in reverse order (backward produces their
// gradients roughly last to first) of at most bucket_bytes (the first
// bucket at most first_bytes), one dtype and device per bucket. With hooks
// on, a bucket's all-reduce (a sum) starts during backward as soon as its
// gradients and those of every earlier bucket are accumulated (autograd
// post-hooks on the parameters' gradient accumulators); with hooks off,
// every bucket starts in tfd_reducer_finish.
tfd_err tfd_reducer_new(tfd_group g, const tf_tensor* params, int32_t n, int64_t bucket_bytes,
                        int64_t first_bytes, int32_t hooks, tfd_reducer* out);
void tfd_reducer_free(tfd_reducer r);
// tfd_reducer_arm tells the reducer whether the next backward is the last
// of an accumulation window (sync: its gradients are reduced) or not (the
// hooks do nothing, gradients only accumulate: PyTorch's no_sync).
tfd_err tfd_reducer_arm(tfd_reducer r, int32_t sync);
// tfd_reducer_finish starts the buckets not started yet (gradients that
// backward did not produce count as zeros), waits for every bucket and
// copies the sums into the parameters' gradients (setting the gradients
// that were none). Stats: wait_ns, the time spent waiting here (the
// communication not hidden behind backward); launched_in_backward, the
// buckets started by hooks.
typedef struct {
  int64_t wait_ns;
  int64_t copy_ns;
  int32_t buckets;
  int32_t launched_in_backward;
  int64_t bytes;
} tfd_reduce_stats;
tfd_err tfd_reducer_finish(tfd_reducer r, tfd_reduce_stats* stats);
// tfd_reducer_buckets writes up to cap bucket sizes in bytes; *n is the count.
tfd_err tfd_reducer_buckets(tfd_reducer r, int64_t* bytes, int32_t cap, int32_t* n);

#ifdef __cplusplus
}
#endif
#endif
