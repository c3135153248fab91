// tensor.cc: tensor handles, data in and out, autograd, thread-local grad
// modes and process-wide settings.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/autograd.h>

#include "shim.h"

namespace tf {

tf_err make_error(char kind, const char* msg) {
  size_t n = std::strlen(msg);
  // libtorch 1.13 sometimes leaves a backtrace inside the message itself
  // ("Exception raised from ... (most recent call first):"); cut it off.
  const char* bt = std::strstr(msg, "\nException raised from");
  if (bt) n = static_cast<size_t>(bt - msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' ')) n--;
  char* out = static_cast<char*>(std::malloc(n + 3));
  out[0] = kind;
  out[1] = ':';
  std::memcpy(out + 2, msg, n);
  out[n + 2] = 0;
  return out;
}

bool is_oom_message(const char* m) {
  return std::strstr(m, "out of memory") || std::strstr(m, "can't allocate memory") ||
         std::strstr(m, "not enough memory") || std::strstr(m, "OutOfMemoryError");
}

}  // namespace tf

extern "C" {

void tf_free_error(tf_err e) { std::free(e); }

static thread_local uint64_t current_scope = 0;

uint64_t tf_scope_swap(uint64_t scope) {
  uint64_t prev = current_scope;
  current_scope = scope;
  return prev;
}

uint64_t tf_scope_current(void) { return current_scope; }

void tf_tensor_free(tf_tensor t) { delete t; }

tf_err tf_tensor_clone_handle(tf_tensor t, tf_tensor* out) {
  TF_TRY
  *out = tf::wrap(t->t);
  TF_CATCH
}

tf_err tf_tensor_from_data(const void* data, size_t nbytes, const int64_t* shape, int32_t ndim, int32_t dtype,
                           tf_tensor* out) {
  TF_TRY
  auto t = at::empty(c10::IntArrayRef(shape, ndim), at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype)));
  TORCH_CHECK(static_cast<size_t>(t.nbytes()) == nbytes, "data holds ", nbytes, " bytes, shape needs ", t.nbytes());
  if (nbytes) std::memcpy(t.data_ptr(), data, nbytes);
  *out = tf::wrap(std::move(t));
  TF_CATCH
}

tf_err tf_tensor_copy_to(tf_tensor h, void* dst, size_t nbytes) {
  TF_TRY
  at::Tensor t = h->t;
  TORCH_CHECK(t.defined(), "undefined tensor");
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  t = t.contiguous();
  TORCH_CHECK(static_cast<size_t>(t.nbytes()) == nbytes, "destination holds ", nbytes, " bytes, tensor has ",
              t.nbytes());
  if (nbytes) std::memcpy(dst, t.data_ptr(), nbytes);
  TF_CATCH
}

tf_err tf_tensor_info(tf_tensor h, tf_info* info, int64_t* shape, int64_t* strides, int32_t cap) {
  TF_TRY
  const at::Tensor& t = h->t;
  info->defined = t.defined();
  if (!t.defined()) return nullptr;
  info->dtype = static_cast<int32_t>(t.scalar_type());
  info->ndim = static_cast<int32_t>(t.dim());
  info->device_type = static_cast<int32_t>(t.device().type());
  info->device_index = t.device().index();
  info->requires_grad = t.requires_grad();
  info->is_leaf = t.is_leaf();
  info->is_contiguous = t.is_contiguous();
  info->numel = t.numel();
  info->nbytes = static_cast<int64_t>(t.nbytes());
  for (int32_t k = 0; k < info->ndim && k < cap; k++) {
    if (shape) shape[k] = t.size(k);
    if (strides) strides[k] = t.stride(k);
  }
  TF_CATCH
}

tf_err tf_tensor_same(tf_tensor a, tf_tensor b, int32_t* same) {
  TF_TRY
  *same = a->t.defined() && b->t.defined() && a->t.is_same(b->t);
  TF_CATCH
}

tf_err tf_tensor_data_ptr(tf_tensor h, uintptr_t* out) {
  TF_TRY
  *out = reinterpret_cast<uintptr_t>(h->t.data_ptr());
  TF_CATCH
}

// ---- autograd ----------------------------------------------------------------

tf_err tf_backward(tf_tensor t, tf_tensor grad, int32_t retain_graph, int32_t create_graph) {
  TF_TRY
  std::vector<at::Tensor> grads;
  if (grad) grads.push_back(grad->t);
  tf_optional<bool> retain;
  if (retain_graph) retain = true;
  tf::engine_call([&] { torch::autograd::backward({t->t}, grads, retain, create_graph != 0); });
  TF_CATCH
}

tf_err tf_grad(tf_tensor t, tf_tensor* out) {
  TF_TRY
  const at::Tensor& g = t->t.grad();
  *out = g.defined() ? tf::wrap(g) : nullptr;
  TF_CATCH
}

tf_err tf_set_grad(tf_tensor t, tf_tensor g) {
  TF_TRY
  t->t.mutable_grad() = g ? g->t : at::Tensor();
  TF_CATCH
}

tf_err tf_set_requires_grad(tf_tensor t, int32_t on) {
  TF_TRY
  t->t.set_requires_grad(on != 0);
  TF_CATCH
}

tf_err tf_autograd_grad(const tf_tensor* outputs, int32_t nout, const tf_tensor* grad_outputs, const tf_tensor* inputs,
                        int32_t nin, int32_t retain_graph, int32_t create_graph, int32_t allow_unused,
                        tf_tensor* grads) {
  TF_TRY
  std::vector<at::Tensor> outs, gouts, ins;
  for (int32_t k = 0; k < nout; k++) {
    outs.push_back(outputs[k]->t);
    if (grad_outputs) gouts.push_back(tf::unwrap(grad_outputs[k]));
  }
  for (int32_t k = 0; k < nin; k++) ins.push_back(inputs[k]->t);
  tf_optional<bool> retain;
  if (retain_graph) retain = true;
  std::vector<at::Tensor> res;
  tf::engine_call([&] { res = torch::autograd::grad(outs, ins, gouts, retain, create_graph != 0, allow_unused != 0); });
  for (int32_t k = 0; k < nin; k++) grads[k] = res[k].defined() ? tf::wrap(res[k]) : nullptr;
  TF_CATCH
}

tf_err tf_grad_mode(int32_t set, int32_t* prev) {
  TF_TRY
  *prev = c10::GradMode::is_enabled();
  if (set >= 0) c10::GradMode::set_enabled(set != 0);
  TF_CATCH
}

tf_err tf_inference_mode_enter(void** guard) {
  TF_TRY
  *guard = new c10::InferenceMode(true);
  TF_CATCH
}

tf_err tf_inference_mode_exit(void* guard) {
  TF_TRY
  delete static_cast<c10::InferenceMode*>(guard);
  TF_CATCH
}

// ---- global state -------------------------------------------------------------

tf_err tf_manual_seed(uint64_t seed) {
  TF_TRY
  at::manual_seed(seed);
  TF_CATCH
}

tf_err tf_rng_get_state(tf_tensor* out) {
  TF_TRY
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  *out = tf::wrap(gen.get_state());
  TF_CATCH
}

tf_err tf_rng_set_state(tf_tensor state) {
  TF_TRY
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state->t);
  TF_CATCH
}

tf_err tf_set_num_threads(int32_t n) {
  TF_TRY
  at::set_num_threads(n);
  tf::thread_generation.fetch_add(1);  // other threads pick the new count up on their next call
  TF_CATCH
}

tf_err tf_get_num_threads(int32_t* n) {
  TF_TRY
  *n = at::get_num_threads();
  TF_CATCH
}

tf_err tf_version(int32_t* major, int32_t* minor, int32_t* patch) {
  *major = TORCH_VERSION_MAJOR;
  *minor = TORCH_VERSION_MINOR;
  *patch = TORCH_VERSION_PATCH;
  return nullptr;
}

tf_err tf_cuda_device_count(int32_t* n) {
  TF_TRY
  *n = static_cast<int32_t>(at::detail::getCUDAHooks().getNumGPUs());
  TF_CATCH
}

tf_err tf_cuda_synchronize(int32_t device) {
  TF_TRY
#ifdef TF_CUDA
  at::detail::getCUDAHooks().deviceSynchronize(device);
#else
  (void)device;
  TORCH_CHECK(false, "CUDA not available: torchfit was built without the cuda tag");
#endif
  TF_CATCH
}

}  // extern "C"
