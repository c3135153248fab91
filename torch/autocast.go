package torch

import (
	"runtime"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Autocast runs fn with autocast on for device's type at dtype. Package amp
// documents the semantics; this is its engine. dtype must be Float16 or
// BFloat16 (what libtorch's autocast computes in); another panics with
// *Error, as does a device type other than the CPU and CUDA.
func Autocast(device Device, dtype DType, fn func()) {
	if dtype != Float16 && dtype != BFloat16 {
		throwf("Autocast", "autocast dtype %v (want float16 or bfloat16)", dtype)
	}
	autocastRegion(device, true, dtype, fn)
}

// AutocastOff runs fn with autocast off for device's type.
func AutocastOff(device Device, fn func()) { autocastRegion(device, false, Float32, fn) }

func autocastRegion(device Device, on bool, dtype DType, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	typ := int(device.Type)
	prev, err := capi.AutocastEnter(typ, on, int32(dtype))
	check("Autocast", err)
	defer capi.AutocastExit(typ, prev)
	fn()
}

// AutocastEnabled reports the calling thread's autocast state for device's
// type (meaningful inside a region, where the goroutine is locked).
func AutocastEnabled(device Device) (bool, DType) {
	s, err := capi.AutocastGet(int(device.Type))
	if err != nil {
		return false, Float32
	}
	return s.Enabled != 0, DType(s.DType)
}

// ClearAutocastCache drops the calling thread's cached low-precision weights.
func ClearAutocastCache() { check("ClearAutocastCache", capi.AutocastClearCache()) }
