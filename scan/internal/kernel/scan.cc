// scan.cc: the fused selective scan, an operator of libtorch's dispatcher.
//
//   h_t = exp(Δ_t·A) ⊙ h_{t−1} + Δ_t·x_t·B_t,   y_t = C_t·h_t + D·x_t
//
// over x, Δ (batch, length, channels), A (channels, state), B, C (batch,
// length, state), D (channels). The forward pass walks time in chunks of K
// steps; inside a chunk the CPU kernel loops over time with the state of
// every (batch, channel) block in registers/cache, the blocks spread over
// libtorch's threads with at::parallel_for. Only the state at the start of
// each chunk is kept for backward (batch·channels·state·⌈L/K⌉ values), and
// backward recomputes each chunk's states from it, newest chunk first, then
// runs the recurrence of the gradients backwards through the chunk: the
// strategy of mamba-ssm's CUDA kernel (csrc/selective_scan/). Other devices
// (CUDA) take the same chunked path written in ATen ops: the same memory,
// one small op per step instead of one fused loop.
//
// Float32 and float64 are computed as they come; float16 and bfloat16
// inputs are computed in float32 (as mamba-ssm does) and y is returned in
// x's dtype. The operator is a composite: its casts are ordinary autograd
// ops, and the scan itself is a custom autograd Function.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.h"

// The libtorch version switch, as in the op shim (torch/internal/capi/shim.h).
#include <torch/csrc/api/include/torch/version.h>
#define TFS_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Channels per parallel task. Fixed (not derived from the thread count) so
// that gradients summed over blocks come out the same whatever the threads.
constexpr int64_t kBlock = 16;

// Implementation choice (the op's impl argument).
enum Impl : int64_t { kAuto = 0, kNative = 1, kATen = 2 };

struct Shape {
  int64_t B, L, D, N;
};

// ---- the CPU kernel ---------------------------------------------------------------

// Forward over steps [t0, t0+k) of every (batch, channel-block) task. h
// (B, D, N) holds the state at t0 and is advanced to t0+k. dA (B, k, D, N)
// is exp(Δ·A) for the chunk. y (B, L, D) receives C·h (D·x is added by the
// caller's at the end) when not null; hs (B, k, D, N) receives every state
// when not null.
template <typename T>
void fwd_chunk(const Shape& s, int64_t t0, int64_t k, const T* x, const T* dt, const T* Bm, const T* Cm,
               const T* dA, T* h, T* y, T* hs) {
  const int64_t nblk = (s.D + kBlock - 1) / kBlock;
  const int64_t N = s.N;
  at::parallel_for(0, s.B * nblk, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; task++) {
      const int64_t b = task / nblk, d0 = (task % nblk) * kBlock, d1 = std::min(s.D, d0 + kBlock);
      for (int64_t j = 0; j < k; j++) {
        const int64_t t = t0 + j;
        const T* Bp = Bm + (b * s.L + t) * N;
        const T* Cp = Cm + (b * s.L + t) * N;
        for (int64_t d = d0; d < d1; d++) {
          const int64_t i = (b * s.L + t) * s.D + d;
          const T dx = dt[i] * x[i];
          const T* a = dA + ((b * k + j) * s.D + d) * N;
          T* hp = h + (b * s.D + d) * N;
          T acc = 0;
          for (int64_t n = 0; n < N; n++) {
            hp[n] = a[n] * hp[n] + dx * Bp[n];
            acc += Cp[n] * hp[n];
          }
          if (y) y[i] = acc;
          if (hs) std::memcpy(hs + ((b * k + j) * s.D + d) * N, hp, sizeof(T) * N);
        }
      }
    }
  });
}

// Backward over steps [t0, t0+k), newest first. start (B, D, N) is the
// state before t0, hs (B, k, D, N) the chunk's states, dA its exp(Δ·A).
// gh (B, D, N) carries ∂L/∂h_{t0+k−1} coming from later steps (through
// h_{t+1} = dA_{t+1}·h_t + …) and leaves holding the same for h_{t0−1}.
// Per-task partial sums: gA_part (B, D, N) and gD_part (B, D) by batch,
// gB_part and gC_part (blocks, B, k, N) by channel block.
template <typename T>
void bwd_chunk(const Shape& s, int64_t t0, int64_t k, const T* x, const T* dt, const T* A, const T* Bm,
               const T* Cm, const T* Dv, const T* gy, const T* dA, const T* start, const T* hs, T* gh, T* gx,
               T* gdt, T* gA_part, T* gB_part, T* gC_part, T* gD_part) {
  const int64_t nblk = (s.D + kBlock - 1) / kBlock;
  const int64_t N = s.N;
  at::parallel_for(0, s.B * nblk, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; task++) {
      const int64_t b = task / nblk, blk = task % nblk, d0 = blk * kBlock, d1 = std::min(s.D, d0 + kBlock);
      for (int64_t j = k - 1; j >= 0; j--) {
        const int64_t t = t0 + j;
        const T* Bp = Bm + (b * s.L + t) * N;
        const T* Cp = Cm + (b * s.L + t) * N;
        T* gBp = gB_part + ((blk * s.B + b) * k + j) * N;
        T* gCp = gC_part + ((blk * s.B + b) * k + j) * N;
        for (int64_t d = d0; d < d1; d++) {
          const int64_t i = (b * s.L + t) * s.D + d;
          const T g = gy ? gy[i] : T(0);
          const T xv = x[i], dtv = dt[i], dx = dtv * xv;
          const T* a = dA + ((b * k + j) * s.D + d) * N;
          const T* hc = hs + ((b * k + j) * s.D + d) * N;
          const T* hp = j > 0 ? hs + ((b * k + j - 1) * s.D + d) * N : start + (b * s.D + d) * N;
          const T* Ap = A + d * N;
          T* ghp = gh + (b * s.D + d) * N;
          T* gAp = gA_part + (b * s.D + d) * N;
          T gdx = 0, gdt_a = 0;
          for (int64_t n = 0; n < N; n++) {
            const T ght = ghp[n] + g * Cp[n];  // ∂L/∂h_t
            gCp[n] += g * hc[n];
            const T gda = ght * hp[n] * a[n];  // ∂L/∂(Δ·A) through exp
            gAp[n] += gda * dtv;
            gdt_a += gda * Ap[n];
            gdx += ght * Bp[n];
            gBp[n] += ght * dx;
            ghp[n] = ght * a[n];
          }
          gdt[i] = gdt_a + gdx * xv;
          gx[i] = gdx * dtv + g * Dv[d];
          gD_part[b * s.D + d] += g * xv;
        }
      }
    }
  });
}

Shape shape_of(const at::Tensor& x, const at::Tensor& A) { return {x.size(0), x.size(1), x.size(2), A.size(1)}; }

// exp(Δ·A) for steps [t0, t0+k): (B, k, D, N), contiguous.
at::Tensor chunk_dA(const at::Tensor& dt, const at::Tensor& A, int64_t t0, int64_t k) {
  return at::exp(dt.narrow(1, t0, k).unsqueeze(-1) * A);
}

// native_forward runs the CPU kernel: y (B, L, D), the last state (B, D, N)
// and, when starts is not null, the state before every chunk (B, chunks, D, N).
std::tuple<at::Tensor, at::Tensor> native_forward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                  int64_t K, at::Tensor* starts) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto h = at::zeros({s.B, s.D, s.N}, x.options());
  auto y = at::empty({s.B, s.L, s.D}, x.options());
  if (starts) *starts = at::empty({s.B, nc, s.D, s.N}, x.options());
  for (int64_t c = 0; c < nc; c++) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    if (starts) starts->select(1, c).copy_(h);
    auto dA = chunk_dA(dt, A, t0, k);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_forward", [&] {
      fwd_chunk<scalar_t>(s, t0, k, x.data_ptr<scalar_t>(), dt.data_ptr<scalar_t>(), Bm.data_ptr<scalar_t>(),
                          Cm.data_ptr<scalar_t>(), dA.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                          y.data_ptr<scalar_t>(), nullptr);
    });
  }
  y.add_(x * Dv);
  return {y, h};
}

variable_list native_backward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                              const at::Tensor& Cm, const at::Tensor& Dv, const at::Tensor& starts, int64_t K,
                              const at::Tensor& gy_in) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  const int64_t nblk = (s.D + kBlock - 1) / kBlock;
  auto opts = x.options();
  at::Tensor gy = gy_in.defined() ? gy_in.contiguous() : at::Tensor();
  auto gx = at::empty({s.B, s.L, s.D}, opts);
  auto gdt = at::empty({s.B, s.L, s.D}, opts);
  auto gB = at::empty({s.B, s.L, s.N}, opts);
  auto gC = at::empty({s.B, s.L, s.N}, opts);
  auto gh = at::zeros({s.B, s.D, s.N}, opts);
  auto gA_part = at::zeros({s.B, s.D, s.N}, opts);
  auto gD_part = at::zeros({s.B, s.D}, opts);
  const int64_t kmax = std::min(K, s.L);
  auto hs = at::empty({s.B, kmax, s.D, s.N}, opts);
  auto gB_part = at::empty({nblk, s.B, kmax, s.N}, opts);
  auto gC_part = at::empty({nblk, s.B, kmax, s.N}, opts);
  for (int64_t c = nc - 1; c >= 0; c--) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    auto start = starts.select(1, c).contiguous();
    auto h = start.clone();
    auto dA = chunk_dA(dt, A, t0, k);
    auto hs_c = hs.narrow(1, 0, k);  // contiguous: k is the chunk's own length
    if (k != kmax) hs_c = at::empty({s.B, k, s.D, s.N}, opts);
    auto gBp = k == kmax ? gB_part : at::empty({nblk, s.B, k, s.N}, opts);
    auto gCp = k == kmax ? gC_part : at::empty({nblk, s.B, k, s.N}, opts);
    gBp.zero_();
    gCp.zero_();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_backward", [&] {
      using T = scalar_t;
      fwd_chunk<T>(s, t0, k, x.data_ptr<T>(), dt.data_ptr<T>(), Bm.data_ptr<T>(), Cm.data_ptr<T>(), dA.data_ptr<T>(),
                   h.data_ptr<T>(), nullptr, hs_c.data_ptr<T>());
      bwd_chunk<T>(s, t0, k, x.data_ptr<T>(), dt.data_ptr<T>(), A.data_ptr<T>(), Bm.data_ptr<T>(), Cm.data_ptr<T>(),
                   Dv.data_ptr<T>(), gy.defined() ? gy.data_ptr<T>() : nullptr, dA.data_ptr<T>(), start.data_ptr<T>(),
                   hs_c.data_ptr<T>(), gh.data_ptr<T>(), gx.data_ptr<T>(), gdt.data_ptr<T>(), gA_part.data_ptr<T>(),
                   gBp.data_ptr<T>(), gCp.data_ptr<T>(), gD_part.data_ptr<T>());
    });
    gB.narrow(1, t0, k).copy_(gBp.sum(0));
    gC.narrow(1, t0, k).copy_(gCp.sum(0));
  }
  return {gx, gdt, gA_part.sum(0), gB, gC, gD_part.sum(0)};
}

// ---- the same algorithm in ATen ops (any device) -------------------------------

std::tuple<at::Tensor, at::Tensor> aten_forward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                int64_t K, at::Tensor* starts) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto h = at::zeros({s.B, s.D, s.N}, x.options());
  auto y = at::empty({s.B, s.L, s.D}, x.options());
  if (starts) *starts = at::empty({s.B, nc, s.D, s.N}, x.options());
  for (int64_t c = 0; c < nc; c++) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    if (starts) starts->select(1, c).copy_(h);
    auto dA = chunk_dA(dt, A, t0, k);
    auto dBx = (dt.narrow(1, t0, k) * x.narrow(1, t0, k)).unsqueeze(-1) * Bm.narrow(1, t0, k).unsqueeze(2);
    auto Cc = Cm.narrow(1, t0, k);
    for (int64_t j = 0; j < k; j++) {
      h = dA.select(1, j) * h + dBx.select(1, j);
      y.select(1, t0 + j).copy_(at::matmul(h, Cc.select(1, j).unsqueeze(-1)).squeeze(-1));
    }
  }
  y.add_(x * Dv);
  return {y, h};
}

variable_list aten_backward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                            const at::Tensor& Cm, const at::Tensor& Dv, const at::Tensor& starts, int64_t K,
                            const at::Tensor& gy_in) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto opts = x.options();
  auto gy = gy_in.defined() ? gy_in : at::zeros({s.B, s.L, s.D}, opts);
  auto gx = at::empty({s.B, s.L, s.D}, opts);
  auto gdt = at::empty({s.B, s.L, s.D}, opts);
  auto gB = at::empty({s.B, s.L, s.N}, opts);
  auto gC = at::empty({s.B, s.L, s.N}, opts);
  auto gA = at::zeros({s.D, s.N}, opts);
  auto gh = at::zeros({s.B, s.D, s.N}, opts);
  for (int64_t c = nc - 1; c >= 0; c--) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    auto start = starts.select(1, c);
    auto dtc = dt.narrow(1, t0, k), xc = x.narrow(1, t0, k), gyc = gy.narrow(1, t0, k);
    auto Bc = Bm.narrow(1, t0, k), Cc = Cm.narrow(1, t0, k);
    auto dA = chunk_dA(dt, A, t0, k);
    auto dx = dtc * xc;
    auto dBx = dx.unsqueeze(-1) * Bc.unsqueeze(2);
    // The chunk's states, recomputed from its start.
    auto hs = at::empty({s.B, k, s.D, s.N}, opts);
    auto h = start;
    for (int64_t j = 0; j < k; j++) {
      h = dA.select(1, j) * h + dBx.select(1, j);
      hs.select(1, j).copy_(h);
    }
    // ∂L/∂h_t for every step of the chunk, newest first.
    auto G = at::empty({s.B, k, s.D, s.N}, opts);
    auto gyC = gyc.unsqueeze(-1) * Cc.unsqueeze(2);
    for (int64_t j = k - 1; j >= 0; j--) {
      auto ght = gh + gyC.select(1, j);
      G.select(1, j).copy_(ght);
      gh = ght * dA.select(1, j);
    }
    auto hprev = k > 1 ? at::cat({start.unsqueeze(1), hs.narrow(1, 0, k - 1)}, 1) : start.unsqueeze(1);
    auto gdA = G * hprev * dA;
    gA.add_((gdA * dtc.unsqueeze(-1)).sum(at::IntArrayRef{0, 1}));
    auto gdx = (G * Bc.unsqueeze(2)).sum(-1);
    gdt.narrow(1, t0, k).copy_((gdA * A).sum(-1) + gdx * xc);
    gx.narrow(1, t0, k).copy_(gdx * dtc + gyc * Dv);
    gB.narrow(1, t0, k).copy_((G * dx.unsqueeze(-1)).sum(2));
    gC.narrow(1, t0, k).copy_((gyc.unsqueeze(-1) * hs).sum(2));
  }
  auto gD = (gy * x).sum(at::IntArrayRef{0, 1});
  return {gx, gdt, gA, gB, gC, gD};
}

bool use_native(const at::Tensor& x, int64_t impl) {
  if (impl == kATen) return false;
  const bool cpu = x.device().is_cpu();
  TORCH_CHECK(impl != kNative || cpu, "selective_scan: the native kernel runs on the CPU, not on ", x.device());
  return cpu;
}

// ---- the autograd Function ----------------------------------------------------

struct SelectiveScan : public torch::autograd::Function<SelectiveScan> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                               const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv, int64_t K,
                               int64_t impl, bool save) {
    at::Tensor starts;
    at::Tensor* sp = save ? &starts : nullptr;
    auto out = use_native(x, impl) ? native_forward(x, dt, A, Bm, Cm, Dv, K, sp)
                                   : aten_forward(x, dt, A, Bm, Cm, Dv, K, sp);
    if (save) {
      ctx->save_for_backward({x, dt, A, Bm, Cm, Dv, starts});
      ctx->saved_data["K"] = K;
      ctx->saved_data["impl"] = impl;
    }
    ctx->mark_non_differentiable({std::get<1>(out)});
    return {std::get<0>(out), std::get<1>(out)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    TORCH_CHECK(saved.size() == 7, "selective_scan: backward without saved state (the forward ran without grad)");
    const int64_t K = ctx->saved_data["K"].toInt();
    const int64_t impl = ctx->saved_data["impl"].toInt();
    const auto &x = saved[0], &dt = saved[1], &A = saved[2], &Bm = saved[3], &Cm = saved[4], &Dv = saved[5],
               &starts = saved[6];
    at::Tensor gy = grads.empty() ? at::Tensor() : grads[0];
    if (gy.defined()) gy = gy.to(x.scalar_type()).contiguous();
    auto g = use_native(x, impl) ? native_backward(x, dt, A, Bm, Cm, Dv, starts, K, gy)
                                 : aten_backward(x, dt, A, Bm, Cm, Dv, starts, K, gy);
    g.resize(9);  // K, impl, save: no gradient
    return g;
  }
};

void check_inputs(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                  const at::Tensor& Cm, const at::Tensor& Dv, int64_t K) {
  TORCH_CHECK(x.dim() == 3, "selective_scan: x must be (batch, length, channels), got shape ", x.sizes());
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  TORCH_CHECK(L >= 1 && B >= 1 && D >= 1, "selective_scan: empty input of shape ", x.sizes());
  TORCH_CHECK(dt.sizes() == x.sizes(), "selective_scan: delta must have x's shape ", x.sizes(), ", got ", dt.sizes());
  TORCH_CHECK(A.dim() == 2 && A.size(0) == D && A.size(1) >= 1, "selective_scan: A must be (", D,
              ", state), got shape ", A.sizes());
  const int64_t N = A.size(1);
  TORCH_CHECK(Bm.dim() == 3 && Bm.size(0) == B && Bm.size(1) == L && Bm.size(2) == N, "selective_scan: B must be (",
              B, ", ", L, ", ", N, "), got shape ", Bm.sizes());
  TORCH_CHECK(Cm.sizes() == Bm.sizes(), "selective_scan: C must be (", B, ", ", L, ", ", N, "), got shape ",
              Cm.sizes());
  TORCH_CHECK(Dv.dim() == 1 && Dv.size(0) == D, "selective_scan: D must be (", D, "), got shape ", Dv.sizes());
  TORCH_CHECK(K >= 1, "selective_scan: chunk must be at least 1, got ", K);
  for (const auto* t : {&dt, &A, &Bm, &Cm, &Dv}) {
    TORCH_CHECK(t->device() == x.device(), "selective_scan: inputs on different devices (", x.device(), " and ",
                t->device(), ")");
  }
}

// selective_scan is the operator: checks, casts to the compute dtype, runs
// the Function, and returns y (in x's dtype for half inputs) and the last
// state (compute dtype, no gradient).
std::tuple<at::Tensor, at::Tensor> selective_scan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                  int64_t K, int64_t impl) {
  check_inputs(x, dt, A, Bm, Cm, Dv, K);
  TORCH_CHECK(impl >= kAuto && impl <= kATen, "selective_scan: unknown impl ", impl);
  at::ScalarType ct = x.scalar_type();
  for (const auto* t : {&dt, &A, &Bm, &Cm, &Dv}) ct = c10::promoteTypes(ct, t->scalar_type());
  TORCH_CHECK(at::isFloatingType(ct), "selective_scan: inputs must be floating point, got ", ct);
  if (ct != at::kDouble) ct = at::kFloat;  // half and bfloat16 are computed in float32
  auto prep = [ct](const at::Tensor& t) { return t.to(ct).contiguous(); };
  auto cx = prep(x), cdt = prep(dt), cA = prep(A), cB = prep(Bm), cC = prep(Cm), cD = prep(Dv);
  bool grad = false;
  for (const auto* t : {&cx, &cdt, &cA, &cB, &cC, &cD}) grad = grad || t->requires_grad();
  grad = grad && c10::GradMode::is_enabled();
  auto out = SelectiveScan::apply(cx, cdt, cA, cB, cC, cD, K, impl, grad);
  auto y = out[0];
  if (x.scalar_type() != ct && (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16)) {
    y = y.to(x.scalar_type());
  }
  return {y, out[1]};
}

}  // namespace

TORCH_LIBRARY(torchfit_scan, m) {
  m.def(
      "selective_scan(Tensor x, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D, int chunk=64, int impl=0) "
      "-> (Tensor, Tensor)",
      TORCH_FN(selective_scan));
}

extern "C" {

tfs_err tfs_check(char** schema) {
  try {
    auto h = c10::Dispatcher::singleton().findSchema({"torchfit_scan::selective_scan", ""});
    if (!h.has_value()) return strdup("E:torchfit_scan::selective_scan is not registered with the dispatcher");
    std::ostringstream os;
    os << h->schema();
    *schema = strdup(os.str().c_str());
    return nullptr;
  } catch (const std::exception& e) {
    std::string m = std::string("E:") + e.what();
    return strdup(m.c_str());
  } catch (...) {
    return strdup("E:unknown C++ exception");
  }
}

void tfs_free_error(tfs_err e) { std::free(e); }

}  // extern "C"
