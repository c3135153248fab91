//go:build cuda

// cuda.cc: the fused selective scan's CUDA kernels (scan_cuda.cu) as the
// CUDA kernels of the scan_fwd and scan_bwd operators (scan.cc), compiled
// only with the cuda build tag.
//
// The kernels come as a fat binary that nvcc made (make scan-kernel) and
// the Go package embeds; this file loads it into each device's primary
// context at first use and launches the kernels through the CUDA driver
// API, on PyTorch's current stream of the inputs' device. The driver's
// functions are looked up in libcuda.so.1 at run time (which libtorch_cuda's
// runtime has loaded by the time a tensor is on a GPU), so nothing here
// links a CUDA library: no libcudart (as the op shim, see TF_CUDART in
// torch/internal/capi/shim.h), no libcuda, which a machine without a GPU
// driver does not have.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <dlfcn.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.h"

namespace {

// The kernels' fat binary (tfs_cuda_set_image).
std::mutex image_mu;
std::vector<char> image;

// The driver functions the launcher uses, from libcuda.so.1.
struct Driver {
  CUresult (*init)(unsigned int);
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_push)(CUcontext);
  CUresult (*ctx_pop)(CUcontext*);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**);
};

template <typename F>
void resolve(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  TORCH_CHECK(f != nullptr, "selective_scan (CUDA): libcuda.so.1 has no ", name);
}

const Driver& driver() {
  static const Driver d = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(lib != nullptr, "selective_scan (CUDA): cannot load the CUDA driver, libcuda.so.1: ", dlerror());
    Driver r{};
    resolve(lib, "cuInit", r.init);
    resolve(lib, "cuGetErrorString", r.get_error_string);
    resolve(lib, "cuDeviceGet", r.device_get);
    resolve(lib, "cuDevicePrimaryCtxRetain", r.primary_ctx_retain);
    resolve(lib, "cuCtxPushCurrent_v2", r.ctx_push);
    resolve(lib, "cuCtxPopCurrent_v2", r.ctx_pop);
    resolve(lib, "cuModuleLoadData", r.module_load_data);
    resolve(lib, "cuModuleGetFunction", r.module_get_function);
    resolve(lib, "cuLaunchKernel", r.launch_kernel);
    return r;
  }();
  return d;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (driver().get_error_string(r, &msg) != CUDA_SUCCESS || msg == nullptr) msg = "unknown error";
  TORCH_CHECK(false, "selective_scan (CUDA): ", what, ": ", msg, " (CUresult ", static_cast<int>(r), ")");
}

// The kernels per S, states per lane (scan_cuda.cu).
constexpr int kSizes[] = {1, 2, 4, 8};
constexpr int kThreads = 128;

// A device's primary context and the kernels loaded into it.
struct Loaded {
  CUcontext ctx = nullptr;
  CUfunction fwd[4] = {}, bwd[4] = {};
};

// ContextScope makes a device's primary context current on this thread
// until the scope ends.
struct ContextScope {
  explicit ContextScope(CUcontext ctx) { check(driver().ctx_push(ctx), "cuCtxPushCurrent"); }
  ~ContextScope() {
    CUcontext prev;
    driver().ctx_pop(&prev);  // a destructor: nothing to do with an error
  }
};

const Loaded& loaded(int device) {
  static std::mutex mu;
  static std::vector<Loaded*> devices;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(devices.size())) devices.resize(device + 1, nullptr);
  if (devices[device]) return *devices[device];
  const Driver& drv = driver();
  check(drv.init(0), "cuInit");
  std::vector<char> img;
  {
    std::lock_guard<std::mutex> il(image_mu);
    img = image;
  }
  TORCH_CHECK(!img.empty(), "selective_scan (CUDA): the kernels' fat binary was not set (tfs_cuda_set_image)");
  auto* l = new Loaded();  // kept for the process's life, as the module is
  CUdevice dev;
  check(drv.device_get(&dev, device), "cuDeviceGet");
  check(drv.primary_ctx_retain(&l->ctx, dev), "cuDevicePrimaryCtxRetain");
  ContextScope scope(l->ctx);
  CUmodule mod;
  check(drv.module_load_data(&mod, img.data()), "cuModuleLoadData (the kernels' fat binary has sm_80 and sm_90 code)");
  for (int i = 0; i < 4; i++) {
    const std::string f = "tfs_scan_fwd_s" + std::to_string(kSizes[i]), b = "tfs_scan_bwd_s" + std::to_string(kSizes[i]);
    check(drv.module_get_function(&l->fwd[i], mod, f.c_str()), f.c_str());
    check(drv.module_get_function(&l->bwd[i], mod, b.c_str()), b.c_str());
  }
  devices[device] = l;
  return *l;
}

// Launch geometry: W lanes per channel (a power of two ≤ 32), S states per
// lane, kThreads / W channels per block.
struct Geometry {
  int W, S, which, P;
};

Geometry geometry(int64_t N) {
  int W = 1;
  while (W < 32 && W < N) W *= 2;
  const int64_t per = (N + W - 1) / W;
  for (int i = 0; i < 4; i++) {
    if (kSizes[i] >= per) return {W, kSizes[i], i, kThreads / W};
  }
  TORCH_CHECK(false, "selective_scan (CUDA): ", N, " states is more than ", TFS_CUDA_MAX_STATE);
  return {};
}

void check_args(const at::Tensor& x, std::initializer_list<const at::Tensor*> ts) {
  TORCH_CHECK(x.is_cuda(), "selective_scan (CUDA): inputs on ", x.device());
  for (const auto* t : ts) {
    TORCH_CHECK(t->device() == x.device() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                "selective_scan (CUDA): the kernel takes contiguous float32 tensors on one device, got ",
                t->scalar_type(), " on ", t->device());
  }
}

void launch(const at::Tensor& x, bool backward, tfs_cuda_args& a) {
  const Geometry g = geometry(a.N);
  const int device = x.device().index();
  const Loaded& l = loaded(device);
  const int64_t gx = (a.D + g.P - 1) / g.P;
  TORCH_CHECK(gx <= 0x7fffffff && a.B <= 65535, "selective_scan (CUDA): batch ", a.B, " × channels ", a.D,
              " is too large a grid");
  CUstream stream = reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(device).stream());
  void* params[] = {&a};
  ContextScope scope(l.ctx);
  check(driver().launch_kernel(backward ? l.bwd[g.which] : l.fwd[g.which], static_cast<unsigned>(gx),
                               static_cast<unsigned>(a.B), 1, g.W, g.P, 1, 0, stream, params, nullptr),
        backward ? "launching the backward kernel" : "launching the forward kernel");
}

tfs_cuda_args args_of(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                      const at::Tensor& Cm, const at::Tensor& Dv, int64_t K) {
  TORCH_CHECK(K >= 1, "selective_scan (CUDA): chunk must be at least 1, got ", K);
  tfs_cuda_args a{};
  a.x = x.data_ptr<float>(), a.dt = dt.data_ptr<float>(), a.A = A.data_ptr<float>();
  a.Bm = Bm.data_ptr<float>(), a.Cm = Cm.data_ptr<float>(), a.Dv = Dv.data_ptr<float>();
  a.B = x.size(0), a.L = x.size(1), a.D = x.size(2), a.N = A.size(1), a.K = K;
  a.nc = (a.L + K - 1) / K;
  return a;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> cuda_fwd(const at::Tensor& x, const at::Tensor& dt,
                                                        const at::Tensor& A, const at::Tensor& Bm,
                                                        const at::Tensor& Cm, const at::Tensor& Dv, int64_t K,
                                                        bool save) {
  check_args(x, {&x, &dt, &A, &Bm, &Cm, &Dv});
  tfs_cuda_args a = args_of(x, dt, A, Bm, Cm, Dv, K);
  auto opts = x.options();
  auto y = at::empty({a.B, a.L, a.D}, opts);
  auto last = at::empty({a.B, a.D, a.N}, opts);
  auto starts = save ? at::empty({a.B, a.nc, a.D, a.N}, opts) : at::empty({0}, opts);
  a.y = y.data_ptr<float>(), a.last = last.data_ptr<float>();
  a.starts = save ? starts.data_ptr<float>() : nullptr;
  launch(x, false, a);
  return {y, last, starts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> cuda_bwd(
    const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
    const at::Tensor& Dv, const at::Tensor& starts, const at::Tensor& gy, int64_t K) {
  check_args(x, {&x, &dt, &A, &Bm, &Cm, &Dv, &starts, &gy});
  tfs_cuda_args a = args_of(x, dt, A, Bm, Cm, Dv, K);
  TORCH_CHECK(starts.numel() == a.B * a.nc * a.D * a.N && gy.sizes() == x.sizes(),
              "selective_scan (CUDA): backward's saved starts or output gradient have the wrong size");
  auto opts = x.options();
  auto gx = at::empty({a.B, a.L, a.D}, opts);
  auto gdt = at::empty({a.B, a.L, a.D}, opts);
  auto gA = at::zeros({a.D, a.N}, opts);
  auto gB = at::zeros({a.B, a.L, a.N}, opts);
  auto gC = at::zeros({a.B, a.L, a.N}, opts);
  auto gD = at::zeros({a.D}, opts);
  auto hs = at::empty({std::min(K, a.L), a.B, a.D, a.N}, opts);  // one chunk's states
  a.starts = const_cast<float*>(starts.data_ptr<float>());
  a.gy = gy.data_ptr<float>();
  a.gx = gx.data_ptr<float>(), a.gdt = gdt.data_ptr<float>(), a.gA = gA.data_ptr<float>();
  a.gB = gB.data_ptr<float>(), a.gC = gC.data_ptr<float>(), a.gD = gD.data_ptr<float>();
  a.hs = hs.data_ptr<float>();
  launch(x, true, a);
  return {gx, gdt, gA, gB, gC, gD};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchfit_scan, CUDA, m) {
  m.impl("scan_fwd", TORCH_FN(cuda_fwd));
  m.impl("scan_bwd", TORCH_FN(cuda_bwd));
}

extern "C" {

tfs_err tfs_cuda_set_image(const void* p, size_t len) {
  try {
    std::lock_guard<std::mutex> lock(image_mu);
    image.assign(static_cast<const char*>(p), static_cast<const char*>(p) + len);
    __atomic_store_n(&tfs_cuda_ready, len > 0 ? 1 : 0, __ATOMIC_RELEASE);
    return nullptr;
  } catch (const std::exception& e) {
    std::string m = std::string("E:") + e.what();
    return strdup(m.c_str());
  } catch (...) {
    return strdup("E:unknown C++ exception");
  }
}

}  // extern "C"
