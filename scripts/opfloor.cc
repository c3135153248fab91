// opfloor: the per-op floor any binding can reach on this libtorch: a C++
// loop calling x.add_(y) and at::add(x, y) on 1-element tensors at one
// thread, best of 5 runs of 300,000 calls (make bench-ops-floor).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

int main() {
  at::set_num_threads(1);
  auto x = at::zeros({1}), y = at::ones({1});
  double inplace = 1e18, add = 1e18;
  for (int r = 0; r < 5; r++) {
    const int n = 300000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) x.add_(y);
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
      auto z = at::add(x, y);
    }
    auto t2 = std::chrono::steady_clock::now();
    inplace = std::min(inplace, std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
    add = std::min(add, std::chrono::duration<double, std::nano>(t2 - t1).count() / n);
  }
  std::printf("add_ %.0f\nadd %.0f\n", inplace, add);
}
