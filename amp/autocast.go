package amp

import "github.com/torchfit/torchfit/torch"

// Autocast runs fn with autocast on for device's type at dtype (CUDA:
// torch.Float16 or torch.BFloat16; CPU: torch.BFloat16). Regions nest; the
// previous state comes back when fn returns or panics.
func Autocast(device torch.Device, dtype torch.DType, fn func()) { torch.Autocast(device, dtype, fn) }

// Float32 runs fn with autocast off for device's type (losses, softmax over
// long sequences inside an autocast region). Tensors coming from the
// enclosing region may be low precision: convert them with ToDType.
func Float32(device torch.Device, fn func()) { torch.AutocastOff(device, fn) }

// Enabled reports whether autocast is on for device's type on the calling
// thread, and its dtype. Only meaningful inside a region (outside one the
// goroutine may move between threads).
func Enabled(device torch.Device) (bool, torch.DType) { return torch.AutocastEnabled(device) }

// ClearCache drops the calling thread's cached low-precision weight copies.
// Call it after each optimizer step taken inside an autocast region (the
// training loop in package accumulate does).
func ClearCache() { torch.ClearAutocastCache() }

// DefaultDType is the low precision autocast uses on device: float16 on
// CUDA, bfloat16 on the CPU (libtorch 1.13's CPU autocast has no float16).
func DefaultDType(device torch.Device) torch.DType {
	if device.IsCUDA() {
		return torch.Float16
	}
	return torch.BFloat16
}
