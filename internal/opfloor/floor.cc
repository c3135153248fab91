#include "floor.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

static char* dup(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

char* tf_opfloor(int32_t device_type, int32_t device_index, int32_t inplace, int64_t n, int32_t runs, double* ns) {
  try {
    if (n <= 0 || runs <= 0) return dup("opfloor: n and runs must be positive");
    at::Device dev(static_cast<c10::DeviceType>(device_type), static_cast<c10::DeviceIndex>(device_index));
    auto opts = at::TensorOptions().dtype(at::kFloat).device(dev);
    auto x = at::zeros({1}, opts), y = at::ones({1}, opts);
    const bool cuda = dev.is_cuda();
    double best = 1e300;
    for (int32_t r = 0; r < runs; r++) {
      auto t0 = std::chrono::steady_clock::now();
      if (inplace) {
        for (int64_t i = 0; i < n; i++) x.add_(y);
      } else {
        for (int64_t i = 0; i < n; i++) {
          auto z = at::add(x, y);
        }
      }
      if (cuda) {
        auto host = x.to(at::kCPU);  // waits for the device
      }
      auto t1 = std::chrono::steady_clock::now();
      best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n));
    }
    *ns = best;
    return nullptr;
  } catch (const std::exception& e) {
    return dup(std::string("opfloor: ") + e.what());
  } catch (...) {
    return dup("opfloor: unknown C++ exception");
  }
}
