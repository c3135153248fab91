// backend.cc: the libraries under libtorch that torchfit has to manage
// itself: oneDNN's primitive cache, each OS thread's OpenMP setting, the
// backend faults of oneDNN 2.6 (with injection for tests), and what was
// built and linked (libtorch, CUDA, cuDNN, NCCL) for torch.Build.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#ifdef TF_CUDA
#include <c10/cuda/CUDAAllocatorConfig.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "shim.h"

namespace {

// oneDNN's C API, looked up at run time: Debian's libtorch links the shared
// libdnnl.so.2, which exports it; a libtorch with oneDNN linked in and its
// symbols hidden has none, and then only the environment variable applies.
using set_capacity_fn = int (*)(int);
using get_capacity_fn = int (*)(int*);

set_capacity_fn set_capacity() {
  static auto fn = reinterpret_cast<set_capacity_fn>(dlsym(RTLD_DEFAULT, "dnnl_set_primitive_cache_capacity"));
  return fn;
}

get_capacity_fn get_capacity() {
  static auto fn = reinterpret_cast<get_capacity_fn>(dlsym(RTLD_DEFAULT, "dnnl_get_primitive_cache_capacity"));
  return fn;
}

// oneDNN's process-wide primitive cache must not outlast ideep's per-thread
// cache of matmul primitive descriptors (LRU_CACHE_CAPACITY, 1024 by
// default): on one thread, oneDNN then drops a primitive no later than
// ideep drops the descriptor its brgemm kernels point into (oneDNN < 3.4
// keeps raw pointers there; see torch.Thread). Both default to 1024; when
// the user lowers ideep's and sets no oneDNN capacity, torchfit lowers
// oneDNN's to match. Fewer entries only cost speed: padded lengths keep
// the shapes few (README).
int ideep_capacity() {
  if (const char* v = std::getenv("LRU_CACHE_CAPACITY")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  return 1024;
}

const bool cache_bounded = [] {
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") || std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY")) return false;
  const int cap = std::min(1024, ideep_capacity());
  // oneDNN reads the variable when its cache is first used, after this runs.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", std::to_string(cap).c_str(), 0);
  if (auto fn = set_capacity()) fn(cap);
  return true;
}();

// ---- the libtorch loaded against the headers compiled with -----------------

// loaded_libtorch is the path of the libtorch_cpu this process loaded ("" if
// none), found without touching any libtorch symbol.
std::string loaded_libtorch() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name;
        if (name && std::strstr(name, "/libtorch_cpu.so")) {
          *static_cast<std::string*>(data) = name;
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

namespace tf {

// library_version reads the version of the libtorch whose libtorch_cpu is
// at path: a pip package's torch/version.py, a libtorch zip's build-version,
// or the version suffix of the file's real name (Debian's
// libtorch_cpu.so.1.13). "" when it cannot tell.
std::string library_version(const std::string& path) {
  const std::string lib = path.substr(0, path.find_last_of('/'));
  const std::string root = lib.substr(0, lib.find_last_of('/'));
  std::smatch m;
  const std::string py = read_file(root + "/version.py");
  if (std::regex_search(py, m, std::regex("__version__\\s*=\\s*['\"]([0-9][^'\"]*)['\"]"))) return m[1];
  const std::string bv = read_file(root + "/build-version");
  if (std::regex_search(bv, m, std::regex("^\\s*([0-9]+\\.[0-9]+[^\\s]*)"))) return m[1];
  char real[4096];
  const std::string name = realpath(path.c_str(), real) ? std::string(real) : path;
  if (std::regex_search(name, m, std::regex("libtorch_cpu\\.so\\.([0-9]+\\.[0-9]+[0-9.]*)$"))) return m[1];
  return "";
}

// version_mismatch says why the loaded library cannot be the one the shim
// was compiled against ("" when it can, or when its version is unknown).
std::string version_mismatch(const std::string& path) {
  const std::string v = library_version(path);
  if (v.empty()) return "";
  int major = -1, minor = -1;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) != 2) return "";
  if (major == TORCH_VERSION_MAJOR && minor == TORCH_VERSION_MINOR) return "";
  std::ostringstream out;
  out << "torchfit was compiled against libtorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR
      << " headers but loaded libtorch " << v << " (" << path << "): rebuild it against that library (make, or go build with its"
      << " CGO flags: make env), or load the one it was built with; TORCHFIT_SKIP_VERSION_CHECK=1 goes on regardless";
  return out.str();
}

}  // namespace tf

namespace {

// Before any other initialiser of the shim, and before any libtorch call:
// a library other than the headers' fails later with an undefined symbol
// or a crash, so it is one line and exit status 2 here.
__attribute__((constructor(101))) void check_loaded_version() {
  if (std::getenv("TORCHFIT_SKIP_VERSION_CHECK")) return;
  const std::string why = tf::version_mismatch(loaded_libtorch());
  if (why.empty()) return;
  std::fprintf(stderr, "torchfit: %s\n", why.c_str());
  std::fflush(stderr);
  _exit(2);
}

}  // namespace

namespace tf {

std::atomic<int32_t> thread_generation{0};

#ifdef TF_CUDA
void* cudart_symbol(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  TORCH_CHECK(p != nullptr, "the CUDA runtime's ", name, " is not loaded (libtorch_cuda should have loaded libcudart)");
  return p;
}
#endif

void thread_setup() {
  // libtorch sets OpenMP's thread count (a per-thread setting) only on the
  // threads that called at::set_num_threads or ran a parallel region; any
  // other OS thread still has OpenMP's process default, the number of CPUs.
  // oneDNN keys its primitive cache on that count (impl_nthr), and a key
  // that changes between creating a primitive descriptor and the primitive
  // makes oneDNN 2.6 rebuild brgemm kernels from a cached descriptor whose
  // attribute pointers dangle. Go runs goroutines on many OS threads, so
  // each one gets libtorch's count before its first call.
  at::init_num_threads();
}

std::atomic<int64_t> fault_countdown{0};
static std::atomic<int32_t> fault_kind{0};

void maybe_fault() {
  if (fault_countdown.fetch_sub(1) != 1) return;
  switch (fault_kind.load()) {
    case 1:
      throw std::bad_alloc();
    case 2:
      throw std::bad_array_new_length();
    case 3:
      throw std::future_error(std::future_errc::broken_promise);
    default:
      TORCH_CHECK(false, "injected libtorch error");
  }
}

tf_err backend_error(const char* what) {
  // Drop every cached oneDNN primitive: a creation that threw leaves an
  // entry whose promise is broken (every later request for that shape would
  // throw again) and whose key points into freed memory.
  if (auto get = get_capacity()) {
    int cap = 0;
    if (get(&cap) == 0 && cap > 0 && set_capacity()) {
      set_capacity()(0);
      set_capacity()(cap);
    }
  }
  return make_error('B', what);
}

std::atomic<int64_t> exhaustion_probe{int64_t(256) << 20};

tf_err bad_alloc_error(const char* what) {
  // Through a volatile pointer: a compiler may otherwise drop an unused
  // malloc/free pair and assume the allocation succeeded.
  static void* (*volatile probe_alloc)(size_t) = std::malloc;
  const int64_t probe = exhaustion_probe.load();
  void* p = probe > 0 && static_cast<uint64_t>(probe) <= SIZE_MAX ? probe_alloc(static_cast<size_t>(probe)) : nullptr;
  if (p == nullptr) {
    const std::string msg = std::string(what) + ": out of host memory (" + std::to_string(probe >> 20) +
                            " MiB more cannot be allocated either)";
    return make_error('H', msg.c_str());
  }
  std::free(p);
  return backend_error(what);
}

}  // namespace tf

extern "C" {

tf_err tf_onednn_cache_capacity(int32_t set, int32_t* prev) {
  TF_TRY
  *prev = -1;
  auto get = get_capacity();
  if (!get) return nullptr;
  int cap = 0;
  TORCH_CHECK(get(&cap) == 0, "dnnl_get_primitive_cache_capacity failed");
  *prev = cap;
  if (set >= 0) {
    TORCH_CHECK(set_capacity() && set_capacity()(set) == 0, "dnnl_set_primitive_cache_capacity(", set, ") failed");
  }
  TF_CATCH
}

tf_err tf_onednn_version(int32_t* major, int32_t* minor, int32_t* patch) {
  TF_TRY
  // dnnl_version() returns a pointer to {int major, minor, patch; const char* hash; unsigned cpu_runtime, gpu_runtime}.
  struct version_t {
    int major, minor, patch;
  };
  using version_fn = const version_t* (*)();
  static auto fn = reinterpret_cast<version_fn>(dlsym(RTLD_DEFAULT, "dnnl_version"));
  *major = *minor = *patch = -1;
  if (const version_t* v = fn ? fn() : nullptr) {
    *major = v->major;
    *minor = v->minor;
    *patch = v->patch;
  }
  TF_CATCH
}

tf_err tf_thread_probe(int32_t* before, int32_t* after) {
  TF_TRY
  using omp_fn = int (*)();
  static auto omp_max = reinterpret_cast<omp_fn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  *before = *after = -1;
  if (!omp_max) return nullptr;
  std::thread t([&] {
    *before = omp_max();
    int32_t prev = 0;
    tf_err e = tf_grad_mode(-1, &prev);  // any shim entry: its only thread work is ensure_thread
    if (e) std::free(e);
    *after = omp_max();
  });
  t.join();
  TF_CATCH
}

namespace {

char* dup_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

tf_err tf_build_info(tf_build* out, char** config, char** library) {
  TF_TRY
  *out = tf_build{};
  out->header_major = TORCH_VERSION_MAJOR;
  out->header_minor = TORCH_VERSION_MINOR;
  out->header_patch = TORCH_VERSION_PATCH;
  out->cxx11_abi = _GLIBCXX_USE_CXX11_ABI;
#ifdef TF_CUDA
  out->cuda_tag = 1;
#endif
  *config = dup_string(at::show_config());
  // The file libtorch_cpu was loaded from: a symbol it defines, located.
  Dl_info info{};
  std::string path;
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &info) && info.dli_fname) path = info.dli_fname;
  *library = dup_string(path);
  TF_CATCH
}

tf_err tf_cuda_info(tf_cudainfo* out, char** error, char** alloc_conf) {
  TF_TRY
  *out = tf_cudainfo{};
  *error = nullptr;
  *alloc_conf = nullptr;
  out->expandable_segments = -1;
  const auto& hooks = at::detail::getCUDAHooks();
  // Without libtorch_cuda's static initialisers the hooks are the stub,
  // whose version queries throw.
  try {
    out->cudart_version = hooks.versionCUDART();
    out->hooks = 1;
  } catch (const c10::Error&) {
    out->hooks = 0;
  }
  if (!out->hooks) return nullptr;
  out->cudnn_version = hooks.hasCuDNN() ? hooks.versionCuDNN() : 0;
  using nccl_version_fn = int (*)(int*);
  if (auto fn = reinterpret_cast<nccl_version_fn>(dlsym(RTLD_DEFAULT, "ncclGetVersion"))) {
    int v = 0;
    if (fn(&v) == 0) out->nccl_version = v;
  }
#ifdef TF_CUDA
  int n = 0;
  cudaError_t e = TF_CUDART(cudaGetDeviceCount)(&n);
  out->cuda_error = static_cast<int32_t>(e);
  if (e != cudaSuccess) {
    *error = dup_string(std::string(TF_CUDART(cudaGetErrorName)(e)) + ": " + TF_CUDART(cudaGetErrorString)(e));
    TF_CUDART(cudaGetLastError)();  // clear it
    n = 0;
  }
  out->device_count = n;
  int driver = 0;
  if (TF_CUDART(cudaDriverGetVersion)(&driver) == cudaSuccess) out->driver_version = driver;
#if TF_HAS_EXPANDABLE_SEGMENTS
  if (n > 0) out->expandable_segments = c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::expandable_segments() ? 1 : 0;
  *alloc_conf = dup_string(c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::last_allocator_settings());
#endif
#endif
  TF_CATCH
}

tf_err tf_cuda_device_props(int32_t device, tf_cudadevice* out) {
  TF_TRY
  *out = tf_cudadevice{};
#ifdef TF_CUDA
  cudaDeviceProp p{};
  C10_CUDA_CHECK(TF_CUDART(cudaGetDeviceProperties)(&p, device));
  std::snprintf(out->name, sizeof out->name, "%s", p.name);
  out->major = p.major;
  out->minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
  out->total = static_cast<int64_t>(p.totalGlobalMem);
  tf::DeviceScope on_device(device);
  size_t free_b = 0, total_b = 0;
  C10_CUDA_CHECK(TF_CUDART(cudaMemGetInfo)(&free_b, &total_b));
  out->free = static_cast<int64_t>(free_b);
#else
  TORCH_CHECK(false, "CUDA not available: torchfit was built without the cuda tag (device ", device, ")");
#endif
  TF_CATCH
}

tf_err tf_library_version(const char* path, char** version, char** mismatch) {
  TF_TRY
  *version = dup_string(tf::library_version(path));
  *mismatch = dup_string(tf::version_mismatch(path));
  TF_CATCH
}

tf_err tf_exhaustion_probe(int64_t set, int64_t* prev) {
  TF_TRY
  *prev = tf::exhaustion_probe.load();
  if (set > 0) tf::exhaustion_probe.store(set);
  TF_CATCH
}

tf_err tf_inject_fault(int32_t kind, int64_t after_calls) {
  TF_TRY
  tf::fault_kind.store(kind);
  tf::fault_countdown.store(after_calls > 0 ? after_calls : 0);
  TF_CATCH
}

}  // extern "C"
