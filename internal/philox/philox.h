// philox.h: Philox4x32-10, the counter-based generator of Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3" (SC'11), as CUDA's curand
// and PyTorch's CUDA dropout use it. A block of four 32-bit words is a pure
// function of a 128-bit counter and a 64-bit key, so any element's random
// number can be made again from (seed, offset, index) without saving it:
// a dropout backward regenerates its mask instead of keeping one.
//
// Header-only C, usable from C, C++ and CUDA (functions are
// __host__ __device__ under nvcc). One home for the generator: every
// native package that draws counter-based numbers includes this file.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define PHILOX_FN static inline __host__ __device__
#else
#define PHILOX_FN static inline
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

typedef struct {
  uint32_t v[4];
} philox_u4;

// philox4x32_10 returns the block for counter ctr and key key.
PHILOX_FN philox_u4 philox4x32_10(philox_u4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr.v[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr.v[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    philox_u4 n;
    n.v[0] = hi1 ^ ctr.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ ctr.v[3] ^ k1;
    n.v[3] = lo0;
    ctr = n;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  return ctr;
}

// philox_block is the block that holds elements 4·i … 4·i+3 of the stream
// (seed, offset): key = seed, counter = (i, offset) as 64-bit halves. The
// streams of different offsets never overlap, so one seed serves many
// calls (each call takes a fresh offset).
PHILOX_FN philox_u4 philox_block(uint64_t seed, uint64_t offset, uint64_t i) {
  philox_u4 c;
  c.v[0] = (uint32_t)i;
  c.v[1] = (uint32_t)(i >> 32);
  c.v[2] = (uint32_t)offset;
  c.v[3] = (uint32_t)(offset >> 32);
  return philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

// philox_uniform maps a word to a float in [0, 1) with 24 bits: every
// value is exact in float32, so a comparison with a keep probability is
// the same on every device and compiler.
PHILOX_FN float philox_uniform(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
