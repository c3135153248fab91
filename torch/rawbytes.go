package torch

import (
	"fmt"
	"io"
	"runtime"
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Raw element bytes, for codecs outside this package (torch/ptfile, which
// reads and writes torch.save files): what a file format needs from a
// tensor and nothing more. Elements are in row-major (C) order and the
// machine's byte order, which is what torch.save stores.

// MaxDims is the most dimensions a torchfit tensor may have: Shape panics
// beyond it, so a codec refuses more when it reads a file.
const MaxDims = capi.MaxDims

// RawBytes calls f with t's elements as bytes (Numel × DType().Size() of
// them, in row-major order). For a contiguous CPU tensor data aliases t's
// memory, without a copy: f must not write to it, nor keep it after it
// returns. Any other tensor (a non-contiguous view, a CUDA tensor) is
// copied to the CPU first. data is empty for a tensor without elements.
//
// RawBytes returns f's error as it is, or an *Error when t cannot be read
// (released, undefined).
func (t *Tensor) RawBytes(f func(data []byte) error) error {
	var data []byte
	if err := Try(func() {
		info, _ := t.info("RawBytes")
		n := info.NBytes
		if n == 0 {
			return
		}
		if info.DeviceType == int32(DeviceCPU) && info.IsContiguous != 0 {
			ptr, err := capi.DataPtr(t.handle("RawBytes"))
			check("RawBytes", err)
			// ptr is libtorch (C) memory, not Go memory; t keeps it alive.
			data = unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&ptr))), n)
			return
		}
		data = make([]byte, n)
		check("RawBytes", capi.CopyTo(t.handle("RawBytes"), unsafe.Pointer(&data[0]), int(n)))
	}); err != nil {
		return err
	}
	defer runtime.KeepAlive(t)
	return f(data)
}

// FromReader returns a new contiguous CPU tensor of the given shape and
// dtype whose elements are the next Numel × dt.Size() bytes of r (in
// row-major order), read straight into the tensor's memory: no Go-side copy
// of the data is made, so reading a tensor takes its size in memory once.
//
// The tensor belongs to the enclosing Tidy scope as any new tensor. On
// error nothing stays allocated: an allocation failure is an *Error
// (matching ErrOutOfMemory when it is one), a short or failing read is r's
// error, as io.ReadFull returns it (io.EOF or io.ErrUnexpectedEOF when r
// ends early).
func FromReader(r io.Reader, shape []int64, dt DType) (*Tensor, error) {
	if dt.Size() == 0 {
		return nil, &Error{Op: "FromReader", Msg: fmt.Sprintf("unsupported dtype %v", dt)}
	}
	var t *Tensor
	if err := Try(func() { t = Empty(shape, dt) }); err != nil {
		return nil, err
	}
	if err := readInto(r, t); err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// readInto fills t, a new contiguous CPU tensor, from r.
func readInto(r io.Reader, t *Tensor) error {
	n := t.NBytes()
	if n == 0 {
		return nil
	}
	ptr, err := capi.DataPtr(t.handle("FromReader"))
	if err != nil {
		return wrapErr("FromReader", err)
	}
	// ptr is libtorch (C) memory that t owns.
	dst := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&ptr))), n)
	_, err = io.ReadFull(r, dst)
	runtime.KeepAlive(t)
	return err
}
