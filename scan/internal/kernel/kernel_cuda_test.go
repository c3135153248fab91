//go:build cuda

package kernel

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// fatbinEntries lists a fat binary's entries as "sm_80" (SASS, an ELF
// cubin) or "compute_90" (PTX). The layout (CUDA's fatbinary.h, not a
// public header): a 16-byte header (magic 0xBA55ED50, version, header
// size, payload size), then entries, each a header (kind at 0: 1 PTX, 2
// ELF; its size at 4; the payload's size at 8; the architecture at 28)
// followed by its payload.
func fatbinEntries(b []byte) ([]string, error) {
	le := binary.LittleEndian
	if len(b) < 16 || le.Uint32(b) != 0xBA55ED50 {
		return nil, fmt.Errorf("not a fat binary (%d bytes)", len(b))
	}
	hsize, size := int(le.Uint16(b[6:])), le.Uint64(b[8:])
	if uint64(len(b)) < uint64(hsize)+size {
		return nil, fmt.Errorf("fat binary of %d bytes says it has %d", len(b), uint64(hsize)+size)
	}
	var out []string
	for p := hsize; p < hsize+int(size); {
		e := b[p:]
		if len(e) < 32 {
			return nil, fmt.Errorf("truncated entry at %d", p)
		}
		kind, eh, n, arch := le.Uint16(e), int(le.Uint32(e[4:])), int(le.Uint64(e[8:])), le.Uint32(e[28:])
		switch kind {
		case 1:
			out = append(out, fmt.Sprintf("compute_%d", arch))
		case 2:
			out = append(out, fmt.Sprintf("sm_%d", arch))
		default:
			return nil, fmt.Errorf("entry at %d of kind %d", p, kind)
		}
		p += eh + n
	}
	return out, nil
}

// The embedded kernels are what make scan-kernel promises: SASS for sm_80
// and sm_90, PTX for compute_90, and nothing else (the check that the
// cuda-tagged build compiled and linked the kernel, short of a GPU).
func TestCUDAImage(t *testing.T) {
	require.True(t, CUDABuilt)
	require.NotEmpty(t, CUDAImage(), "no %s: run make scan-kernel (make env, test and gpu-check do)", imageName)
	entries, err := fatbinEntries(CUDAImage())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"sm_80", "sm_90", "compute_90"}, entries)
	_, err = Check()
	require.NoError(t, err)
}

// The parser refuses what is not a fat binary.
func TestFatbinEntriesRefuses(t *testing.T) {
	_, err := fatbinEntries([]byte("\x7fELF not a fat binary"))
	require.ErrorContains(t, err, "not a fat binary")
	head := binary.LittleEndian.AppendUint32(nil, 0xBA55ED50)
	head = binary.LittleEndian.AppendUint16(head, 1)
	head = binary.LittleEndian.AppendUint16(head, 16)
	head = binary.LittleEndian.AppendUint64(head, 1000) // 1000 bytes of entries, none there
	_, err = fatbinEntries(head)
	require.ErrorContains(t, err, "says it has")
	entry := binary.LittleEndian.AppendUint16(nil, 7) // an entry of an unknown kind
	entry = append(entry, make([]byte, 30)...)
	head = binary.LittleEndian.AppendUint32(nil, 0xBA55ED50)
	head = binary.LittleEndian.AppendUint16(head, 1)
	head = binary.LittleEndian.AppendUint16(head, 16)
	head = binary.LittleEndian.AppendUint64(head, uint64(len(entry)))
	_, err = fatbinEntries(append(head, entry...))
	require.ErrorContains(t, err, "of kind 7")
}
