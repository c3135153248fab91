package philox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The known-answer vectors of Random123 (kat_vectors, philox4x32 10).
func TestKnownAnswers(t *testing.T) {
	for _, c := range []struct {
		ctr    [4]uint32
		k0, k1 uint32
		want   [4]uint32
	}{
		{[4]uint32{0, 0, 0, 0}, 0, 0, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
		{[4]uint32{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0, [4]uint32{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
	} {
		require.Equal(t, c.want, Block(c.ctr, c.k0, c.k1))
	}
}

func TestStreamLayout(t *testing.T) {
	seed, off, i := uint64(0x0123456789abcdef), uint64(0xfedcba9876543210), uint64(0x1122334455667788)
	want := Block([4]uint32{0x55667788, 0x11223344, 0x76543210, 0xfedcba98}, 0x89abcdef, 0x01234567)
	require.Equal(t, want, Stream(seed, off, i))
	require.NotEqual(t, Stream(seed, off, i), Stream(seed, off+1, i))
}

func TestUniform(t *testing.T) {
	require.Equal(t, float32(0), Uniform(0xff))
	require.Equal(t, float32(0.5), Uniform(0x80000000))
	require.Less(t, Uniform(0xffffffff), float32(1))
	require.Equal(t, float32(16777215)/16777216, Uniform(0xffffffff))
}
