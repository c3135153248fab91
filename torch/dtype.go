package torch

import "fmt"

// DType is a tensor element type; values are libtorch's ScalarType codes.
type DType int32

// Element types.
const (
	Uint8    DType = 0
	Int8     DType = 1
	Int16    DType = 2
	Int32    DType = 3
	Int64    DType = 4
	Float16  DType = 5
	Float32  DType = 6
	Float64  DType = 7
	Bool     DType = 11
	BFloat16 DType = 15
)

var dtypeNames = map[DType]string{
	Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Float16: "float16", Float32: "float32", Float64: "float64", Bool: "bool", BFloat16: "bfloat16",
}

// String returns PyTorch's name without the "torch." prefix.
func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Size returns the element size in bytes.
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Int16, Float16, BFloat16:
		return 2
	case Int32, Float32:
		return 4
	case Int64, Float64:
		return 8
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float16 || d == Float32 || d == Float64 || d == BFloat16
}

// maxScalarType bounds the codes passed to libtorch: its ScalarType is an
// int8_t enum, so a negative code or one of 128 and more would index past
// its tables (a segmentation fault) or wrap to another type (256 is uint8).
// Codes below it that this libtorch does not know are libtorch's to refuse.
const maxScalarType = 127

// checkDType panics with *Error when d cannot be a libtorch ScalarType.
func checkDType(op string, d DType) {
	if d < 0 || d > maxScalarType {
		throwf(op, "invalid dtype %v (want a DType constant such as Float32)", d)
	}
}

// ParseDType accepts PyTorch's names ("float32", "float", "half", "bf16", ...).
func ParseDType(s string) (DType, error) {
	switch s {
	case "float32", "float", "fp32", "f32":
		return Float32, nil
	case "float64", "double", "fp64", "f64":
		return Float64, nil
	case "float16", "half", "fp16", "f16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int64", "long":
		return Int64, nil
	case "int32", "int":
		return Int32, nil
	case "int16", "short":
		return Int16, nil
	case "int8":
		return Int8, nil
	case "uint8", "byte":
		return Uint8, nil
	case "bool":
		return Bool, nil
	}
	return 0, fmt.Errorf("torch: unknown dtype %q", s)
}

// DeviceType is libtorch's device type code.
type DeviceType int8

// Device types.
const (
	DeviceCPU  DeviceType = 0
	DeviceCUDA DeviceType = 1
)

// Device is where a tensor lives. The zero value is the CPU.
type Device struct {
	Type  DeviceType
	Index int // -1 for "current"; CPU uses -1
}

// CPU is the host.
var CPU = Device{Type: DeviceCPU, Index: -1}

// CUDA returns CUDA device n.
func CUDA(n int) Device { return Device{Type: DeviceCUDA, Index: n} }

// IsCUDA reports whether d is a CUDA device.
func (d Device) IsCUDA() bool { return d.Type == DeviceCUDA }

// String prints as PyTorch does: "cpu", "cuda:0".
func (d Device) String() string {
	switch d.Type {
	case DeviceCPU:
		return "cpu"
	case DeviceCUDA:
		if d.Index < 0 {
			return "cuda"
		}
		return fmt.Sprintf("cuda:%d", d.Index)
	}
	return fmt.Sprintf("device(%d:%d)", d.Type, d.Index)
}

// ParseDevice accepts "cpu", "cuda", "cuda:1" and "auto" (CUDA 0 when available).
func ParseDevice(s string) (Device, error) {
	switch s {
	case "cpu", "":
		return CPU, nil
	case "auto":
		if CUDAAvailable() {
			return CUDA(0), nil
		}
		return CPU, nil
	case "cuda":
		return CUDA(0), nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "cuda:%d", &n); err == nil && n >= 0 {
		return CUDA(n), nil
	}
	return CPU, fmt.Errorf("torch: unknown device %q (want cpu, cuda, cuda:N or auto)", s)
}
