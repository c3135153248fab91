// dropout.cc: fused dropout, an operator of libtorch's dispatcher.
//
//   y = x · m / (1 − p),   m_i = [u_i < 1 − p],   u_i = philox_uniform(word i of (seed, offset))
//
// The mask comes from Philox4x32-10 (internal/philox/philox.h, the one home
// of the generator): element i of a call takes word i mod 4 of block i / 4
// of the stream (seed, offset), so the mask is a pure function of (seed,
// offset, i). One pass makes the random words of a tile of elements (the
// loop over blocks vectorises: the generator is integer multiplies and
// xors), turns them into the tile's scale factors (1/(1−p) or 0) and
// multiplies, with libtorch's threads splitting the elements; the result
// is the same whatever the threads. Backward applies the same function to
// the incoming gradient: the mask is made again from (seed, offset), not
// saved, so the autograd graph holds two numbers per dropout instead of a
// mask the size of the activation.
//
// The seed is drawn per call from the default CPU generator (64 bits,
// under its lock), so torch.ManualSeed makes the masks deterministic, an
// RNG snapshot (activation checkpointing's recompute, a checkpoint's RNG
// state) gives the same masks again, and the offset is 0. CPU tensors in
// float32, float64, bfloat16 and float16 take the kernel (half types are
// multiplied in float32, float64 in float64); everything else (CUDA, whose
// ATen dropout is already a fused Philox kernel, other devices and
// dtypes) takes ATen's own dropout.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "philox.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Instruction sets: the element loops are compiled for AVX-512 and
// AVX2+FMA besides the baseline, the CPU picking one at load time (GCC's
// function multiversioning, as the selective scan's kernel); elsewhere
// they are compiled once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define TFD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TFD_CLONES
#endif
#define TFD_INLINE inline __attribute__((always_inline))

// Philox blocks per tile: 64 elements, whose scale factors live in one
// small array between the generating loop and the multiplying loop.
constexpr int kTile = 16;

// Elements per parallel task (at least); the result does not depend on it.
constexpr int64_t kGrain = 1 << 15;

// Element types as the loops see them: Load widens a stored element to
// the multiply's type, Store rounds it back. bfloat16 and float16 are
// converted with bit operations (bfloat16: round to nearest even, NaN kept
// quiet, as c10::BFloat16) and _Float16 (float16: the hardware's
// conversion where the clone has F16C), which the compiler vectorises;
// c10's own conversions have branches that stop it.
struct F32 {
  using S = float;
  using M = float;
  static TFD_INLINE M load(S v) { return v; }
  static TFD_INLINE S store(M v) { return v; }
};
struct F64 {
  using S = double;
  using M = double;
  static TFD_INLINE M load(S v) { return v; }
  static TFD_INLINE S store(M v) { return v; }
};
struct BF16 {
  using S = uint16_t;
  using M = float;
  static TFD_INLINE M load(S v) { return __builtin_bit_cast(float, static_cast<uint32_t>(v) << 16); }
  static TFD_INLINE S store(M v) {
    const uint32_t u = __builtin_bit_cast(uint32_t, v);
    const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return static_cast<S>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : r);
  }
};
struct F16 {
  using S = uint16_t;
  using M = float;
  static TFD_INLINE M load(S v) { return static_cast<float>(__builtin_bit_cast(_Float16, v)); }
  static TFD_INLINE S store(M v) { return __builtin_bit_cast(S, static_cast<_Float16>(v)); }
};

// apply_range computes y = x · scale·m for the elements of Philox blocks
// [blo, bhi), n elements in all, with E's storage and multiply types.
template <typename E>
TFD_INLINE void apply_range(const typename E::S* __restrict x, typename E::S* __restrict y, int64_t n, uint64_t seed,
                            uint64_t offset, float keep, typename E::M scale, int64_t blo, int64_t bhi) {
  using M = typename E::M;
  alignas(64) M m[4 * kTile];
  for (int64_t b = blo; b < bhi; b += kTile) {
#pragma omp simd
    for (int j = 0; j < kTile; j++) {
      const philox_u4 r = philox_block(seed, offset, static_cast<uint64_t>(b + j));
      m[4 * j + 0] = philox_uniform(r.v[0]) < keep ? scale : M(0);
      m[4 * j + 1] = philox_uniform(r.v[1]) < keep ? scale : M(0);
      m[4 * j + 2] = philox_uniform(r.v[2]) < keep ? scale : M(0);
      m[4 * j + 3] = philox_uniform(r.v[3]) < keep ? scale : M(0);
    }
    const int64_t e0 = 4 * b, e1 = std::min(n, 4 * std::min(b + kTile, bhi));
    const typename E::S* __restrict xs = x + e0;
    typename E::S* __restrict ys = y + e0;
#pragma omp simd
    for (int64_t e = 0; e < e1 - e0; e++) ys[e] = E::store(E::load(xs[e]) * m[e]);
  }
}

TFD_CLONES void apply_f32(const float* x, float* y, int64_t n, uint64_t seed, uint64_t offset, float keep,
                          float scale, int64_t blo, int64_t bhi) {
  apply_range<F32>(x, y, n, seed, offset, keep, scale, blo, bhi);
}
TFD_CLONES void apply_f64(const double* x, double* y, int64_t n, uint64_t seed, uint64_t offset, float keep,
                          double scale, int64_t blo, int64_t bhi) {
  apply_range<F64>(x, y, n, seed, offset, keep, scale, blo, bhi);
}
TFD_CLONES void apply_bf16(const uint16_t* x, uint16_t* y, int64_t n, uint64_t seed, uint64_t offset, float keep,
                           float scale, int64_t blo, int64_t bhi) {
  apply_range<BF16>(x, y, n, seed, offset, keep, scale, blo, bhi);
}
TFD_CLONES void apply_f16(const uint16_t* x, uint16_t* y, int64_t n, uint64_t seed, uint64_t offset, float keep,
                          float scale, int64_t blo, int64_t bhi) {
  apply_range<F16>(x, y, n, seed, offset, keep, scale, blo, bhi);
}

bool kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

void check_p(double p) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
}

// apply_cpu is the kernel (torchfit_dropout::apply on CPU): x times the
// mask of (seed, offset) for drop probability p, scaled by 1/(1−p), as a
// new contiguous tensor. p = 1 gives x·0 (ATen's answer: NaN where x is
// not finite).
at::Tensor apply_cpu(const at::Tensor& x_, int64_t seed_, int64_t offset_, double p) {
  check_p(p);
  TORCH_CHECK(kernel_dtype(x_.scalar_type()), "dropout: the fused kernel takes float32, float64, bfloat16 or float16, got ",
              x_.scalar_type());
  const at::Tensor x = x_.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t n = x.numel();
  if (n == 0) return y;
  const uint64_t seed = static_cast<uint64_t>(seed_), offset = static_cast<uint64_t>(offset_);
  const float keep = static_cast<float>(1.0 - p);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const int64_t blocks = (n + 3) / 4;
  const auto st = x.scalar_type();
  at::parallel_for(0, blocks, kGrain / 4, [&](int64_t lo, int64_t hi) {
    switch (st) {
      case at::kFloat:
        apply_f32(x.data_ptr<float>(), y.data_ptr<float>(), n, seed, offset, keep, static_cast<float>(scale), lo, hi);
        break;
      case at::kDouble:
        apply_f64(x.data_ptr<double>(), y.data_ptr<double>(), n, seed, offset, keep, scale, lo, hi);
        break;
      case at::kBFloat16:
        apply_bf16(reinterpret_cast<const uint16_t*>(x.data_ptr<c10::BFloat16>()),
                   reinterpret_cast<uint16_t*>(y.data_ptr<c10::BFloat16>()), n, seed, offset, keep,
                   static_cast<float>(scale), lo, hi);
        break;
      default:
        apply_f16(reinterpret_cast<const uint16_t*>(x.data_ptr<c10::Half>()),
                  reinterpret_cast<uint16_t*>(y.data_ptr<c10::Half>()), n, seed, offset, keep,
                  static_cast<float>(scale), lo, hi);
        break;
    }
  });
  return y;
}

at::Tensor call_apply(const at::Tensor& x, int64_t seed, int64_t offset, double p) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchfit_dropout::apply", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, int64_t, double)>();
  return op.call(x, seed, offset, p);
}

// draw_seed takes 64 bits from the default CPU generator, under its lock.
int64_t draw_seed() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(gen)->random64());
}

// ---- the autograd Function ----------------------------------------------------

// FusedDropout saves no tensor: the seed and p (and, as every node does,
// the input's shape and dtype), and backward applies the same Function to
// the gradient with the same seed: the kernel again, itself differentiable
// (a backward with create_graph gets a graph, the same mask).
struct FusedDropout : public torch::autograd::Function<FusedDropout> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, double p, int64_t seed) {
    ctx->saved_data["p"] = p;
    ctx->saved_data["seed"] = seed;
    return call_apply(x, seed, 0, p);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double p = ctx->saved_data["p"].toDouble();
    const int64_t seed = ctx->saved_data["seed"].toInt();
    at::Tensor g = grads.empty() ? at::Tensor() : grads[0];
    at::Tensor gx = g.defined() ? FusedDropout::apply(g, p, seed) : at::Tensor();
    return {gx, at::Tensor(), at::Tensor()};
  }
};

// dropout is the operator: ATen's dropout's contract (train = false, p = 0
// or an empty input: the input itself), the fused kernel for CPU tensors of
// its dtypes, ATen's dropout for the rest.
at::Tensor dropout(const at::Tensor& x, double p, bool train) {
  check_p(p);
  if (!train || p == 0 || x.numel() == 0) return x;
  if (x.device().type() != c10::DeviceType::CPU || !kernel_dtype(x.scalar_type())) return at::dropout(x, p, train);
  const int64_t seed = p < 1 ? draw_seed() : 0;
  return FusedDropout::apply(x, p, seed);
}

// seed_of draws a seed as the operator would (for tests: the next call's
// seed, taken from the same generator).
int64_t draw_seed_op() { return draw_seed(); }

}  // namespace

TORCH_LIBRARY(torchfit_dropout, m) {
  m.def("dropout(Tensor input, float p, bool train) -> Tensor", TORCH_FN(dropout));
  // The kernel (no autograd of its own; the Function above is its
  // autograd): x times the mask of the stream (seed, offset), scaled.
  m.def("apply(Tensor x, int seed, int offset, float p) -> Tensor");
  // draw_seed takes a seed from the default CPU generator as dropout does.
  m.def("draw_seed() -> int", TORCH_FN(draw_seed_op));
}

TORCH_LIBRARY_IMPL(torchfit_dropout, CPU, m) { m.impl("apply", TORCH_FN(apply_cpu)); }

#include "parwidth.h"
TF_PARALLEL_WIDTH(tf_dropout_parallel_width)
