// memory.cc: exact memory accounting and caps.
//
// CPU: a counting allocator replaces libtorch's default CPU allocator when
// the shim loads. It keeps current/peak bytes and allocation counts, and
// refuses an allocation that would pass the cap with c10::OutOfMemoryError,
// the same error type CUDA's caching allocator raises, so the whole OOM path
// (error, recovery, smaller micro-batch) runs on machines without a GPU.
//
// CUDA (cuda build tag): stats, caps and cache control come from libtorch's
// CUDA caching allocator.
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "shim.h"

#ifdef TF_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <ATen/ops/empty.h>
#if TF_HAS_CLEAR_CUBLAS_WORKSPACES
// Declared here rather than through ATen/cuda/CUDAContextLight.h, whose
// includes pull in the cuBLAS, cuSPARSE and cuSOLVER headers.
namespace at::cuda {
void clearCublasWorkspaces();
}
#endif
#endif

namespace {

// Each block carries a header holding its size; 64 bytes keeps the
// alignment c10::alloc_cpu guarantees.
constexpr size_t kHeader = 64;

struct Counters {
  std::atomic<int64_t> allocated{0}, peak{0}, blocks{0}, total_allocs{0}, ooms{0}, limit{0}, last_request{0};
};

Counters counters;

// The event trace (tf_mem_trace): every counted allocation (+bytes) and
// free (−bytes) in order, from every thread, while on. One static
// recorder, never destroyed, so a free racing with the end of a trace
// finds it alive.
struct Trace {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<int64_t> events;
  bool lost = false;  // an event could not be stored (the host is out of memory)
};

Trace trace;

// record runs inside the allocator and its deleter, which must not throw:
// an event that cannot be stored marks the trace incomplete instead.
inline void record(int64_t n) noexcept {
  if (!trace.on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> g(trace.mu);
  if (!trace.on.load(std::memory_order_relaxed)) return;
  try {
    trace.events.push_back(n);
  } catch (...) {
    trace.lost = true;
  }
}

void update_peak(int64_t now) {
  int64_t p = counters.peak.load(std::memory_order_relaxed);
  while (now > p && !counters.peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void counting_delete(void* ptr) {
  if (!ptr) return;
  char* base = static_cast<char*>(ptr) - kHeader;
  int64_t n = *reinterpret_cast<int64_t*>(base);
  counters.allocated.fetch_sub(n, std::memory_order_relaxed);
  counters.blocks.fetch_sub(1, std::memory_order_relaxed);
  record(-n);
  c10::free_cpu(base);
}

std::string human(int64_t n) {
  char buf[64];
  if (n >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(int64_t(1) << 30));
  else if (n >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1 << 20));
  else if (n >= (1 << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", n / double(1 << 10));
  else std::snprintf(buf, sizeof buf, "%" PRId64 " bytes", n);
  return buf;
}

struct CountingAllocator final : public at::Allocator {
  at::DataPtr allocate(size_t nbytes) TF_ALLOCATE_CONST override {
    const auto dev = at::Device(at::DeviceType::CPU);
    if (nbytes == 0) return {nullptr, nullptr, &counting_delete, dev};
    const int64_t n = static_cast<int64_t>(nbytes);
    const int64_t now = counters.allocated.fetch_add(n, std::memory_order_relaxed) + n;
    const int64_t cap = counters.limit.load(std::memory_order_relaxed);
    if (cap > 0 && now > cap) {
      counters.allocated.fetch_sub(n, std::memory_order_relaxed);
      counters.ooms.fetch_add(1, std::memory_order_relaxed);
      counters.last_request.store(n, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", n, " bytes (",
                       human(n), "); ", human(now - n), " allocated of a ", human(cap),
                       " limit set by torchfit (SetMemoryLimit)");
    }
    void* base = nullptr;
    try {
      base = c10::alloc_cpu(nbytes + kHeader);
    } catch (...) {
      counters.allocated.fetch_sub(n, std::memory_order_relaxed);
      counters.ooms.fetch_add(1, std::memory_order_relaxed);
      counters.last_request.store(n, std::memory_order_relaxed);
      throw;
    }
    *static_cast<int64_t*>(base) = n;
    update_peak(now);
    counters.blocks.fetch_add(1, std::memory_order_relaxed);
    counters.total_allocs.fetch_add(1, std::memory_order_relaxed);
    record(n);
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &counting_delete, dev};
  }

  at::DeleterFnPtr raw_deleter() const override { return &counting_delete; }

#if TF_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
};

CountingAllocator* counting_allocator() {
  static CountingAllocator alloc;  // never destroyed before libtorch's last free
  return &alloc;
}

// Installed when the shim is loaded, before any tensor torchfit makes.
const bool installed = [] {
  c10::SetCPUAllocator(counting_allocator(), /*priority=*/100);
#if defined(TF_CUDA) && TF_HAS_EXPANDABLE_SEGMENTS
  // The default the seeds set by hand each time; the user's own setting wins.
  if (!std::getenv("PYTORCH_CUDA_ALLOC_CONF") && !std::getenv("PYTORCH_ALLOC_CONF")) {
    setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 0);
  }
#endif
  return true;
}();

#ifdef TF_CUDA
double cuda_fraction[64] = {0};

// cuda_ready initialises CUDA and its caching allocator (Python's
// _lazy_init): before that the allocator has no devices, and its stats and
// settings calls fail with "Invalid device argument" (seen on an H100).
void cuda_ready(int32_t device) {
  const int n = at::detail::getCUDAHooks().getNumGPUs();
  TORCH_CHECK(device >= 0 && device < n, "cuda:", device, " does not exist: CUDA sees ", n, " device(s)");
  TF_LAZY_INIT_CUDA();
}
#endif

}  // namespace

extern "C" {

tf_err tf_mem_stats(int32_t device_type, int32_t device, tf_memstats* out) {
  TF_TRY
  *out = tf_memstats{};
  if (device_type == 0) {
    out->allocated = counters.allocated.load();
    out->peak_allocated = counters.peak.load();
    out->reserved = out->allocated;  // no CPU cache: what is allocated is held
    out->peak_reserved = out->peak_allocated;
    out->num_blocks = counters.blocks.load();
    out->num_allocs = counters.total_allocs.load();
    out->num_ooms = counters.ooms.load();
    out->limit = counters.limit.load();
    out->last_oom_request = counters.last_request.load();
    out->counting = c10::GetCPUAllocator() == counting_allocator();
    return nullptr;
  }
#ifdef TF_CUDA
  TORCH_CHECK(device_type == 1, "unknown device type ", device_type);
  cuda_ready(device);
  auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const size_t agg = 0;  // StatType::AGGREGATE
  out->allocated = s.allocated_bytes[agg].current;
  out->peak_allocated = s.allocated_bytes[agg].peak;
  out->reserved = s.reserved_bytes[agg].current;
  out->peak_reserved = s.reserved_bytes[agg].peak;
  out->num_blocks = s.allocation[agg].current;
  out->num_allocs = s.allocation[agg].allocated;
  out->num_ooms = s.num_ooms;
  size_t free_b = 0, total_b = 0;
  tf::DeviceScope on_device(device);
  C10_CUDA_CHECK(TF_CUDART(cudaMemGetInfo)(&free_b, &total_b));
  out->device_total = static_cast<int64_t>(total_b);
  out->device_free = static_cast<int64_t>(free_b);
  if (device >= 0 && device < 64 && cuda_fraction[device] > 0) {
    out->limit = static_cast<int64_t>(cuda_fraction[device] * total_b);
  }
  out->counting = 1;
  return nullptr;
#else
  TORCH_CHECK(false, "CUDA not available: torchfit was built without the cuda tag");
#endif
  TF_CATCH
}

tf_err tf_mem_reset_peak(int32_t device_type, int32_t device) {
  TF_TRY
  if (device_type == 0) {
    counters.peak.store(counters.allocated.load());
    return nullptr;
  }
#ifdef TF_CUDA
  cuda_ready(device);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
#else
  (void)device;
  TORCH_CHECK(false, "CUDA not available: torchfit was built without the cuda tag");
#endif
  TF_CATCH
}

tf_err tf_mem_trace(int32_t on, int64_t** events, int64_t* n) {
  TF_TRY
  std::lock_guard<std::mutex> g(trace.mu);
  if (on) {
    TORCH_CHECK(!trace.on.load(), "a memory trace is already running");
    trace.events.clear();
    trace.lost = false;
    trace.on.store(true);
    return nullptr;
  }
  TORCH_CHECK(trace.on.load(), "no memory trace is running");
  trace.on.store(false);
  std::vector<int64_t> ev;
  ev.swap(trace.events);
  TORCH_CHECK(!trace.lost, "the memory trace lost events: the host ran out of memory storing them");
  *n = static_cast<int64_t>(ev.size());
  *events = nullptr;
  if (!ev.empty()) {
    *events = static_cast<int64_t*>(std::malloc(ev.size() * sizeof(int64_t)));
    TORCH_CHECK(*events, "out of memory copying ", ev.size(), " trace events");
    std::memcpy(*events, ev.data(), ev.size() * sizeof(int64_t));
  }
  TF_CATCH
}

tf_err tf_mem_set_limit(int32_t device_type, int32_t device, int64_t bytes, double fraction) {
  TF_TRY
  if (device_type == 0) {
    TORCH_CHECK(bytes >= 0, "memory limit must be >= 0 (0 removes it)");
    counters.limit.store(bytes);
    return nullptr;
  }
#ifdef TF_CUDA
  TORCH_CHECK(device >= 0 && device < 64, "bad CUDA device ", device);
  cuda_ready(device);
  tf::DeviceScope on_device(device);
  size_t free_b = 0, total_b = 0;
  C10_CUDA_CHECK(TF_CUDART(cudaMemGetInfo)(&free_b, &total_b));
  if (bytes > 0) fraction = static_cast<double>(bytes) / static_cast<double>(total_b);
  if (fraction <= 0) fraction = 1.0;
  TORCH_CHECK(fraction <= 1.0, "memory limit exceeds the device's ", total_b, " bytes");
  // The allocator must exist before its fraction can be set (Python's _lazy_init).
  at::empty({1}, at::TensorOptions().device(at::Device(at::kCUDA, device)));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device);
  cuda_fraction[device] = fraction;
#else
  (void)device;
  (void)fraction;
  TORCH_CHECK(false, "CUDA not available: torchfit was built without the cuda tag");
#endif
  TF_CATCH
}

tf_err tf_mem_empty_cache(int32_t* done) {
  TF_TRY
#ifdef TF_CUDA
  // A CUDA build on a machine without a device has no cache to empty.
  if (at::detail::getCUDAHooks().getNumGPUs() == 0) {
    *done = 0;
    return nullptr;
  }
  TF_LAZY_INIT_CUDA();
  c10::cuda::CUDACachingAllocator::emptyCache();
  *done = 1;
#else
  *done = 0;
#endif
  TF_CATCH
}

tf_err tf_mem_clear_workspaces(int32_t* done) {
  TF_TRY
  *done = 0;
#if defined(TF_CUDA) && TF_HAS_CLEAR_CUBLAS_WORKSPACES
  if (at::detail::getCUDAHooks().getNumGPUs() > 0) {
    TF_LAZY_INIT_CUDA();
    at::cuda::clearCublasWorkspaces();
    *done = 1;
  }
#endif
  TF_CATCH
}

}  // extern "C"
