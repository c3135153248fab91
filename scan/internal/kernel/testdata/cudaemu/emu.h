// emu.h: the CUDA built-ins scan_cuda.cu uses, emulated on the host, so that
// the kernels' own source runs without a GPU (TestCUDAKernelOnHost): one OS
// thread per CUDA thread, the blocks of a grid one after another, so that a
// function-static array is the block's shared memory; __syncthreads and
// shuffles are barriers of the block's threads. Warps are not emulated:
// every shuffle is block-wide, which scan_cuda.cu allows because all its
// threads run every shuffle.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* emu_block;  // the running block's barrier
inline float emu_lanes[1024];        // shuffle exchange, one slot per thread

inline void __syncthreads() { emu_block->arrive_and_wait(); }

// __shfl_xor_sync within segments of width W = blockDim.x (a channel's lanes).
inline float __shfl_xor_sync(unsigned, float v, int off, int) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = threadIdx.x;
  emu_block->arrive_and_wait();
  emu_lanes[tid] = v;
  emu_block->arrive_and_wait();
  const float r = emu_lanes[tid - lane + (lane ^ off)];
  emu_block->arrive_and_wait();
  return r;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
