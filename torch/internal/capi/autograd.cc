// autograd.cc: autocast state and activation checkpointing.
//
// Checkpointing is a custom autograd Function (the reentrant style of
// torch.utils.checkpoint): forward runs the Go function under no_grad, so
// nothing inside is saved for backward; backward restores the forward's RNG
// and autocast state, reruns the Go function with grad on, and
// backpropagates through the fresh graph. Parameters used inside receive
// their gradients from that inner backward like any other.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/zeros.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>

#ifdef TF_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <mutex>
#include <vector>

#include "shim.h"

// Implemented in Go (capi/callback.go).
extern "C" char* tfGoCheckpointRun(uint64_t fn, tf_tensor* inputs, int32_t nin, tf_tensor** outs, int32_t* nout);
extern "C" void tfGoCheckpointRelease(uint64_t fn);

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- autocast, behind the version switch ---------------------------------------
bool ac_enabled(c10::DeviceType d) {
#if TF_AUTOCAST_PER_DEVICE
  return at::autocast::is_autocast_enabled(d);
#else
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

void ac_set_enabled(c10::DeviceType d, bool on) {
#if TF_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_enabled(d, on);
#else
  if (d == c10::DeviceType::CPU) at::autocast::set_cpu_enabled(on);
  else at::autocast::set_enabled(on);
#endif
}

at::ScalarType ac_dtype(c10::DeviceType d) {
#if TF_AUTOCAST_PER_DEVICE
  return at::autocast::get_autocast_dtype(d);
#else
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

void ac_set_dtype(c10::DeviceType d, at::ScalarType t) {
#if TF_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_dtype(d, t);
#else
  if (d == c10::DeviceType::CPU) at::autocast::set_autocast_cpu_dtype(t);
  else at::autocast::set_autocast_gpu_dtype(t);
#endif
}

c10::DeviceType dev_type(int32_t t) {
  TORCH_CHECK(t == 0 || t == 1, "autocast: unknown device type ", t);
  return t == 0 ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
}

struct AutocastSnapshot {
  bool cpu_on, cuda_on;
  at::ScalarType cpu_dtype, cuda_dtype;
  static AutocastSnapshot take() {
    return {ac_enabled(c10::DeviceType::CPU), ac_enabled(c10::DeviceType::CUDA), ac_dtype(c10::DeviceType::CPU),
            ac_dtype(c10::DeviceType::CUDA)};
  }
  void apply() const {
    ac_set_enabled(c10::DeviceType::CPU, cpu_on);
    ac_set_enabled(c10::DeviceType::CUDA, cuda_on);
    ac_set_dtype(c10::DeviceType::CPU, cpu_dtype);
    ac_set_dtype(c10::DeviceType::CUDA, cuda_dtype);
  }
};

// ---- RNG state ----------------------------------------------------------------------
struct RngSnapshot {
  at::Tensor cpu;
  std::vector<at::Tensor> cuda;
  static RngSnapshot take() {
    RngSnapshot s;
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      s.cpu = gen.get_state();
    }
#ifdef TF_CUDA
    for (int d = 0; d < at::cuda::getNumGPUs(); d++) {
      auto g = at::cuda::detail::getDefaultCUDAGenerator(d);
      std::lock_guard<std::mutex> lock(g.mutex());
      s.cuda.push_back(g.get_state());
    }
#endif
    return s;
  }
  void apply() const {
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(cpu);
    }
#ifdef TF_CUDA
    for (size_t d = 0; d < cuda.size(); d++) {
      auto g = at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(d));
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(cuda[d]);
    }
#endif
  }
};

// What backward needs besides the saved inputs; owns the Go function's
// handle (released when the autograd graph drops the node).
struct CheckpointState : torch::CustomClassHolder {
  uint64_t fn = 0;
  size_t n_real = 0;  // inputs the Go function takes (a trailing dummy may follow)
  RngSnapshot rng;
  AutocastSnapshot autocast{};
  ~CheckpointState() override {
    if (fn) tfGoCheckpointRelease(fn);
  }
};

// run_go calls the Go function on inputs and takes ownership of its outputs.
variable_list run_go(uint64_t fn, const variable_list& inputs) {
  std::vector<tf_tensor> in(inputs.size());
  for (size_t k = 0; k < inputs.size(); k++) in[k] = tf::wrap(inputs[k]);
  tf_tensor* outs = nullptr;
  int32_t nout = 0;
  char* err = tfGoCheckpointRun(fn, in.data(), static_cast<int32_t>(in.size()), &outs, &nout);
  for (auto h : in) delete h;
  variable_list res;
  for (int32_t k = 0; k < nout; k++) {
    res.push_back(outs[k] ? outs[k]->t : at::Tensor());
    delete outs[k];
  }
  std::free(outs);
  if (err) {
    std::string msg(err);
    std::free(err);
    TORCH_CHECK(false, msg);
  }
  return res;
}

struct Checkpoint : public torch::autograd::Function<Checkpoint> {
  // inputs is a TensorList (not a vector) so that Function::apply counts each
  // tensor as a differentiable input.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CheckpointState> st, at::TensorList inputs) {
    st->rng = RngSnapshot::take();
    st->autocast = AutocastSnapshot::take();
    variable_list outs;
    {
      // No autocast caching in this run: autocast keeps a parameter's
      // low-precision copy until its region ends, so a checkpointed forward
      // would hold every region's cast weights (nothing else of it) until
      // the whole forward is done. Uncached, each is freed after its op;
      // the recomputation casts again, with the cache, as it would anyway.
      struct NoCache {
        bool was = at::autocast::is_autocast_cache_enabled();
        NoCache() { at::autocast::set_autocast_cache_enabled(false); }
        ~NoCache() { at::autocast::set_autocast_cache_enabled(was); }
      } no_cache;
      c10::AutoGradMode no_grad(false);
      outs = run_go(st->fn, variable_list(inputs.begin(), inputs.begin() + st->n_real));
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return outs;
  }


  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto holder = ctx->saved_data["state"].toCapsule();
    auto* st = static_cast<CheckpointState*>(holder.get());
    auto saved = ctx->get_saved_variables();
    variable_list detached;
    for (const auto& t : saved) {
      auto d = t.detach();
      d.set_requires_grad(t.requires_grad());
      detached.push_back(d);
    }
    variable_list outs;
    {
      // Recompute with the forward's RNG and autocast state, then put the
      // current ones back, also when the recomputation throws.
      auto rng_now = RngSnapshot::take();
      auto ac_now = AutocastSnapshot::take();
      struct Restore {
        RngSnapshot& r;
        AutocastSnapshot& a;
        ~Restore() {
          try {
            r.apply();
            a.apply();
          } catch (...) {
          }
        }
      } restore{rng_now, ac_now};
      st->rng.apply();
      st->autocast.apply();
      // A region, as torch.utils.checkpoint's recomputation runs inside
      // torch.autocast(...): the low-precision weight copies it caches are
      // dropped when it ends (otherwise they outlive the backward).
      at::autocast::increment_nesting();
      struct Region {
        ~Region() {
          try {
            if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
          } catch (...) {
          }
        }
      } region;
      c10::AutoGradMode grad(true);
      outs = run_go(st->fn, variable_list(detached.begin(), detached.begin() + st->n_real));
    }
    variable_list roots, grads;
    for (size_t k = 0; k < outs.size() && k < grad_outputs.size(); k++) {
      if (outs[k].defined() && outs[k].requires_grad() && grad_outputs[k].defined()) {
        roots.push_back(outs[k]);
        grads.push_back(grad_outputs[k]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    variable_list result;
    result.push_back(at::Tensor());  // the state argument
    for (auto& d : detached) result.push_back(d.requires_grad() ? d.grad() : at::Tensor());
    return result;
  }
};

}  // namespace

extern "C" {

tf_err tf_rng_snapshot_take(void** out) {
  TF_TRY
  *out = new RngSnapshot(RngSnapshot::take());
  TF_CATCH
}

tf_err tf_rng_snapshot_apply(void* snap) {
  TF_TRY
  static_cast<RngSnapshot*>(snap)->apply();
  TF_CATCH
}

void tf_rng_snapshot_free(void* snap) { delete static_cast<RngSnapshot*>(snap); }


tf_err tf_autocast_enter(int32_t device_type, int32_t enabled, int32_t dtype, tf_autocast_state* prev) {
  TF_TRY
  auto d = dev_type(device_type);
  prev->enabled = ac_enabled(d);
  prev->dtype = static_cast<int32_t>(ac_dtype(d));
  if (enabled) {
    auto t = static_cast<at::ScalarType>(dtype);
    if (d == c10::DeviceType::CPU) {
      TORCH_CHECK(t == at::kBFloat16 || TF_TORCH_AT_LEAST(2, 4), "CPU autocast supports bfloat16 only in libtorch ",
                  TORCH_VERSION);
    } else {
      TORCH_CHECK(t == at::kHalf || t == at::kBFloat16, "CUDA autocast supports float16 and bfloat16");
    }
    ac_set_dtype(d, t);
  }
  ac_set_enabled(d, enabled != 0);
  at::autocast::increment_nesting();
  TF_CATCH
}

tf_err tf_autocast_exit(int32_t device_type, const tf_autocast_state* prev) {
  TF_TRY
  auto d = dev_type(device_type);
  ac_set_enabled(d, prev->enabled != 0);
  ac_set_dtype(d, static_cast<at::ScalarType>(prev->dtype));
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  TF_CATCH
}

tf_err tf_autocast_get(int32_t device_type, tf_autocast_state* out) {
  TF_TRY
  auto d = dev_type(device_type);
  out->enabled = ac_enabled(d);
  out->dtype = static_cast<int32_t>(ac_dtype(d));
  TF_CATCH
}

tf_err tf_autocast_clear_cache(void) {
  TF_TRY
  at::autocast::clear_cache();
  TF_CATCH
}

tf_err tf_checkpoint(uint64_t fn, const tf_tensor* inputs, int32_t nin, tf_tensor** outs, int32_t* nout) {
  // The state owns fn from here on: it is released with the graph node (or
  // right away when the forward fails).
  auto st = c10::make_intrusive<CheckpointState>();
  st->fn = fn;
  TF_TRY
  variable_list in;
  bool any_grad = false;
  for (int32_t k = 0; k < nin; k++) {
    in.push_back(inputs[k]->t);
    any_grad = any_grad || inputs[k]->t.requires_grad();
  }
  st->n_real = in.size();
  variable_list res;
  if (!c10::GradMode::is_enabled()) {
    // Nothing to recompute later: run it plainly.
    res = run_go(fn, in);
  } else {
    // When no input requires grad (the first block of a model, say), a dummy
    // input that does keeps the region in the graph, so the parameters used
    // inside still receive gradients (torch.utils.checkpoint would warn and
    // drop them).
    if (!any_grad) {
      auto dummy = at::zeros({});
      dummy.set_requires_grad(true);
      in.push_back(dummy);
    }
    res = Checkpoint::apply(st, at::TensorList(in));
  }
  *nout = static_cast<int32_t>(res.size());
  *outs = static_cast<tf_tensor*>(std::malloc(sizeof(tf_tensor) * (res.size() + 1)));
  for (size_t k = 0; k < res.size(); k++) (*outs)[k] = res[k].defined() ? tf::wrap(res[k]) : nullptr;
  TF_CATCH
}

}  // extern "C"

// ---- after a failed backward ----------------------------------------------------

namespace {
// Drain is a node with sequence number 0: the engine's ready queue pops a
// higher sequence number first, so a graph rooted at it runs after every
// task left in the queue — each of them, its graph gone, is dropped with
// what it holds — and only then completes.
struct Drain : torch::autograd::Node {
  Drain() : Node(/*sequence_nr=*/0) {}
  variable_list apply(variable_list&& grads) override { return {}; }
  std::string name() const override { return "torchfit::Drain"; }
};
}  // namespace

void tf::drain_autograd() noexcept {
  try {
    auto one = at::zeros({}, at::kFloat);
    auto fn = std::make_shared<Drain>();
    fn->add_input_metadata(one);
    torch::autograd::Engine::get_default_engine().execute({torch::autograd::Edge(fn, 0)}, {one}, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true, {});
  } catch (...) {
  }
}
