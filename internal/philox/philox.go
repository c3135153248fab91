package philox

/*
#include "philox.h"
*/
import "C"

// Block returns Philox4x32-10 of counter ctr under key (k0, k1).
func Block(ctr [4]uint32, k0, k1 uint32) [4]uint32 {
	var c C.philox_u4
	for i := range ctr {
		c.v[i] = C.uint32_t(ctr[i])
	}
	r := C.philox4x32_10(c, C.uint32_t(k0), C.uint32_t(k1))
	return [4]uint32{uint32(r.v[0]), uint32(r.v[1]), uint32(r.v[2]), uint32(r.v[3])}
}

// Stream returns block i of the stream (seed, offset): elements 4·i …
// 4·i+3, as philox_block.
func Stream(seed, offset, i uint64) [4]uint32 {
	r := C.philox_block(C.uint64_t(seed), C.uint64_t(offset), C.uint64_t(i))
	return [4]uint32{uint32(r.v[0]), uint32(r.v[1]), uint32(r.v[2]), uint32(r.v[3])}
}

// Uniform maps a word to [0, 1) as philox_uniform: its top 24 bits.
func Uniform(w uint32) float32 { return float32(C.philox_uniform(C.uint32_t(w))) }
