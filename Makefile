# torchfit: Go training on libtorch that fits in memory.
#
#   make demo    the main job on the default libtorch (Debian's 1.13, CPU)
#   make test    everything CI checks: the Debian 1.13 leg, the PyTorch 2.11
#                leg (pip wheel in .venv) and the CUDA link
#
# Which libtorch (third_party/README.md), as binding users expect:
#   LIBTORCH=dir             a libtorch zip or a torch package directory (include/, lib/)
#   LIBTORCH_USE_PYTORCH=1   the torch package of $(PY) (make venv makes .venv/bin/python's)
#   neither                  Debian's libtorch-dev (1.13, CPU)
# The cuda build tag is added when lib/ has libtorch_cuda.so; the C++ ABI is
# read from the library (TORCH_CXX11_ABI=0|1 overrides).

SHELL := /bin/bash
comma := ,
GO ?= go
PY ?= /usr/bin/python3
LIBTORCH ?=
LIBTORCH_USE_PYTORCH ?=
TORCH_CXX11_ABI ?=
TAGS ?=
FUZZTIME ?= 50000x
FUZZTIME_SAFETENSORS ?= 20000x
BENCHTIME ?= 1s
VENV ?= .venv

DEBIAN_PACKAGES := libtorch-dev libgloo-dev libopenblas0-openmp python3-torch python3-torchvision python3-venv espeak-ng sox g++ bible-kjv

ifeq ($(LIBTORCH_USE_PYTORCH),1)
  ifeq ($(LIBTORCH),)
    LIBTORCH := $(shell $(PY) -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
    ifeq ($(LIBTORCH),)
      $(error LIBTORCH_USE_PYTORCH=1: $(PY) cannot import torch (make venv installs torch 2.11 into $(VENV); then PY=$(VENV)/bin/python))
    endif
  endif
  ifeq ($(TORCH_CXX11_ABI),)
    TORCH_CXX11_ABI := $(shell $(PY) -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  endif
  export TORCHFIT_PYTHON := $(PY)
endif

ifneq ($(LIBTORCH),)
  override LIBTORCH := $(abspath $(LIBTORCH))
  TORCH_INCLUDE := $(LIBTORCH)/include
  ifeq ($(TORCH_CXX11_ABI),)
    TORCH_CXX11_ABI := $(shell nm -D --defined-only $(LIBTORCH)/lib/libc10.so 2>/dev/null | grep -q __cxx11 && echo 1 || echo 0)
  endif
  CGO_CXXFLAGS := -I$(LIBTORCH)/include -I$(LIBTORCH)/include/torch/csrc/api/include $(CGO_CXXFLAGS)
  CGO_LDFLAGS := -L$(LIBTORCH)/lib -Wl,-rpath,$(LIBTORCH)/lib $(CGO_LDFLAGS)
  export LD_LIBRARY_PATH := $(LIBTORCH)/lib:$(LD_LIBRARY_PATH)
  ifneq ($(if $(filter 1,$(NOCUDA)),,$(wildcard $(LIBTORCH)/lib/libtorch_cuda.so)),)
    TAGS += cuda
    # CUDA, cuDNN and NCCL headers: a pip install's nvidia-* packages beside
    # torch/, a CUDA toolkit, or what make gpu-pack carried (last: a fallback).
    CUDA_INCLUDE := $(wildcard $(LIBTORCH)/../nvidia/*/include) $(wildcard $(CUDA_HOME)/include) \
      $(wildcard /usr/local/cuda/include) $(wildcard $(CURDIR)/.device/cuda-include)
    CGO_CXXFLAGS += $(addprefix -I,$(CUDA_INCLUDE))
    CGO_LDFLAGS += $(addprefix -Wl$(comma)-rpath-link$(comma),$(wildcard $(LIBTORCH)/../nvidia/*/lib))
  endif
else
  TORCH_INCLUDE := /usr/include
endif
ifneq ($(TORCH_CXX11_ABI),)
  CGO_CXXFLAGS += -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_CXX11_ABI)
endif
export CGO_CXXFLAGS CGO_LDFLAGS
GOFLAGS_TAGS := $(if $(strip $(TAGS)),-tags "$(strip $(TAGS))",)

# The fused scan's CUDA kernel (scan/internal/kernel/scan_cuda.cu): nvcc
# makes a fat binary, SASS for sm_80 (A100) and sm_90 (H100) and PTX for
# compute_90 (newer GPUs JIT it), which the cuda-tagged build embeds. nvcc is
# the pip wheel's beside torch (nvidia-cuda-nvcc, third_party/README.md), a
# CUDA toolkit's or the one on PATH; NVCC=path overrides. Every target that
# builds with the cuda tag makes it first (scan-kernel); without the tag
# nothing needs nvcc.
NVCC ?= $(firstword $(wildcard $(LIBTORCH)/../nvidia/cu13/bin/nvcc $(LIBTORCH)/../nvidia/cuda_nvcc/bin/nvcc) \
  $(wildcard $(CUDA_HOME)/bin/nvcc /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
NVCC_FLAGS ?= -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
SCAN_KERNEL := scan/internal/kernel/cudabin/scan_cuda.fatbin

.PHONY: deps scan-kernel env venv check-libtorch build vet test test-one test-torch2 cuda-link gpu-check gpu-pack test-short fuzz demo bench bench-ops bench-ops-floor bench-checkpoint bench-attention quality-clip quality-mamba bench-recipes bench-split bench-ganvit quality-ganvit memory-ganvit bench-scan clean

# deps installs what a fresh Debian bookworm machine lacks (idempotent):
# Debian's libtorch and the tools the recipes and tests use; with the cuda
# tag, it makes the scan's CUDA kernel too.
deps: scan-kernel
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "apt-get install$$missing failed"; exit 1; }; \
	fi; \
	if update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep -q '^Value: .*openblas-pthread'; then \
	  echo "BLAS: switching libblas.so.3 to the OpenMP OpenBLAS (the pthread build oversubscribes libtorch's threads)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3; \
	fi
	@$(MAKE) --no-print-directory check-libtorch
	@if [ -n "$(LIBTORCH)" ]; then echo "libtorch: $(LIBTORCH) (C++ ABI $(TORCH_CXX11_ABI)$(if $(filter cuda,$(TAGS)),$(comma) cuda tag))"; fi

# scan-kernel makes the scan's CUDA kernel when the cuda tag is on (nothing
# otherwise); its output goes to stderr, so that make -s env stays clean.
scan-kernel: $(if $(filter cuda,$(TAGS)),$(SCAN_KERNEL))
$(SCAN_KERNEL): scan/internal/kernel/scan_cuda.cu scan/internal/kernel/kernel.h
	@test -n "$(NVCC)" || { echo "error: the cuda tag needs nvcc for the scan's CUDA kernel: pip install the nvidia-cuda-nvcc pinned in third_party/torch2/requirements.txt beside torch, or NVCC=/path/to/nvcc" >&2; exit 1; }
	@echo "nvcc: $(SCAN_KERNEL) ($(NVCC))" >&2
	@$(NVCC) -fatbin $(NVCC_FLAGS) -o $@.tmp $< 1>&2 && mv $@.tmp $@

# env prints the environment go build/test need for this libtorch, for Go
# programs built without make: eval "$$(make -s env LIBTORCH_USE_PYTORCH=1)"
# then go build $$TORCHFIT_GOFLAGS ./... (with the cuda tag it makes the
# scan's CUDA kernel first, which the Go build embeds).
env: scan-kernel
	@echo "export CGO_CXXFLAGS='$(strip $(CGO_CXXFLAGS))'"
	@echo "export CGO_LDFLAGS='$(strip $(CGO_LDFLAGS))'"
	@$(if $(LIBTORCH),echo "export LD_LIBRARY_PATH='$(LD_LIBRARY_PATH)'",true)
	@echo "export TORCHFIT_GOFLAGS='$(GOFLAGS_TAGS)'"
	@$(if $(filter 1,$(LIBTORCH_USE_PYTORCH)),echo "export TORCHFIT_PYTHON='$(PY)'",true)

# venv makes $(VENV): PyTorch 2.11 from PyPI, pinned (third_party/torch2),
# with the Python packages the twins use; never the system Python. The
# marker file is rewritten when the requirements change.
venv: $(VENV)/.installed
$(VENV)/.installed: third_party/torch2/requirements.txt
	@test -x $(VENV)/bin/python || /usr/bin/python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r third_party/torch2/requirements.txt
	@touch $@

check-libtorch:
	@if [ ! -f "$(TORCH_INCLUDE)/torch/csrc/api/include/torch/version.h" ]; then \
	  echo "error: no libtorch headers under $(TORCH_INCLUDE)."; \
	  echo "  Debian/Ubuntu: run 'make deps' (installs libtorch-dev), or"; \
	  echo "  point at another libtorch: make LIBTORCH=/path/with/include-and-lib (see third_party/README.md)"; \
	  exit 1; \
	fi

build: deps
	$(GO) build $(GOFLAGS_TAGS) ./...

vet: deps
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(GOFLAGS_TAGS) ./...

# test: with LIBTORCH or LIBTORCH_USE_PYTORCH set, the suite on that
# libtorch; otherwise CI's three legs: Debian 1.13, PyTorch 2.11 from PyPI
# (the whole suite on its CUDA build, on the CPU, with the Python side on
# 2.11 too), and 2.11 without the cuda tag (vet and link).
ifneq ($(LIBTORCH),)
test: test-one
else
test: test-one test-torch2
endif

# RACE=0 and FUZZ=0 leave out the race detector's run and the fuzzing
# (each builds the packages, the C++ shim included, once more).
RACE ?= 1
FUZZ ?= 1
test-one: deps vet
	$(GO) test $(GOFLAGS_TAGS) -count=1 -timeout 20m ./...
ifneq ($(RACE),0)
	$(GO) test $(GOFLAGS_TAGS) -race -count=1 -timeout 10m ./torch/data ./train
endif
ifneq ($(FUZZ),0)
	@$(MAKE) --no-print-directory fuzz
endif

# The second leg runs the suite only: the race detector's run and the
# fuzzing test Go code, which is the same on every libtorch, and ran on the
# first leg (the fuzz targets' seed corpora run in the suite on both).
test-torch2: venv
	@echo "== PyTorch 2.11 (pip, $(VENV)): the suite with the cuda tag, on the CPU"
	$(MAKE) --no-print-directory test-one LIBTORCH_USE_PYTORCH=1 PY=$(CURDIR)/$(VENV)/bin/python RACE=0 FUZZ=0
	@echo "== PyTorch 2.11 without the cuda tag: vet and link"
	$(MAKE) --no-print-directory cuda-link LIBTORCH_USE_PYTORCH=1 PY=$(CURDIR)/$(VENV)/bin/python NOCUDA=1

# cuda-link compiles every package (the C++ shim and the native packages
# included), type-checks the tests (vet) and links the two binaries, which
# import every native package; nothing runs. NOCUDA=1 leaves the cuda tag
# out for a CUDA libtorch.
cuda-link: deps
	$(GO) vet $(GOFLAGS_TAGS) ./...
	$(GO) build $(GOFLAGS_TAGS) ./...
	$(GO) build $(GOFLAGS_TAGS) -o /dev/null ./cmd/torchfit ./cmd/gpucheck

# gpu-check runs on a GPU machine from the checkout (../shared/device: make
# gpu-pack here first, carry .device): it builds torchfit and the checks
# with the cuda tag against that machine's torch, runs every CUDA check
# (internal/gpucheck), each in its own process, and writes gpu-report.md
# and gpu-report.json into OUT. Without a GPU each check says "skipped: no
# GPU" and why. GPUCHECK=a,b runs only those checks. GPUBUDGET=s ends
# the run within s seconds of make's start, build included (a lease's
# command limit): no check starts with under 20 s left, each check ends
# its items in time to report, and the report names what did not run.
OUT ?= out/gpu-check
GPUCHECK ?=
GPUBUDGET ?=
ifneq ($(GPUBUDGET),)
ifeq ($(shell echo '$(GPUBUDGET)' | grep -xE '[1-9][0-9]{0,5}'),)
$(error GPUBUDGET=$(GPUBUDGET): give a number of seconds, 1 to 999999)
endif
GPU_T0 := $(shell date +%s)
endif
gpu-check: scan-kernel
	@mkdir -p $(OUT) bin
	@start=$$(date +%s); \
	$(GO) build $(GOFLAGS_TAGS) -o bin/torchfit-cuda ./cmd/torchfit && \
	$(GO) build $(GOFLAGS_TAGS) -o bin/gpucheck ./cmd/gpucheck; rc=$$?; \
	printf '{"seconds": %d, "tags": "%s", "libtorch": "%s", "cxx11_abi": "%s", "ok": %s}\n' $$(( $$(date +%s) - start )) \
	  "$(strip $(TAGS))" "$(LIBTORCH)" "$(TORCH_CXX11_ABI)" $$( [ $$rc = 0 ] && echo true || echo false ) > $(OUT)/build.json; \
	cat $(OUT)/build.json; exit $$rc
	bin/gpucheck -out $(OUT) -torchfit bin/torchfit-cuda -build $(OUT)/build.json $(if $(GPUCHECK),-checks $(GPUCHECK)) \
	  $(if $(GPUBUDGET),-deadline $$(( $(GPU_T0) + $(GPUBUDGET) )))

# gpu-pack prepares .device/ for a GPU machine: a Go toolchain and the
# vendored modules (../shared/device/pack.sh), the recipes' small data sets
# (made here: their tools are not there), and CUDA headers as a fallback.
gpu-pack: deps
	bash scripts/device-pack.sh
	$(GO) build -o bin/torchfit ./cmd/torchfit
	$(GO) run ./cmd/gpucheck -prepare-data .device/gpucheck-data -torchfit bin/torchfit
	tar -C .device -cf - gpucheck-data | xz -T0 -6 > .device/gpucheck-data.tar.xz && rm -rf .device/gpucheck-data
	@du -sh .device

# A short bounded run of each fuzz target (seed corpora run in 'go test' too).
# Minimising a new input may take 60 s by default, which uses up a short run on
# the first one found (20 s on 2 busy cores: 1 new input, 200-3,000 executions;
# with 2 s: 14-24 new inputs, 3,000-53,000 executions). The budget is a count
# of executions, not a duration: a duration races Go's fuzzing coordinator at
# its deadline on a loaded machine and fails with "context deadline exceeded"
# and no failing input (seen once in CI; golang/go#75804); a count has no
# deadline to race.
fuzz: deps
	$(GO) test $(GOFLAGS_TAGS) ./torch/ptfile -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s
	$(GO) test $(GOFLAGS_TAGS) ./torch/safetensors -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME_SAFETENSORS) -fuzzminimizetime 2s

demo: deps
	$(GO) run $(GOFLAGS_TAGS) ./cmd/torchfit demo

# Per-op overhead: Go benchmarks and the same ops timed in Python PyTorch on
# the same libtorch, side by side.
bench-ops: deps
	set -o pipefail; $(GO) test $(GOFLAGS_TAGS) ./torch -run '^$$' -bench 'BenchmarkOp' -benchtime $(BENCHTIME) | tee /tmp/torchfit-bench-go.txt
	$(PY) scripts/bench_ops.py

# Per-op overhead beside the floor: torchfit typed and boxed, Python, and a
# C++ loop with no binding (package internal/opfloor), each side's best of
# ROUNDS interleaved rounds (scripts/bench_ops_floor.sh).
bench-ops-floor: deps
	$(GO) test $(GOFLAGS_TAGS) -c -o /tmp/torchfit-torch.test ./torch
	$(GO) test $(GOFLAGS_TAGS) -c -o /tmp/torchfit-opfloor.test ./internal/opfloor
	scripts/bench_ops_floor.sh /tmp/torchfit-torch.test $(PY) /tmp/torchfit-opfloor.test

# Activation checkpointing: a 12-block residual MLP trained with and without
# per-block checkpointing, peak step memory and time per step, Go
# (nn.BenchmarkCheckpointStack) next to Python (torch.utils.checkpoint,
# use_reentrant=True); scripts/bench_checkpoint.py says how each peak is
# measured. PYTIME: seconds of timed Python steps per configuration.
PYTIME ?= 1
bench-checkpoint: deps
	set -o pipefail; $(GO) test $(GOFLAGS_TAGS) ./nn -run '^$$' -bench 'BenchmarkCheckpointStack' -benchtime $(BENCHTIME) | tee /tmp/torchfit-bench-checkpoint-go.txt
	TORCHFIT_BENCH_GO=/tmp/torchfit-bench-checkpoint-go.txt $(PY) scripts/bench_checkpoint.py --min-time $(PYTIME)

# Memory-efficient attention: peak memory and step time of a ViT-like and a
# conformer-like self-attention block (forward + backward) against sequence
# length, torchfit's fused kernel next to the explicit path
# (nn.BenchmarkAttention), then PyTorch's nn.MultiheadAttention timed at the
# same shapes (scripts/bench_attention.py). ATTN_LENGTHS: the lengths.
ATTN_LENGTHS ?= 256,512,1024,2048,4096
bench-attention: deps
	set -o pipefail; TORCHFIT_ATTN_LENGTHS=$(ATTN_LENGTHS) $(GO) test $(GOFLAGS_TAGS) ./nn -run '^$$' -bench 'BenchmarkAttention$$' -benchtime 1x | tee /tmp/torchfit-bench-attention-go.txt
	TORCHFIT_BENCH_GO=/tmp/torchfit-bench-attention-go.txt $(PY) scripts/bench_attention.py --min-time $(PYTIME)

# The CLIP recipe's side-by-side runs (recipes/clip/README.md): pretraining
# (CLIP_PRE_BUDGET), then exact 16×8, naive 16×8 and plain batch 16
# fine-tuned for CLIP_BUDGET of CPU time each, one after another, and the
# memory/step-time table. Its tables: CLIP_BUDGET=2m (16 minutes on a
# loaded 2-core machine) and CLIP_BUDGET=5m (about 35); not in `make test`
# (TestQualitySmoke runs it for a few steps). Fails unless exact 16×8
# reaches the target (zero-shot ≥ 0.40, R@1 ≥ 0.45; issue 28's at 5m).
CLIP_BUDGET ?= 5m
CLIP_PRE_BUDGET ?= 8m
CLIP_LR ?= 3e-4
quality-clip: deps
	PRE_BUDGET=$(CLIP_PRE_BUDGET) scripts/clip_quality.sh out/clip-quality-$(CLIP_BUDGET) $(CLIP_BUDGET) $(CLIP_LR)

# Every recipe beside its Python twin on the same libtorch (package bench):
# the same weights and batch, a check that one step gives the same loss and
# gradients, then Go and Python training steps interleaved at 1 and 2
# threads, fp32 and bf16, with wall and CPU time and peak memory; writes the
# table docs/performance.md keeps. BENCHFLAGS: more flags (-twins asr/tiny -reps 9;
# -variants malloc-128k,unfused-adamw,aten-dropout,unfused-attention,blas-prescott:
# levers off one at a time; -count: a step's call profile; -shapes 32,1: shape bucketing;
# -grow-batch 2,4,8,16,32 -plot f.png: cost against batch; -python-env;
# go run ./bench/cmd/bench-recipes -h lists them).
BENCHFLAGS ?=
bench-recipes: deps
	$(GO) run $(GOFLAGS_TAGS) ./bench/cmd/bench-recipes -out /tmp/torchfit-bench-recipes.md $(BENCHFLAGS)

# Where each side's step time goes: bench-recipes under a system-wide perf
# record switched on around Go's and eager Python's timed steps only, the
# samples split between libtorch's kernels, libc and the kernel, and the
# binding (scripts/bench_split.sh; needs perf). SPLIT_TWINS, SPLIT_PRECISIONS
# pick the rows; BENCHFLAGS go to bench-recipes (-threads 1 by default).
SPLITFLAGS ?= -threads 1 -reps 3 -steps 5
bench-split: deps
	$(GO) build $(GOFLAGS_TAGS) -o /tmp/torchfit-bench-recipes ./bench/cmd/bench-recipes
	scripts/bench_split.sh /tmp/torchfit-bench-recipes $(SPLITFLAGS) $(BENCHFLAGS)

# The GAN + ViT recipe's measurements (recipes/ganvit/README.md), not in make
# test. bench-ganvit: GAN iteration time and peak, fp32 vs mixed precision;
# ViT step peaks with and without checkpointing and under the unfreezing
# schedule, at the cpu preset's and the GPU presets' sizes
# (GANVIT_BENCH=cpu: the cpu preset's only). quality-ganvit: clips, GAN,
# classifier on real vs real + synthetic, eval (scripts/quality_ganvit.sh,
# 3 CPU-minutes). memory-ganvit: the seed's memory breakdown, measured, for
# the cpu preset (320 training clips of 3 s) and the gpu preset (64 of 30 s).
GANVIT_BENCH ?= 1
bench-ganvit: deps
	TORCHFIT_BENCH_GANVIT=$(GANVIT_BENCH) $(GO) test $(GOFLAGS_TAGS) ./recipes/ganvit -run 'TestBench' -count=1 -v -timeout 60m

quality-ganvit: deps
	scripts/quality_ganvit.sh

memory-ganvit: deps
	$(GO) build $(GOFLAGS_TAGS) -o /tmp/torchfit-ganvit ./cmd/torchfit
	/tmp/torchfit-ganvit ganvit data --out out/ganvit/data --clips 400 --seconds 3
	/tmp/torchfit-ganvit ganvit memory-table --data out/ganvit/data --preset cpu
	/tmp/torchfit-ganvit ganvit data --out out/ganvit/data30 --clips 80 --seconds 30
	/tmp/torchfit-ganvit ganvit memory-table --data out/ganvit/data30 --preset gpu --mixed-precision no --clips 64

# The TTS recipe's intelligibility table (recipes/tts/README.md): corpus, ASR judge, codec,
# GPT, tts eval, each at one thread with its CPU time counted. Fails unless
# CER TTS ≤ 0.35 (seen voices) and ≤ 0.45 (unseen) within 30 CPU minutes.
# Long: not part of make test (TestQualitySmoke runs it at toy size).
quality-tts: deps
	scripts/tts_intelligibility.sh

# The Mamba recipe's quality target (recipes/mamba/README.md): --vram cpu at
# one thread, ≤ 5.2 nats/token held out within 5 CPU minutes (about 5 wall
# minutes). Not part of make test.
quality-mamba: deps
	scripts/quality_mamba.sh

# The selective scan: forward + backward of the four Go formulations
# (scan.BenchmarkScan) next to Python's sequential loop and chunked
# Hillis-Steele (scripts/bench_scan.py) on the same libtorch, B=2, D=256,
# N=16, L = 256, 1024, 4096 (SCAN_BENCH_L overrides): CPU time, bytes held
# for backward, peak.
bench-scan: deps
	set -o pipefail; $(GO) test $(GOFLAGS_TAGS) ./scan -run '^$$' -bench 'BenchmarkScan' -benchtime $(BENCHTIME) | tee /tmp/torchfit-bench-scan-go.txt
	TORCHFIT_BENCH_GO=/tmp/torchfit-bench-scan-go.txt $(PY) scripts/bench_scan.py --min-time $(PYTIME)

bench: deps
	$(GO) test $(GOFLAGS_TAGS) -run '^$$' -bench . -benchtime $(BENCHTIME) ./...

clean:
	$(GO) clean -cache -testcache
