// capi.h: the C interface of torchfit's libtorch shim.
//
// Every function has one shape: it returns NULL on success or a malloc'd
// error string (free it with tf_free_error), and passes results through
// out-parameters. Nothing here throws: each body catches every exception.
//
// An error string starts with a one-letter kind and a colon:
//   "O:" out of memory (c10::OutOfMemoryError, CUDA's or the CPU allocator's)
//   "H:" out of host memory: a std::bad_alloc while the host cannot give a
//        further probe's worth (tf_exhaustion_probe) either (backend.cc)
//   "B:" a backend fault: a std::bad_alloc no allocator reported (no size)
//        while memory is there, a std::bad_array_new_length or a
//        std::future_error, as oneDNN 2.6 throws when creating a
//        primitive fails; the process is not safe to go on (backend.cc)
//   "E:" any other libtorch error (c10::Error, std::exception, unknown)
// followed by libtorch's message without its C++ backtrace.
#ifndef TORCHFIT_CAPI_H
#define TORCHFIT_CAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tf_err;
typedef struct tf_tensor_s* tf_tensor;  // an owning reference to an at::Tensor
typedef struct tf_op_s* tf_op;          // a resolved operator (never freed)

void tf_free_error(tf_err e);

// ---- values passed to and returned from operators -------------------------
// Lists, strings and tensor lists live in an int64 arena passed beside the
// values, so no Go pointer is ever stored in memory handed to C.
enum {
  TF_DEFAULT = 0,  // use the schema's default for this position
  TF_NONE = 1,     // None
  TF_TENSOR = 2,   // p: tf_tensor (NULL means None / undefined)
  TF_INT = 3,      // i
  TF_DOUBLE = 4,   // d
  TF_BOOL = 5,     // i (0/1)
  TF_INTS = 6,     // arena[i .. i+n)
  TF_DOUBLES = 7,  // arena[i .. i+n) holding float64 bits
  TF_TENSORS = 8,  // arena[i .. i+n) holding tf_tensor pointers; on return: p = malloc'd tf_tensor[n]
  TF_STRING = 9,   // arena bytes from i, length n
  TF_DEVICE = 10,  // i: device type, n: device index
};

// p is a pointer carried as an integer: values arrays live in Go memory,
// and an integer field spares cgo's per-call pointer check.
typedef struct {
  int32_t kind;
  int32_t n;
  int64_t i;
  double d;
  uintptr_t p;
} tf_val;

// tf_op_find resolves "aten::add" + overload "Tensor" ("" for none).
tf_err tf_op_find(const char* name, const char* overload, tf_op* out);
// tf_op_call runs op on args (missing trailing args take schema defaults) and
// writes at most cap outputs; *nout is the number the op returned. Outputs
// beyond cap are dropped (and released). Tensor outputs are new handles.
tf_err tf_op_call(tf_op op, const tf_val* args, int32_t nargs, const int64_t* arena,
                  tf_val* outs, int32_t cap, int32_t* nout, uint64_t* scope);
// tf_op_typed: *out is 1 when op has a typed fast path (an operator of
// tensors, optional tensors and Scalars returning one tensor).
tf_err tf_op_typed(tf_op op, int32_t* out);
// tf_ops_set_typed switches the typed fast path on (1) or off (0, every
// call boxed; TORCHFIT_OPS=boxed starts with it off); *was is the setting
// before.
tf_err tf_ops_set_typed(int32_t on, int32_t* was);
// tf_ops_typed_here: how many typed calls the calling thread has made.
tf_err tf_ops_typed_here(uint64_t* out);
// tf_op_schema writes the op's schema text (malloc'd) for error messages.
tf_err tf_op_schema(tf_op op, char** out);

// ---- tensors ---------------------------------------------------------------
void tf_tensor_free(tf_tensor t);
tf_err tf_tensor_clone_handle(tf_tensor t, tf_tensor* out);  // a second reference
// tf_tensor_from_data copies nbytes from data into a new CPU tensor.
tf_err tf_tensor_from_data(const void* data, size_t nbytes, const int64_t* shape, int32_t ndim,
                           int32_t dtype, tf_tensor* out);
// tf_tensor_copy_to copies the tensor's elements (any device, any layout) into dst.
tf_err tf_tensor_copy_to(tf_tensor t, void* dst, size_t nbytes);
// tf_tensor_info: dtype, ndim (shape written up to cap dims), device, flags.
typedef struct {
  int32_t defined;
  int32_t dtype;
  int32_t ndim;
  int32_t device_type;
  int32_t device_index;
  int32_t requires_grad;
  int32_t is_leaf;
  int32_t is_contiguous;
  int64_t numel;
  int64_t nbytes;
} tf_info;
tf_err tf_tensor_info(tf_tensor t, tf_info* info, int64_t* shape, int64_t* strides, int32_t cap);
tf_err tf_tensor_same(tf_tensor a, tf_tensor b, int32_t* same_storage);
tf_err tf_tensor_data_ptr(tf_tensor t, uintptr_t* out);

// ---- autograd ----------------------------------------------------------------
tf_err tf_backward(tf_tensor t, tf_tensor grad /* may be NULL */, int32_t retain_graph,
                   int32_t create_graph);
tf_err tf_grad(tf_tensor t, tf_tensor* out /* NULL if none */);
tf_err tf_set_grad(tf_tensor t, tf_tensor g /* NULL clears */);
tf_err tf_set_requires_grad(tf_tensor t, int32_t on);
tf_err tf_autograd_grad(const tf_tensor* outputs, int32_t nout, const tf_tensor* grad_outputs,
                        const tf_tensor* inputs, int32_t nin, int32_t retain_graph,
                        int32_t create_graph, int32_t allow_unused, tf_tensor* grads);
// Thread-local modes: each setter returns the previous value.
tf_err tf_grad_mode(int32_t set /* -1: query only */, int32_t* prev);
tf_err tf_inference_mode_enter(void** guard);
tf_err tf_inference_mode_exit(void* guard);

// ---- autocast (per OS thread) ------------------------------------------------------
// device_type 0: CPU, 1: CUDA. Enter saves the previous state into *prev,
// applies (enabled, dtype) and increments the nesting count; exit restores
// *prev and clears the autocast weight cache when the outermost region ends.
typedef struct {
  int32_t enabled;
  int32_t dtype;
} tf_autocast_state;
tf_err tf_autocast_enter(int32_t device_type, int32_t enabled, int32_t dtype, tf_autocast_state* prev);
tf_err tf_autocast_exit(int32_t device_type, const tf_autocast_state* prev);
tf_err tf_autocast_get(int32_t device_type, tf_autocast_state* out);
tf_err tf_autocast_clear_cache(void);

// ---- activation checkpointing ---------------------------------------------------------
// tf_checkpoint runs Go function fn (registered in Go) on inputs without
// keeping its activations; backward runs fn again with grad enabled, the
// forward's RNG state (CPU and CUDA generators) and autocast state, and
// backpropagates through it. Outputs are written to outs (malloc'd array,
// free with free()); *nout is their count.
tf_err tf_checkpoint(uint64_t fn, const tf_tensor* inputs, int32_t nin, tf_tensor** outs, int32_t* nout);

// The random generators' states (CPU and every CUDA device), taken and put
// back (grad-cache re-forwards a chunk under the RNG state of its first pass).
tf_err tf_rng_snapshot_take(void** out);
tf_err tf_rng_snapshot_apply(void* snap);
void tf_rng_snapshot_free(void* snap);

// ---- scopes -------------------------------------------------------------------
// The calling OS thread's current tensor scope (0: none). Go's Tidy locks its
// goroutine to the thread, so tensors created on this thread while a scope is
// set belong to that goroutine's scope; tf_op_call reports it with its results.
uint64_t tf_scope_swap(uint64_t scope);
uint64_t tf_scope_current(void);

// ---- memory -----------------------------------------------------------------------
// device_type 0: CPU (torchfit's counting allocator), 1: CUDA (the caching allocator).
typedef struct {
  int64_t allocated;       // bytes held by live tensors
  int64_t peak_allocated;  // high-water mark since the last reset
  int64_t reserved;        // bytes held by the allocator (CUDA cache); CPU: = allocated
  int64_t peak_reserved;
  int64_t num_blocks;      // live allocations
  int64_t num_allocs;      // allocations since start
  int64_t num_ooms;        // allocations refused
  int64_t limit;           // cap in bytes (0: none)
  int64_t last_oom_request;
  int64_t device_total;    // CUDA: device memory (cudaMemGetInfo)
  int64_t device_free;
  int32_t counting;        // CPU: the counting allocator is libtorch's CPU allocator
} tf_memstats;
tf_err tf_mem_stats(int32_t device_type, int32_t device, tf_memstats* out);
tf_err tf_mem_reset_peak(int32_t device_type, int32_t device);
// CPU counting allocator's event trace: on 1 starts it; on 0 stops it and
// returns the events (+bytes allocated, -bytes freed, in order) in *events
// (malloc'd, the caller frees; NULL when *n is 0).
tf_err tf_mem_trace(int32_t on, int64_t** events, int64_t* n);
// bytes > 0 sets an absolute cap; otherwise fraction (of device memory; CUDA only).
tf_err tf_mem_set_limit(int32_t device_type, int32_t device, int64_t bytes, double fraction);
// *done is 0 when there is no cache to empty (CPU builds).
tf_err tf_mem_empty_cache(int32_t* done);
// Frees the cuBLAS/cuBLASLt workspaces libtorch keeps per handle and stream
// (torch._C._cuda_clearCublasWorkspaces); done 0 on CPU builds.
tf_err tf_mem_clear_workspaces(int32_t* done);

// ---- global state -------------------------------------------------------------
tf_err tf_manual_seed(uint64_t seed);
// The default CPU generator's state (a uint8 tensor), and restoring it.
tf_err tf_rng_get_state(tf_tensor* out);
tf_err tf_rng_set_state(tf_tensor state);
tf_err tf_set_num_threads(int32_t n);
tf_err tf_get_num_threads(int32_t* n);
tf_err tf_version(int32_t* major, int32_t* minor, int32_t* patch);
tf_err tf_cuda_device_count(int32_t* n);

// ---- what was built and linked (backend.cc) -------------------------------------
typedef struct {
  int32_t header_major, header_minor, header_patch;  // torch/version.h compiled against
  int32_t cxx11_abi;                                  // _GLIBCXX_USE_CXX11_ABI compiled with
  int32_t cuda_tag;                                   // the shim was compiled with the cuda tag
} tf_build;
// config: at::show_config() of the loaded library; library: the file
// libtorch_cpu was loaded from. Both malloc'd.
tf_err tf_build_info(tf_build* out, char** config, char** library);
typedef struct {
  int32_t hooks;                // libtorch_cuda is loaded (its hooks registered)
  int32_t device_count;         // cudaGetDeviceCount (0 on error)
  int32_t cuda_error;           // its error code (0: none)
  int32_t driver_version;       // cudaDriverGetVersion (0: no driver)
  int32_t expandable_segments;  // the caching allocator's setting (-1: unknown)
  int64_t cudart_version;       // CUDA runtime libtorch was built with
  int64_t cudnn_version;        // 0: none
  int64_t nccl_version;         // 0: none
} tf_cudainfo;
// error: the CUDA runtime's error text (NULL: none); alloc_conf: the
// allocator settings in force. Both malloc'd.
tf_err tf_cuda_info(tf_cudainfo* out, char** error, char** alloc_conf);
typedef struct {
  char name[256];
  int32_t major, minor, multiprocessors;
  int64_t total, free;
} tf_cudadevice;
tf_err tf_cuda_device_props(int32_t device, tf_cudadevice* out);
// tf_library_version reads the version of the libtorch whose libtorch_cpu
// is at path (pip's version.py, a zip's build-version, a versioned file
// name; "" if unknown) and why it cannot be used with the headers the shim
// was compiled against ("" if it can). The shim runs the same check on the
// library it loaded before anything else, and exits 2 on a mismatch.
tf_err tf_library_version(const char* path, char** version, char** mismatch);
tf_err tf_cuda_synchronize(int32_t device);

// ---- CPU backends (backend.cc) ---------------------------------------------------
// oneDNN's primitive cache capacity: *prev receives it (-1 when this libtorch
// exposes no oneDNN API); set >= 0 changes it (0 disables the cache).
tf_err tf_onednn_cache_capacity(int32_t set, int32_t* prev);
// tf_onednn_version reports the linked oneDNN's version (-1s when hidden).
tf_err tf_onednn_version(int32_t* major, int32_t* minor, int32_t* patch);
// tf_thread_probe starts a new OS thread and reports OpenMP's max threads
// there before and after its first shim call (-1: no OpenMP). For tests.
tf_err tf_thread_probe(int32_t* before, int32_t* after);
// tf_inject_fault makes the after_calls-th op call from now throw: kind 1
// std::bad_alloc, 2 std::bad_array_new_length, 3 std::future_error (broken
// promise), other: a c10::Error. after_calls 0 disarms. For tests.
tf_err tf_inject_fault(int32_t kind, int64_t after_calls);
// tf_exhaustion_probe: *prev receives the bytes a std::bad_alloc's
// classification tries to allocate (out of host memory when it cannot);
// set > 0 changes it. Tests set one no host can give.
tf_err tf_exhaustion_probe(int64_t set, int64_t* prev);

#ifdef __cplusplus
}
#endif
#endif
