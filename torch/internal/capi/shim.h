// shim.h: what every translation unit of the shim shares: the error
// protocol, tensor handles, and every libtorch version difference (1.13 vs
// 2.x, CPU vs CUDA) behind #if in this one place.
#pragma once

#include <c10/util/Exception.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/api/include/torch/version.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <new>
#include <string>

#include "capi.h"

#define TF_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))

// Optional type of the libtorch API (c10::optional became std::optional in 2.4).
#if TF_TORCH_AT_LEAST(2, 4)
#include <optional>
template <typename T>
using tf_optional = std::optional<T>;
#define TF_NULLOPT std::nullopt
#else
#include <c10/util/Optional.h>
template <typename T>
using tf_optional = c10::optional<T>;
#define TF_NULLOPT c10::nullopt
#endif

// CPU allocator interface: allocate() lost its const and copy_data() became
// pure virtual in 2.3.
#if TF_TORCH_AT_LEAST(2, 3)
#define TF_ALLOCATE_CONST
#define TF_HAS_COPY_DATA 1
#else
#define TF_ALLOCATE_CONST const
#define TF_HAS_COPY_DATA 0
#endif

// Autocast: 2.4 moved to a per-device API (set_autocast_enabled(DeviceType,
// bool), get_autocast_dtype(DeviceType), ...); 1.13 has per-backend names.
#define TF_AUTOCAST_PER_DEVICE TF_TORCH_AT_LEAST(2, 4)

// expandable_segments exists in the CUDA caching allocator from 2.1.
#define TF_HAS_EXPANDABLE_SEGMENTS TF_TORCH_AT_LEAST(2, 1)

// at::cuda::clearCublasWorkspaces frees the cuBLAS and cuBLASLt workspaces
// of every handle and stream (all threads') from 2.x; torchfit calls it for
// 2.0 on.
#define TF_HAS_CLEAR_CUBLAS_WORKSPACES TF_TORCH_AT_LEAST(2, 0)

// at::cuda::CUDAGraph's protected capture_ended_ and mempool_id_, which
// package cudagraph reads after a failed capture_end to end and release the
// capture's pool itself (capture_end throws before it does): checked in
// 2.11's header, not before.
#define TF_CUDAGRAPH_POOL_CLEANUP TF_TORCH_AT_LEAST(2, 11)

// c10d (package dist): from 2.0 ProcessGroupGloo and ProcessGroupNCCL derive
// from c10d::Backend, no longer from c10d::ProcessGroup; the collectives
// torchfit calls have the same signatures on both.
#define TF_C10D_BACKEND TF_TORCH_AT_LEAST(2, 0)

#ifdef TF_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
namespace tf {
// Makes device d current until the scope ends. (c10::cuda::CUDAGuard would
// do, but its header's inline event functions call the CUDA runtime
// directly, which would make every program link a libcudart file.)
struct DeviceScope {
  c10::DeviceIndex prev;
  explicit DeviceScope(int32_t d) : prev(c10::cuda::current_device()) {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(d));
  }
  ~DeviceScope() {
    try {
      c10::cuda::set_device(prev);
    } catch (...) {
    }
  }
};

// The CUDA runtime's function `name`, found in the process: libtorch_cuda
// loaded libcudart (libcudart.so.13 from a pip wheel's nvidia package,
// libcudart-<hash>.so.12 inside a libtorch zip), so torchfit links no CUDA
// runtime file of its own. Throws c10::Error when it is not there.
void* cudart_symbol(const char* name);
}  // namespace tf
#define TF_CUDART(fn) (reinterpret_cast<decltype(&::fn)>(tf::cudart_symbol(#fn)))

// Initialises CUDA and its caching allocator once (Python's _lazy_init);
// 2.x deprecates lazyInitCUDA for the device-generic lazyInitDevice.
#if TF_TORCH_AT_LEAST(2, 6)
#define TF_LAZY_INIT_CUDA() at::globalContext().lazyInitDevice(c10::DeviceType::CUDA)
#else
#define TF_LAZY_INIT_CUDA() at::globalContext().lazyInitCUDA()
#endif
#endif

struct tf_tensor_s {
  at::Tensor t;
};

namespace tf {

inline tf_tensor wrap(at::Tensor t) { return new tf_tensor_s{std::move(t)}; }

inline const at::Tensor& unwrap(tf_tensor h) {
  static const at::Tensor undefined;
  return h ? h->t : undefined;
}

tf_err make_error(char kind, const char* msg);

// A message is an out-of-memory error when libtorch says so in words
// (versions and backends without c10::OutOfMemoryError, or errors rethrown
// by the autograd engine as plain c10::Error).
bool is_oom_message(const char* msg);

// A fault below libtorch's own error handling: a std::bad_alloc that no
// allocator reported (no size, nothing refused by torchfit's counter or
// CUDA's), or a std::future_error. Both come out of oneDNN 2.6's primitive
// creation when it fails (backend.cc), and leave a broken entry in its
// primitive cache: the process is not safe to go on computing.
tf_err backend_error(const char* what);

// A std::bad_alloc (not a bad_array_new_length, never memory: a size gone
// negative) is out of host memory when the host is out of memory: when a
// further exhaustion_probe bytes cannot be allocated either (an address
// space cap, strict overcommit, memory gone). Then it is an "H:" error,
// out of memory (exit status 3) whichever allocation happened to fail
// first, a libtorch tensor's or a small one inside libtorch's CPU code.
// Otherwise memory is there and the allocation asked for garbage: a backend
// fault (backend_error), as oneDNN 2.6 throws one.
tf_err bad_alloc_error(const char* what);
extern std::atomic<int64_t> exhaustion_probe;

// Fault injection for tests (backend.cc): when armed, the Nth op call from
// now throws the requested C++ exception inside the shim's try block.
extern std::atomic<int64_t> fault_countdown;
void maybe_fault();

// Runs fn, a call into the autograd engine (backward, grad). When it
// throws, the engine has stopped at the first failing node and left the
// rest of that graph's ready tasks — nodes holding their saved tensors and
// the gradients flowing into them — in this thread's CPU ready queue,
// which outlives the call (the engine reuses it for the thread's next
// backward, and pops a later graph's newer nodes first): a backward that
// ran out of memory half-way kept its memory after its tensors were
// freed. drain_autograd empties the queue before the exception goes on
// (autograd.cc) — from the outermost call only: inside a backward (a Go
// function run by one) the queue still holds the live graph's tasks.
void drain_autograd() noexcept;
inline thread_local int engine_depth = 0;  // engine_calls running on this thread
template <class F>
void engine_call(F fn) {
  struct Depth {
    Depth() { engine_depth++; }
    ~Depth() { engine_depth--; }
  };
  try {
    Depth d;
    fn();
  } catch (...) {
    if (engine_depth == 0) drain_autograd();
    throw;
  }
}

// Every OS thread that enters the shim gets libtorch's OpenMP thread count
// before its first libtorch call (and again after tf_set_num_threads), so
// all threads agree on it as Python's single thread does (backend.cc).
extern std::atomic<int32_t> thread_generation;
void thread_setup();
inline void ensure_thread() {
  static thread_local int32_t seen = -1;
  const int32_t g = thread_generation.load(std::memory_order_relaxed);
  if (seen != g) {
    seen = g;
    thread_setup();
  }
}

}  // namespace tf

#define TF_TRY \
  try {        \
    tf::ensure_thread();
#define TF_CATCH                                                              \
  }                                                                           \
  catch (const c10::OutOfMemoryError& e) {                                    \
    return tf::make_error('O', e.what_without_backtrace());                   \
  }                                                                           \
  catch (const c10::Error& e) {                                               \
    const char* m = e.what_without_backtrace();                               \
    return tf::make_error(tf::is_oom_message(m) ? 'O' : 'E', m);              \
  }                                                                           \
  catch (const std::bad_array_new_length& e) {                               \
    return tf::backend_error(e.what());                                       \
  }                                                                           \
  catch (const std::bad_alloc& e) {                                           \
    return tf::bad_alloc_error(e.what());                                     \
  }                                                                           \
  catch (const std::future_error& e) {                                        \
    return tf::backend_error(e.what());                                       \
  }                                                                           \
  catch (const std::exception& e) {                                           \
    return tf::make_error(tf::is_oom_message(e.what()) ? 'O' : 'E', e.what()); \
  }                                                                           \
  catch (...) {                                                               \
    return tf::make_error('E', "unknown C++ exception");                      \
  }                                                                           \
  return nullptr;
