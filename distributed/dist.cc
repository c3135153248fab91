// dist.cc: torchfit's binding of libtorch's c10d (stores, Gloo and NCCL
// process groups, collectives) and its bucketed gradient reducer. The C
// interface and its error protocol are in dist.h.

#define USE_C10D_GLOO 1
#ifdef TFD_WITH_NCCL
#define USE_C10D_NCCL 1
#endif

#include "dist.h"

#include "shim.h"  // tf_tensor_s, tf::wrap / tf::unwrap (torch/internal/capi)

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gloo/common/error.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/exception.h>
#ifdef TFD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

struct tfd_store_s {
  c10::intrusive_ptr<c10d::Store> s;
  ms timeout;
};

#if TF_C10D_BACKEND
using tfd_backend = c10d::Backend;
#else
using tfd_backend = c10d::ProcessGroup;
#endif

struct tfd_group_s {
  c10::intrusive_ptr<tfd_backend> pg;
  ms timeout;
  int rank = 0, size = 1;
  bool nccl = false;
  // Set once a collective fails or times out: the group's connections are
  // in an unknown state and its threads may be blocked, so every later call
  // fails at once (kind B) and the group is not destroyed (tfd_group_free).
  std::atomic<bool> broken{false};
  std::string why;
  std::mutex mu;
};

namespace {

tfd_err make_error(char kind, const std::string& msg) {
  std::string s;
  s.reserve(msg.size() + 2);
  s += kind;
  s += ':';
  s += msg;
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) {
    return nullptr;  // nothing better to do without memory
  }
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// An error carrying its kind through C++ code until the C boundary.
struct kind_error : std::runtime_error {
  char kind;
  kind_error(char k, const std::string& m) : std::runtime_error(m), kind(k) {}
};

// What a failed wait means: kind T when it failed at or after its deadline
// (Gloo reports its own transport timeouts as I/O errors: the elapsed time
// tells them from a connection a dead peer closed), P for a peer's
// connection, E otherwise.
char classify(std::exception_ptr e, clock_type::duration elapsed, ms timeout, std::string* msg) {
  const bool late = elapsed >= timeout - timeout / 20;
  try {
    std::rethrow_exception(e);
  } catch (const kind_error& x) {
    *msg = x.what();
    return x.kind;
  } catch (const ::gloo::IoException& x) {
    *msg = x.what();
    return late ? 'T' : 'P';
  } catch (const ::gloo::Exception& x) {
    *msg = x.what();
    return late ? 'T' : 'P';
  } catch (const c10d::TimeoutError& x) {
    *msg = x.what();
    return 'T';
  } catch (const c10::OutOfMemoryError& x) {
    *msg = x.what_without_backtrace();
    return 'O';
  } catch (const c10::Error& x) {
    *msg = x.what_without_backtrace();
    return late ? 'T' : 'E';
  } catch (const std::system_error& x) {
    *msg = x.what();
    return late ? 'T' : 'P';
  } catch (const std::exception& x) {
    *msg = x.what();
    return late ? 'T' : 'E';
  } catch (...) {
    *msg = "unknown C++ exception";
    return 'E';
  }
}

void mark_broken(tfd_group g, const std::string& why) {
  std::lock_guard<std::mutex> lock(g->mu);
  if (!g->broken.exchange(true)) {
    g->why = why;
  }
}

void check_usable(tfd_group g) {
  if (g->broken.load()) {
    std::lock_guard<std::mutex> lock(g->mu);
    throw kind_error('B', "process group unusable after an earlier failure: " + g->why);
  }
}

// wait_work waits for w up to the group's timeout (plus a margin for Gloo's
// own timeout, which is the group's, to fire first). A failure breaks the
// group and throws kind_error.
void wait_work(tfd_group g, const c10::intrusive_ptr<c10d::Work>& w, clock_type::time_point start,
               const char* what) {
  const ms limit = g->timeout + ms(2000);
  try {
    w->wait(limit);
  } catch (...) {
    auto err = std::current_exception();
    std::string msg;
    char kind;
    if (!w->isCompleted()) {
      kind = 'T';
      msg = std::string(what) + " did not complete within " + std::to_string(g->timeout.count()) + " ms";
    } else {
      kind = classify(err, clock_type::now() - start, g->timeout, &msg);
      msg = std::string(what) + ": " + msg;
    }
    if (kind != 'O') {
      mark_broken(g, msg);
    }
    throw kind_error(kind, msg);
  }
}

// run issues a collective and waits for it.
template <typename F>
void run(tfd_group g, const char* what, F issue) {
  check_usable(g);
  const auto start = clock_type::now();
  c10::intrusive_ptr<c10d::Work> w;
  try {
    w = issue();
  } catch (...) {
    std::string msg;
    char kind = classify(std::current_exception(), clock_type::now() - start, g->timeout, &msg);
    throw kind_error(kind, std::string(what) + ": " + msg);
  }
  wait_work(g, w, start, what);
}

std::vector<at::Tensor> tensors(const tf_tensor* ts, int32_t n) {
  std::vector<at::Tensor> v;
  v.reserve(n);
  for (int32_t i = 0; i < n; i++) {
    const at::Tensor& t = tf::unwrap(ts[i]);
    TORCH_CHECK(t.defined(), "tensor ", i, " is undefined");
    v.push_back(t);
  }
  return v;
}

// A collective's tensors must be contiguous (Gloo reads raw buffers):
// non-contiguous ones go through a contiguous copy written back after.
struct Staged {
  std::vector<at::Tensor> orig, work;
  explicit Staged(std::vector<at::Tensor> ts) : orig(std::move(ts)) {
    for (auto& t : orig) {
      work.push_back(t.is_contiguous() ? t : t.contiguous());
    }
  }
  void finish() {
    for (size_t i = 0; i < orig.size(); i++) {
      if (!work[i].is_same(orig[i])) {
        orig[i].copy_(work[i]);
      }
    }
  }
};

c10d::ReduceOp reduce_op(int32_t op) {
  TORCH_CHECK(op >= 0 && op <= 4, "unknown reduce op ", op);
  return c10d::ReduceOp(static_cast<c10d::ReduceOp::RedOpType>(op));
}

}  // namespace

#define TFD_TRY try {
#define TFD_CATCH(timeout)                                                              \
  }                                                                                     \
  catch (const kind_error& e) {                                                         \
    return make_error(e.kind, e.what());                                                \
  }                                                                                     \
  catch (...) {                                                                         \
    std::string msg;                                                                    \
    char k = classify(std::current_exception(), clock_type::duration::zero(), (timeout), &msg); \
    return make_error(k, msg);                                                          \
  }                                                                                     \
  return nullptr;

// TFD_CATCH_TIMED classifies by the time the call took (store waits).
#define TFD_CATCH_TIMED(timeout)                                                        \
  }                                                                                     \
  catch (const kind_error& e) {                                                         \
    return make_error(e.kind, e.what());                                                \
  }                                                                                     \
  catch (...) {                                                                         \
    std::string msg;                                                                    \
    char k = classify(std::current_exception(), clock_type::now() - tfd_start_glob_, (timeout), &msg); \
    return make_error(k, msg);                                                          \
  }                                                                                     \
  return nullptr;

extern "C" {

void tfd_free_error(tfd_err e) { std::free(e); }

// ---- stores -------------------------------------------------------------------

tfd_err tfd_tcp_store(const char* host, int32_t port, int32_t world, int64_t timeout_ms, tfd_store* out) {
  const auto tfd_start_glob_ = clock_type::now();
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(port);
    o.isServer = false;
    // As Python's clients do: a client counts itself in (the "init/" key),
    // which a c10d server in rank 0 (Python's) waits for in its constructor.
    if (world > 0) {
      o.numWorkers = static_cast<std::size_t>(world);
    }
    o.waitWorkers = world > 0;
    o.timeout = ms(timeout_ms);
    auto s = c10::make_intrusive<c10d::TCPStore>(std::string(host), o);
    *out = new tfd_store_s{s, ms(timeout_ms)};
  TFD_CATCH_TIMED(ms(timeout_ms))
}

tfd_err tfd_file_store(const char* path, int32_t world, int64_t timeout_ms, tfd_store* out) {
  TFD_TRY
  auto s = c10::make_intrusive<c10d::FileStore>(std::string(path), world);
  s->setTimeout(ms(timeout_ms));
  *out = new tfd_store_s{s, ms(timeout_ms)};
  TFD_CATCH(ms(timeout_ms))
}

tfd_err tfd_prefix_store(const char* prefix, tfd_store base, tfd_store* out) {
  TFD_TRY
  auto s = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), base->s);
  *out = new tfd_store_s{s, base->timeout};
  TFD_CATCH(base->timeout)
}

void tfd_store_free(tfd_store s) { delete s; }

tfd_err tfd_store_set(tfd_store s, const char* key, const void* value, size_t n) {
  const auto tfd_start_glob_ = clock_type::now();
  try {
    const auto* p = static_cast<const uint8_t*>(value);
    s->s->set(std::string(key), std::vector<uint8_t>(p, p + n));
  TFD_CATCH_TIMED(s->timeout)
}

tfd_err tfd_store_get(tfd_store s, const char* key, void** value, size_t* n) {
  const auto tfd_start_glob_ = clock_type::now();
  try {
    auto v = s->s->get(std::string(key));
    void* p = std::malloc(v.size() > 0 ? v.size() : 1);
    if (p == nullptr) {
      return make_error('O', "tfd_store_get: malloc failed");
    }
    if (!v.empty()) {
      std::memcpy(p, v.data(), v.size());
    }
    *value = p;
    *n = v.size();
  TFD_CATCH_TIMED(s->timeout)
}

tfd_err tfd_store_add(tfd_store s, const char* key, int64_t delta, int64_t* out) {
  const auto tfd_start_glob_ = clock_type::now();
  try {
    *out = s->s->add(std::string(key), delta);
  TFD_CATCH_TIMED(s->timeout)
}

// ---- process groups ----------------------------------------------------------

int32_t tfd_has_nccl(void) {
#ifdef TFD_WITH_NCCL
  return 1;
#else
  return 0;
#endif
}

tfd_err tfd_group_new(tfd_store store, int32_t rank, int32_t size, int32_t backend, const char* host,
                      const char* iface, int64_t timeout_ms, int32_t threads, tfd_group* out) {
  const auto tfd_start_glob_ = clock_type::now();
  try {
    auto g = std::make_unique<tfd_group_s>();
    g->timeout = ms(timeout_ms);
    g->rank = rank;
    g->size = size;
    if (backend == TFD_NCCL) {
#ifdef TFD_WITH_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = ms(timeout_ms);
      g->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store->s, rank, size, o);
      g->nccl = true;
#else
      throw kind_error('E', "NCCL needs a CUDA build of torchfit (the cuda build tag and a CUDA libtorch)");
#endif
    } else {
      auto o = c10d::ProcessGroupGloo::Options::create(ms(timeout_ms));
      if (iface != nullptr && iface[0] != 0) {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(std::string(iface)));
      } else {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(std::string(host)));
      }
      if (threads > 0) {
        o->threads = threads;
      }
      g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store->s, rank, size, o);
    }
    *out = g.release();
  TFD_CATCH_TIMED(ms(timeout_ms))
}

void tfd_group_free(tfd_group g, int32_t* leaked) {
  if (g == nullptr) {
    return;
  }
  if (g->broken.load()) {
    // ~ProcessGroupGloo waits for queued work and joins its threads, which
    // may be blocked on a dead peer until Gloo's timeout: leave it.
    *leaked = 1;
    return;
  }
  *leaked = 0;
  try {
    delete g;
  } catch (...) {
  }
}

tfd_err tfd_group_set_sequence_number(tfd_group g) {
  TFD_TRY
  check_usable(g);
  g->pg->setSequenceNumberForGroup();
  TFD_CATCH(g->timeout)
}

tfd_err tfd_allreduce(tfd_group g, const tf_tensor* ts, int32_t n, int32_t op) {
  TFD_TRY
  Staged st(tensors(ts, n));
  c10d::AllreduceOptions o;
  o.reduceOp = reduce_op(op);
  run(g, "all-reduce", [&] { return g->pg->allreduce(st.work, o); });
  st.finish();
  TFD_CATCH(g->timeout)
}

tfd_err tfd_broadcast(tfd_group g, const tf_tensor* ts, int32_t n, int32_t root) {
  TFD_TRY
  TORCH_CHECK(root >= 0 && root < g->size, "broadcast root ", root, " outside [0, ", g->size, ")");
  Staged st(tensors(ts, n));
  c10d::BroadcastOptions o;
  o.rootRank = root;
  run(g, "broadcast", [&] { return g->pg->broadcast(st.work, o); });
  st.finish();
  TFD_CATCH(g->timeout)
}

tfd_err tfd_broadcast_coalesced(tfd_group g, const tf_tensor* ts, int32_t n, int32_t root, int64_t bucket_bytes) {
  TFD_TRY
  TORCH_CHECK(root >= 0 && root < g->size, "broadcast root ", root, " outside [0, ", g->size, ")");
  at::NoGradGuard no_grad;
  auto all = tensors(ts, n);
  size_t i = 0;
  while (i < all.size()) {
    // One buffer: consecutive tensors of one dtype and device, up to bucket_bytes.
    size_t j = i;
    int64_t bytes = 0;
    std::vector<at::Tensor> flat_parts;
    while (j < all.size() && all[j].scalar_type() == all[i].scalar_type() && all[j].device() == all[i].device() &&
           (j == i || bytes + all[j].nbytes() <= static_cast<uint64_t>(bucket_bytes))) {
      bytes += all[j].nbytes();
      flat_parts.push_back(all[j].reshape({-1}));
      j++;
    }
    std::vector<at::Tensor> buf{at::cat(flat_parts)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    run(g, "broadcast", [&] { return g->pg->broadcast(buf, o); });
    if (g->rank != root) {
      int64_t off = 0;
      for (size_t k = i; k < j; k++) {
        const int64_t m = all[k].numel();
        all[k].copy_(buf[0].narrow(0, off, m).view(all[k].sizes()));
        off += m;
      }
    }
    i = j;
  }
  TFD_CATCH(g->timeout)
}

tfd_err tfd_allgather(tfd_group g, tf_tensor in, const tf_tensor* outs) {
  TFD_TRY
  at::Tensor x = tf::unwrap(in);
  TORCH_CHECK(x.defined(), "all-gather: input is undefined");
  x = x.contiguous();
  Staged st(tensors(outs, g->size));
  for (auto& o : st.work) {
    TORCH_CHECK(o.sizes() == x.sizes() && o.scalar_type() == x.scalar_type(),
                "all-gather: each output must have the input's shape ", x.sizes(), " and dtype");
  }
  std::vector<std::vector<at::Tensor>> o{st.work};
  std::vector<at::Tensor> i{x};
  run(g, "all-gather", [&] { return g->pg->allgather(o, i); });
  for (size_t k = 0; k < st.work.size(); k++) {
    if (!o[0][k].is_same(st.work[k])) {
      st.work[k].copy_(o[0][k]);
    }
  }
  st.finish();
  TFD_CATCH(g->timeout)
}

tfd_err tfd_reduce_scatter(tfd_group g, const tf_tensor* ins, tf_tensor out, int32_t op) {
  TFD_TRY
  at::NoGradGuard no_grad;
  auto xs = tensors(ins, g->size);
  at::Tensor y = tf::unwrap(out);
  TORCH_CHECK(y.defined(), "reduce-scatter: output is undefined");
  for (auto& x : xs) {
    TORCH_CHECK(x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type(),
                "reduce-scatter: each input must have the output's shape ", y.sizes(), " and dtype");
  }
  if (g->nccl) {
    Staged st({y});
    std::vector<std::vector<at::Tensor>> i{xs};
    c10d::ReduceScatterOptions o;
    o.reduceOp = reduce_op(op);
    run(g, "reduce-scatter", [&] { return g->pg->reduce_scatter(st.work, i, o); });
    st.finish();
  } else {
    // ProcessGroupGloo (1.13) has no reduce_scatter: all-reduce the
    // concatenation, keep this rank's part.
    std::vector<at::Tensor> parts;
    for (auto& x : xs) {
      parts.push_back(x.reshape({-1}));
    }
    std::vector<at::Tensor> buf{at::cat(parts)};
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    run(g, "reduce-scatter", [&] { return g->pg->allreduce(buf, o); });
    const int64_t m = y.numel();
    y.copy_(buf[0].narrow(0, g->rank * m, m).view(y.sizes()));
  }
  TFD_CATCH(g->timeout)
}

tfd_err tfd_barrier(tfd_group g) {
  TFD_TRY
  run(g, "barrier", [&] { return g->pg->barrier(); });
  TFD_CATCH(g->timeout)
}

tfd_err tfd_send(tfd_group g, tf_tensor t, int32_t dst, int32_t tag) {
  TFD_TRY
  std::vector<at::Tensor> v{tf::unwrap(t).contiguous()};
  run(g, "send", [&] { return g->pg->send(v, dst, tag); });
  TFD_CATCH(g->timeout)
}

tfd_err tfd_recv(tfd_group g, tf_tensor t, int32_t src, int32_t tag) {
  TFD_TRY
  Staged st({tf::unwrap(t)});
  run(g, "receive", [&] { return g->pg->recv(st.work, src, tag); });
  st.finish();
  TFD_CATCH(g->timeout)
}

}  // extern "C"

// ---- gradient reducer ----------------------------------------------------------

namespace {

struct Bucket {
  std::vector<size_t> params;  // indices into Reducer::params
  std::vector<int64_t> offsets;
  int64_t numel = 0;
  int64_t bytes = 0;
  at::TensorOptions options;
  // Per pass:
  size_t pending = 0;
  at::Tensor flat;
  c10::intrusive_ptr<c10d::Work> work;
  clock_type::time_point launched_at;
  bool launched = false;
};

struct ReducerState {
  tfd_group g;
  std::vector<at::Tensor> params;
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;
  std::mutex mu;
  bool armed = false;
  std::vector<bool> ready;
  size_t next = 0;
  int32_t in_backward = 0;
  // The first error a hook met launching a bucket (reported by finish).
  std::string error;
  char error_kind = 0;

  void reset_pass() {
    armed = false;
    next = 0;
    in_backward = 0;
    std::fill(ready.begin(), ready.end(), false);
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.flat = at::Tensor();
      b.work.reset();
      b.launched = false;
    }
  }

  // launch flattens bucket k's gradients (none: zeros) and starts its sum.
  void launch(size_t k) {
    Bucket& b = buckets[k];
    at::NoGradGuard no_grad;
    b.flat = at::empty({b.numel}, b.options);
    for (size_t j = 0; j < b.params.size(); j++) {
      const at::Tensor& p = params[b.params[j]];
      const at::Tensor& gr = p.grad();
      const int64_t m = p.numel();
      auto dst = b.flat.narrow(0, b.offsets[j], m);
      if (gr.defined()) {
        dst.copy_(gr.reshape({-1}));
      } else {
        dst.zero_();
      }
    }
    check_usable(g);
    std::vector<at::Tensor> v{b.flat};
    b.launched_at = clock_type::now();
    b.work = g->pg->allreduce(v);
    b.launched = true;
  }

  // launch_ready starts, in bucket order, every bucket whose gradients are
  // all accumulated: every rank starts the same collectives in the same
  // order whatever order its backward produced gradients in.
  void launch_ready(bool from_hook) {
    while (next < buckets.size() && buckets[next].pending == 0) {
      launch(next);
      if (from_hook) {
        in_backward++;
      }
      next++;
    }
  }

  void on_grad(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed || ready[i] || error_kind != 0) {
      return;
    }
    ready[i] = true;
    Bucket& b = buckets[bucket_of[i]];
    b.pending--;
    try {
      launch_ready(true);
    } catch (...) {
      // Do not throw into the autograd engine: finish reports it.
      std::string msg;
      error_kind = classify(std::current_exception(), clock_type::duration::zero(), g->timeout, &msg);
      error = "gradient all-reduce: " + msg;
    }
  }
};

}  // namespace

struct tfd_reducer_s {
  std::shared_ptr<ReducerState> st;
  // The parameters' gradient accumulators, kept alive so that the hooks
  // registered on them stay (autograd holds them only weakly).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
};

extern "C" {

tfd_err tfd_reducer_new(tfd_group g, const tf_tensor* params, int32_t n, int64_t bucket_bytes,
                        int64_t first_bytes, int32_t hooks, tfd_reducer* out) {
  TFD_TRY
  TORCH_CHECK(bucket_bytes > 0, "bucket size must be > 0");
  auto st = std::make_shared<ReducerState>();
  st->g = g;
  auto all = tensors(params, n);
  for (auto& p : all) {
    if (p.requires_grad()) {
      TORCH_CHECK(p.is_leaf(), "a parameter that requires grad must be a leaf tensor");
      st->params.push_back(p);
    }
  }
  st->bucket_of.resize(st->params.size());
  st->ready.resize(st->params.size());
  // Reverse order, one dtype and device per bucket.
  Bucket cur;
  int64_t cap = first_bytes > 0 ? std::min(first_bytes, bucket_bytes) : bucket_bytes;
  auto close = [&] {
    if (!cur.params.empty()) {
      st->buckets.push_back(std::move(cur));
      cap = bucket_bytes;
    }
    cur = Bucket();
  };
  for (size_t k = st->params.size(); k-- > 0;) {
    const at::Tensor& p = st->params[k];
    const int64_t bytes = static_cast<int64_t>(p.nbytes());
    if (!cur.params.empty() &&
        (p.scalar_type() != cur.options.dtype().toScalarType() || p.device() != cur.options.device() ||
         cur.bytes + bytes > cap)) {
      close();
    }
    if (cur.params.empty()) {
      cur.options = at::TensorOptions().dtype(p.scalar_type()).device(p.device());
    }
    cur.params.push_back(k);
    cur.offsets.push_back(cur.numel);
    cur.numel += p.numel();
    cur.bytes += bytes;
  }
  close();
  for (size_t b = 0; b < st->buckets.size(); b++) {
    for (size_t i : st->buckets[b].params) {
      st->bucket_of[i] = b;
    }
  }
  st->reset_pass();
  auto r = std::make_unique<tfd_reducer_s>();
  r->st = st;
  if (hooks) {
    std::weak_ptr<ReducerState> weak = st;
    for (size_t i = 0; i < st->params.size(); i++) {
      auto acc = torch::autograd::impl::grad_accumulator(st->params[i]);
      TORCH_CHECK(acc != nullptr, "parameter ", i, " has no gradient accumulator");
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            if (auto s = weak.lock()) {
              s->on_grad(i);
            }
            return outputs;
          }));
      r->accumulators.push_back(std::move(acc));
    }
  }
  *out = r.release();
  TFD_CATCH(g->timeout)
}

void tfd_reducer_free(tfd_reducer r) { delete r; }

tfd_err tfd_reducer_arm(tfd_reducer r, int32_t sync) {
  TFD_TRY
  auto& st = *r->st;
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.next > 0 || st.armed) {
    // A pass that never finished (its window failed): start over. Buckets
    // it launched cannot be taken back, so the group is no longer in step.
    if (st.next > 0) {
      mark_broken(st.g, "a gradient all-reduce was started and never finished");
      check_usable(st.g);
    }
  }
  st.reset_pass();
  st.error.clear();
  st.error_kind = 0;
  st.armed = sync != 0;
  TFD_CATCH(r->st->g->timeout)
}

tfd_err tfd_reducer_finish(tfd_reducer r, tfd_reduce_stats* stats) {
  TFD_TRY
  auto& st = *r->st;
  std::lock_guard<std::mutex> lock(st.mu);
  struct Reset {
    ReducerState& s;
    ~Reset() { s.reset_pass(); }
  } reset{st};
  *stats = tfd_reduce_stats{};
  if (!st.armed) {
    return nullptr;
  }
  if (st.error_kind != 0) {
    throw kind_error(st.error_kind, st.error);
  }
  stats->launched_in_backward = st.in_backward;
  // Buckets backward did not complete (unused parameters, or hooks off).
  for (auto& b : st.buckets) {
    b.pending = 0;
  }
  st.launch_ready(false);
  const auto t0 = clock_type::now();
  for (auto& b : st.buckets) {
    wait_work(st.g, b.work, b.launched_at, "gradient all-reduce");
    stats->bytes += b.bytes;
  }
  const auto t1 = clock_type::now();
  {
    at::NoGradGuard no_grad;
    for (auto& b : st.buckets) {
      for (size_t j = 0; j < b.params.size(); j++) {
        at::Tensor& p = st.params[b.params[j]];
        auto src = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
        at::Tensor& gr = p.mutable_grad();
        if (gr.defined()) {
          gr.copy_(src);
        } else {
          gr = src.clone();
        }
      }
    }
  }
  const auto t2 = clock_type::now();
  stats->wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  stats->copy_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t2 - t1).count();
  stats->buckets = static_cast<int32_t>(st.buckets.size());
  TFD_CATCH(r->st->g->timeout)
}

tfd_err tfd_reducer_buckets(tfd_reducer r, int64_t* bytes, int32_t cap, int32_t* n) {
  TFD_TRY
  auto& st = *r->st;
  *n = static_cast<int32_t>(st.buckets.size());
  for (int32_t k = 0; k < cap && k < *n; k++) {
    bytes[k] = st.buckets[k].bytes;
  }
  TFD_CATCH(r->st->g->timeout)
}

}  // extern "C"
