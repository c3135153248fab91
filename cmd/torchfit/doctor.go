package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/torch"
)

// doctorReport is what `torchfit doctor` prints (--json: this struct).
type doctorReport struct {
	Libtorch struct {
		Version        string `json:"version"`
		HeaderVersion  string `json:"header_version"`
		Library        string `json:"library"`
		CXX11ABI       bool   `json:"cxx11_abi"`
		CUDABuild      bool   `json:"cuda_build"`
		CUDATag        bool   `json:"cuda_tag"`
		VersionsDiffer bool   `json:"versions_differ"`
	} `json:"libtorch"`
	CUDA struct {
		Available          bool               `json:"available"`
		Reason             string             `json:"reason,omitempty"`
		Runtime            string             `json:"runtime,omitempty"`
		CuDNN              string             `json:"cudnn,omitempty"`
		NCCL               string             `json:"nccl,omitempty"`
		Driver             string             `json:"driver,omitempty"`
		ExpandableSegments *bool              `json:"expandable_segments,omitempty"`
		AllocatorSettings  string             `json:"allocator_settings,omitempty"`
		Devices            []doctorCUDADevice `json:"devices,omitempty"`
		Env                map[string]string  `json:"env,omitempty"`
	} `json:"cuda"`
	CPU struct {
		NativeBF16    bool   `json:"native_bf16"`
		NativeBF16Why string `json:"native_bf16_source"`
		Capability    string `json:"capability"`
		BLAS          string `json:"blas"`
		BLASKernels   string `json:"blas_kernels"`
		OneDNN        string `json:"onednn"`
		Threads       int    `json:"threads"`
	} `json:"cpu"`
	Distributed struct {
		Gloo bool `json:"gloo"`
		NCCL bool `json:"nccl"`
	} `json:"distributed"`
}

type doctorCUDADevice struct {
	Index           int     `json:"index"`
	Name            string  `json:"name"`
	Capability      string  `json:"capability"`
	Multiprocessors int     `json:"multiprocessors"`
	TotalGiB        float64 `json:"total_gib"`
	FreeGiB         float64 `json:"free_gib"`
	NativeBF16      bool    `json:"native_bf16"`
}

func buildDoctor() (doctorReport, error) {
	var r doctorReport
	b, err := torch.Build()
	if err != nil {
		return r, err
	}
	r.Libtorch.Version, r.Libtorch.HeaderVersion, r.Libtorch.Library = b.Version, b.HeaderVersion, b.Library
	r.Libtorch.CXX11ABI, r.Libtorch.CUDABuild, r.Libtorch.CUDATag = b.CXX11ABI, b.CUDABuild, b.CUDATag
	r.Libtorch.VersionsDiffer = majorMinor(b.Version) != majorMinor(b.HeaderVersion)
	c := &r.CUDA
	c.Available, c.Reason, c.Runtime, c.CuDNN, c.NCCL, c.Driver = b.CUDA.Available, b.CUDA.Reason, b.CUDA.Runtime, b.CUDA.CuDNN, b.CUDA.NCCL, b.CUDA.Driver
	c.ExpandableSegments, c.AllocatorSettings = b.CUDA.ExpandableSegments, b.CUDA.AllocatorSettings
	for _, d := range b.CUDA.Devices {
		c.Devices = append(c.Devices, doctorCUDADevice{Index: d.Index, Name: d.Name, Capability: d.Capability(),
			Multiprocessors: d.Multiprocessors, TotalGiB: gib(d.TotalBytes), FreeGiB: gib(d.FreeBytes), NativeBF16: d.NativeBF16()})
	}
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"} {
		if v, ok := os.LookupEnv(k); ok {
			if c.Env == nil {
				c.Env = map[string]string{}
			}
			c.Env[k] = v
		}
	}
	cpu := amp.HostCPU()
	r.CPU.NativeBF16, r.CPU.NativeBF16Why = cpu.NativeBF16, cpu.Source
	r.CPU.Capability = configValue(b.Config, "CPU capability usage")
	r.CPU.BLAS = blasInfo(b.Config)
	r.CPU.BLASKernels = torch.BLAS().String()
	r.CPU.OneDNN = torch.OneDNNVersion()
	if r.CPU.OneDNN == "" {
		// The wheel links oneDNN in with its symbols hidden: its
		// configuration still names the version.
		if m := onednnField.FindStringSubmatch(b.Config); m != nil {
			r.CPU.OneDNN = m[1] + " (from the build configuration)"
		}
	}
	r.CPU.Threads = torch.NumThreads()
	r.Distributed.Gloo = true // package distributed always builds ProcessGroupGloo
	r.Distributed.NCCL = distributed.HasNCCL()
	return r, nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// configValue reads "- NAME: value" from at::show_config().
func configValue(cfg, name string) string {
	for _, line := range strings.Split(cfg, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "- "+name+": "); ok {
			return v
		}
	}
	return ""
}

var (
	blasField   = regexp.MustCompile(`BLAS_INFO=([^,\s]+)`)
	onednnField = regexp.MustCompile(`MKL-DNN v([0-9][0-9.]*)`)
)

// blasInfo is libtorch's BLAS as its configuration states it.
func blasInfo(cfg string) string {
	if m := blasField.FindStringSubmatch(cfg); m != nil {
		if m[1] == "generic" {
			return "generic (the system's libblas.so.3)"
		}
		return m[1]
	}
	return "unknown"
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func (r doctorReport) print(w io.Writer) {
	l := r.Libtorch
	fmt.Fprintf(w, "libtorch      %s  %s\n", l.Version, l.Library)
	abi := "pre-cxx11"
	if l.CXX11ABI {
		abi = "cxx11"
	}
	fmt.Fprintf(w, "  compiled    against %s headers, C++ ABI %s, cuda tag %s; library built with CUDA %s\n", l.HeaderVersion, abi, yes(l.CUDATag), yes(l.CUDABuild))
	if l.VersionsDiffer {
		fmt.Fprintf(w, "  WARNING     headers %s but library %s: rebuild torchfit against the library it loads\n", l.HeaderVersion, l.Version)
	}
	c := r.CUDA
	if c.Available {
		fmt.Fprintf(w, "CUDA          available: runtime %s, cuDNN %s, NCCL %s, driver CUDA %s\n", orDash(c.Runtime), orDash(c.CuDNN), orDash(c.NCCL), orDash(c.Driver))
	} else {
		fmt.Fprintf(w, "CUDA          not available: %s\n", c.Reason)
		if c.Runtime != "" {
			fmt.Fprintf(w, "  compiled in runtime %s, cuDNN %s, NCCL %s\n", c.Runtime, orDash(c.CuDNN), orDash(c.NCCL))
		}
	}
	for _, d := range c.Devices {
		bf := "bf16 native"
		if !d.NativeBF16 {
			bf = "no native bf16 (fp16 with a scaler)"
		}
		fmt.Fprintf(w, "  cuda:%d      %s, capability %s, %d SMs, %.1f GiB (%.1f free), %s\n", d.Index, d.Name, d.Capability, d.Multiprocessors, d.TotalGiB, d.FreeGiB, bf)
	}
	if c.ExpandableSegments != nil {
		fmt.Fprintf(w, "  allocator   expandable_segments %s (settings %q)\n", map[bool]string{true: "on", false: "off"}[*c.ExpandableSegments], c.AllocatorSettings)
	} else if c.Available {
		fmt.Fprintf(w, "  allocator   expandable_segments: not in libtorch %s (from 2.1)\n", l.Version)
	}
	for k, v := range c.Env {
		fmt.Fprintf(w, "  env         %s=%s\n", k, v)
	}
	p := r.CPU
	fmt.Fprintf(w, "CPU           %s; native bf16 %s (%s); %d threads\n", orDash(p.Capability), yes(p.NativeBF16), p.NativeBF16Why, p.Threads)
	fmt.Fprintf(w, "  BLAS        %s; %s\n", p.BLAS, p.BLASKernels)
	fmt.Fprintf(w, "  oneDNN      %s\n", orDash(p.OneDNN))
	fmt.Fprintf(w, "distributed   Gloo %s, NCCL %s\n", yes(r.Distributed.Gloo), yes(r.Distributed.NCCL))
}

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "what torchfit runs on: libtorch (version, path, ABI), CUDA (and why not), devices, allocator, CPU, BLAS, distributed",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the facts as JSON"}},
		Action: func(c *cli.Context) error {
			r, err := buildDoctor()
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			r.print(os.Stdout)
			return nil
		},
	}
}
