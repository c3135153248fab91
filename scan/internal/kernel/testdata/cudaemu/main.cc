// main.cc: runs scan_cuda.cu's kernels on the host (emu.h) for one shape
// and compares y, the last state, the chunk starts and the six gradients
// with a float64 reference that keeps every state, which is itself checked
// against finite differences. Usage: emu B L D N K. Prints the relative
// errors; exits 1 when one is above 1e-5.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "emu.h"
#include "kernel.h"

#define KERNELS(S)                                 \
  extern "C" void tfs_scan_fwd_s##S(tfs_cuda_args); \
  extern "C" void tfs_scan_bwd_s##S(tfs_cuda_args);
KERNELS(1)
KERNELS(2)
KERNELS(4)
KERNELS(8)

using Kernel = void (*)(tfs_cuda_args);
using Vec = std::vector<double>;

// launch runs a kernel with cuda.cc's geometry.
void launch(Kernel k, const tfs_cuda_args& a) {
  int W = 1;
  while (W < 32 && W < a.N) W *= 2;
  const int P = 128 / W;
  blockDim = {unsigned(W), unsigned(P), 1};
  gridDim = {unsigned((a.D + P - 1) / P), unsigned(a.B), 1};
  for (unsigned by = 0; by < gridDim.y; by++) {
    for (unsigned bx = 0; bx < gridDim.x; bx++) {
      std::barrier<> bar(W * P);
      emu_block = &bar;
      std::vector<std::thread> ts;
      for (int y = 0; y < P; y++) {
        for (int x = 0; x < W; x++) {
          ts.emplace_back([=] {
            threadIdx = {unsigned(x), unsigned(y), 1};
            blockIdx = {bx, by, 1};
            k(a);
          });
        }
      }
      for (auto& t : ts) t.join();
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: emu B L D N K\n");
    return 2;
  }
  const int64_t B = atoi(argv[1]), L = atoi(argv[2]), D = atoi(argv[3]), N = atoi(argv[4]), K = atoi(argv[5]);
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  auto vec = [&](size_t n, std::function<double(double)> f) {
    Vec v(n);
    for (auto& e : v) e = f(nd(rng));
    return v;
  };
  auto id = [](double z) { return z; };
  Vec x = vec(B * L * D, id), dt = vec(B * L * D, [](double z) { return std::log1p(std::exp(z)); });
  Vec A = vec(D * N, [](double z) { return -std::exp(z); });
  Vec Bm = vec(B * L * N, id), Cm = vec(B * L * N, id), Dv = vec(D, id), gy = vec(B * L * D, id);

  // The reference: every state kept, (L+1, B, D, N), state 0 the zeros.
  Vec hs((L + 1) * B * D * N, 0.0), y(B * L * D);
  auto H = [&](int64_t t, int64_t b, int64_t d, int64_t n) -> double& { return hs[((t * B + b) * D + d) * N + n]; };
  auto forward = [&](Vec& out) {
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < L; t++)
        for (int64_t d = 0; d < D; d++) {
          const int64_t i = (b * L + t) * D + d;
          double acc = 0;
          for (int64_t n = 0; n < N; n++) {
            const int64_t j = (b * L + t) * N + n;
            H(t + 1, b, d, n) = std::exp(dt[i] * A[d * N + n]) * H(t, b, d, n) + dt[i] * x[i] * Bm[j];
            acc += Cm[j] * H(t + 1, b, d, n);
          }
          out[i] = acc + Dv[d] * x[i];
        }
  };
  forward(y);
  Vec gx(B * L * D, 0), gdt(B * L * D, 0), gA(D * N, 0), gB(B * L * N, 0), gC(B * L * N, 0), gD(D, 0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++)
      for (int64_t n = 0; n < N; n++) {
        double gh = 0;
        for (int64_t t = L - 1; t >= 0; t--) {
          const int64_t i = (b * L + t) * D + d, j = (b * L + t) * N + n;
          const double a = std::exp(dt[i] * A[d * N + n]), ght = gh + gy[i] * Cm[j];
          gC[j] += gy[i] * H(t + 1, b, d, n);
          gB[j] += ght * dt[i] * x[i];
          const double gda = ght * H(t, b, d, n) * a;
          gA[d * N + n] += gda * dt[i];
          gdt[i] += gda * A[d * N + n] + ght * Bm[j] * x[i];
          gx[i] += ght * Bm[j] * dt[i];
          gh = ght * a;
        }
      }
  for (int64_t i = 0; i < B * L * D; i++) {
    gx[i] += gy[i] * Dv[i % D];
    gD[i % D] += gy[i] * x[i];
  }
  const Vec last(hs.end() - B * D * N, hs.end()), hkeep = hs;
  // Finite differences of Σ y·gy: the reference's gradients are right.
  double fd_err = 0;
  Vec* ins[] = {&x, &dt, &A, &Bm, &Cm, &Dv};
  Vec* grads[] = {&gx, &gdt, &gA, &gB, &gC, &gD};
  Vec tmp(B * L * D);
  for (int k = 0; k < 6; k++) {
    for (int r = 0; r < 3; r++) {
      Vec& v = *ins[k];
      const size_t e = (r * 7919) % v.size();
      const double keep = v[e], eps = 1e-6;
      double s[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        v[e] = keep + (sgn ? -eps : eps);
        forward(tmp);
        s[sgn] = 0;
        for (size_t i = 0; i < tmp.size(); i++) s[sgn] += tmp[i] * gy[i];
      }
      v[e] = keep;
      const double fd = (s[0] - s[1]) / (2 * eps);
      fd_err = std::max(fd_err, std::abs(fd - (*grads[k])[e]) / (1 + std::abs(fd)));
    }
  }
  hs = hkeep;

  // The kernels, in float32.
  auto f32 = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  auto fx = f32(x), fdt = f32(dt), fA = f32(A), fB = f32(Bm), fC = f32(Cm), fD = f32(Dv), fgy = f32(gy);
  const int64_t nc = (L + K - 1) / K;
  std::vector<float> oy(B * L * D), olast(B * D * N), ost(B * nc * D * N), ogx(B * L * D), ogdt(B * L * D),
      ogA(D * N, 0), ogB(B * L * N, 0), ogC(B * L * N, 0), ogD(D, 0), ohs(std::min(K, L) * B * D * N);
  tfs_cuda_args a{};
  a.x = fx.data(), a.dt = fdt.data(), a.A = fA.data(), a.Bm = fB.data(), a.Cm = fC.data(), a.Dv = fD.data();
  a.y = oy.data(), a.last = olast.data(), a.starts = ost.data(), a.gy = fgy.data();
  a.gx = ogx.data(), a.gdt = ogdt.data(), a.gA = ogA.data(), a.gB = ogB.data(), a.gC = ogC.data(), a.gD = ogD.data();
  a.hs = ohs.data();
  a.B = B, a.L = L, a.D = D, a.N = N, a.K = K, a.nc = nc;
  int W = 1;
  while (W < 32 && W < N) W *= 2;
  const int64_t per = (N + W - 1) / W;
  const int s = per <= 1 ? 0 : per <= 2 ? 1 : per <= 4 ? 2 : 3;
  const Kernel fwd[] = {tfs_scan_fwd_s1, tfs_scan_fwd_s2, tfs_scan_fwd_s4, tfs_scan_fwd_s8};
  const Kernel bwd[] = {tfs_scan_bwd_s1, tfs_scan_bwd_s2, tfs_scan_bwd_s4, tfs_scan_bwd_s8};
  launch(fwd[s], a);
  launch(bwd[s], a);

  Vec starts(B * nc * D * N);
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < nc; c++)
      for (int64_t d = 0; d < D; d++)
        for (int64_t n = 0; n < N; n++) starts[((b * nc + c) * D + d) * N + n] = H(c * K, b, d, n);
  auto rel = [](const std::vector<float>& got, const Vec& want) {
    double m = 1e-30, e = 0;
    for (size_t k = 0; k < got.size(); k++) {
      m = std::max(m, std::abs(want[k]));
      e = std::max(e, std::abs(got[k] - want[k]));
    }
    return e / m;
  };
  const char* names[] = {"y", "last", "starts", "dx", "ddelta", "dA", "dB", "dC", "dD"};
  const double errs[] = {rel(oy, y),   rel(olast, last), rel(ost, starts), rel(ogx, gx), rel(ogdt, gdt),
                         rel(ogA, gA), rel(ogB, gB),     rel(ogC, gC),     rel(ogD, gD)};
  printf("B=%ld L=%ld D=%ld N=%ld K=%ld (S=%d per lane): reference vs finite differences %.1e;", long(B), long(L),
         long(D), long(N), long(K), 1 << s, fd_err);
  bool ok = fd_err <= 1e-5;
  for (int k = 0; k < 9; k++) {
    printf(" %s %.1e", names[k], errs[k]);
    ok = ok && errs[k] <= 1e-5;
  }
  printf("\n");
  return ok ? 0 : 1;
}
