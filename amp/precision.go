package amp

import (
	"fmt"
	"os"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// Precision is how a training step computes: float32, bfloat16 autocast, or
// float16 autocast with a GradScaler. It is torchfit's one home for the
// choice: the loop, memory estimates, measurements and the CLI all take it.
type Precision string

// Precisions.
const (
	FP32 Precision = "fp32"
	BF16 Precision = "bf16" // autocast to bfloat16 (CPU or CUDA); no scaler needed
	FP16 Precision = "fp16" // autocast to float16 with a GradScaler (CUDA)
)

// DType is the autocast dtype (Float32 for FP32: no autocast).
func (p Precision) DType() torch.DType {
	switch p {
	case BF16:
		return torch.BFloat16
	case FP16:
		return torch.Float16
	}
	return torch.Float32
}

// Scaled reports whether the precision needs a GradScaler (FP16).
func (p Precision) Scaled() bool { return p == FP16 }

// CPU describes what the host CPU computes natively, for the "auto" choice.
type CPU struct {
	NativeBF16 bool   // AVX-512 BF16 or AMX: bfloat16 matmuls run in hardware
	Source     string // where the answer came from
	// FP16Autocast: this libtorch autocasts to float16 on the CPU (2.4
	// and later; 1.13's CPU autocast takes bfloat16 only).
	FP16Autocast bool
}

// EnvNativeBF16 overrides the CPU probe: "1" says the CPU computes
// bfloat16 natively, "0" says it does not. Tests force both branches of
// the "auto" choice with it, on any machine.
const EnvNativeBF16 = "TORCHFIT_NATIVE_BF16"

// HostCPU probes the CPU (/proc/cpuinfo flags avx512_bf16 and amx_bf16),
// unless TORCHFIT_NATIVE_BF16 says otherwise.
func HostCPU() CPU {
	c := probeCPU()
	c.FP16Autocast = CPUFloat16()
	return c
}

// CPUFloat16 reports whether this libtorch autocasts to float16 on the CPU
// (2.4 and later; 1.13 takes bfloat16 only).
func CPUFloat16() bool {
	maj, min, _ := torch.LibtorchVersion()
	return maj > 2 || (maj == 2 && min >= 4)
}

func probeCPU() CPU {
	switch os.Getenv(EnvNativeBF16) {
	case "1":
		return CPU{NativeBF16: true, Source: EnvNativeBF16 + "=1"}
	case "0":
		return CPU{NativeBF16: false, Source: EnvNativeBF16 + "=0"}
	}
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return CPU{Source: "no /proc/cpuinfo"}
	}
	return cpuFromInfo(string(raw))
}

func cpuFromInfo(info string) CPU {
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "avx512_bf16" || f == "amx_bf16" {
				return CPU{NativeBF16: true, Source: "/proc/cpuinfo: " + f}
			}
		}
		return CPU{Source: "/proc/cpuinfo: no avx512_bf16 or amx_bf16"}
	}
	return CPU{Source: "/proc/cpuinfo: no flags line"}
}

// Choice is a resolved precision and why it was chosen.
type Choice struct {
	Precision
	Reason string
}

func (c Choice) String() string { return string(c.Precision) + " (" + c.Reason + ")" }

// ParsePrecision resolves a --mixed-precision value for device on this
// host: ResolvePrecision with HostCPU().
func ParsePrecision(s string, device torch.Device) (Choice, error) {
	return ResolvePrecision(s, device, HostCPU())
}

// ResolvePrecision resolves a --mixed-precision value for device: "" (not
// given: fp32, the default), fp32 (also float32, no, none, off), bf16 (bfloat16), fp16 (float16, half; CUDA,
// or the CPU with libtorch 2.4+: cpu.FP16Autocast), or auto (also on, yes, true): fp16 with a GradScaler on CUDA; on
// the CPU bf16 where the CPU computes it natively, else fp32 (libtorch
// emulates bfloat16 there: it saves memory but runs many times slower).
func ResolvePrecision(s string, device torch.Device, cpu CPU) (Choice, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return Choice{FP32, "the default"}, nil
	case "fp32", "float32", "no", "none", "off", "false":
		return Choice{FP32, "asked for"}, nil
	case "bf16", "bfloat16":
		if !device.IsCUDA() && !cpu.NativeBF16 {
			return Choice{BF16, "asked for; this CPU emulates bfloat16 (" + cpu.Source + "): slower than fp32"}, nil
		}
		return Choice{BF16, "asked for"}, nil
	case "fp16", "float16", "half":
		if !device.IsCUDA() && !cpu.FP16Autocast {
			return Choice{}, fmt.Errorf("amp: float16 autocast on the CPU needs libtorch 2.4 or later (this one takes bf16 only); use bf16, or CUDA")
		}
		if !device.IsCUDA() {
			return Choice{FP16, "asked for: float16 autocast on the CPU (libtorch 2.4+) with a GradScaler"}, nil
		}
		return Choice{FP16, "asked for"}, nil
	case "auto", "on", "yes", "true":
		switch {
		case device.IsCUDA():
			return Choice{FP16, "auto: float16 autocast with a GradScaler on CUDA"}, nil
		case cpu.NativeBF16:
			return Choice{BF16, "auto: the CPU computes bfloat16 natively (" + cpu.Source + ")"}, nil
		default:
			return Choice{FP32, "auto: the CPU has no native bfloat16 (" + cpu.Source + "), and emulated bf16 is many times slower"}, nil
		}
	}
	return Choice{}, fmt.Errorf("amp: unknown precision %q (want no (fp32), auto, bf16 or fp16)", s)
}
