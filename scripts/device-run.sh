#!/usr/bin/env bash
# Runs on the GPU machine, from the project root: bash .device/run.sh 'COMMAND'
# Sets up the carried Go toolchain, unpacks the vendored modules and the
# recipes' data sets (make gpu-pack), points the build at the libtorch inside
# the machine's pip torch package (CUDA), then runs COMMAND with bash. From
# ../shared/device/run.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=$(cat .device/go.dir)
[ -x "/tmp/$dir/bin/go" ] || tar -C /tmp -xJf .device/go.tar.xz
export GOROOT="/tmp/$dir" PATH="/tmp/$dir/bin:$PATH" GOTOOLCHAIN=local GOPROXY=off GOCACHE=/tmp/gocache
if [ -f .device/vendor.tar.xz ]; then rm -rf vendor; tar -xJf .device/vendor.tar.xz; export GOFLAGS=-mod=vendor; fi
if [ -f .device/gpucheck-data.tar.xz ] && [ ! -d .device/gpucheck-data ]; then tar -C .device -xJf .device/gpucheck-data.tar.xz; fi
PY=${PY:-python3}
TORCH_DIR=$($PY -c 'import os,torch;print(os.path.dirname(torch.__file__))')
ABI=$($PY -c 'import torch;print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
export LIBTORCH="$TORCH_DIR" TORCH_CXX11_ABI="$ABI"
export CGO_CXXFLAGS="-I$TORCH_DIR/include -I$TORCH_DIR/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=$ABI ${CGO_CXXFLAGS:-}"
export CGO_LDFLAGS="-L$TORCH_DIR/lib -Wl,-rpath,$TORCH_DIR/lib ${CGO_LDFLAGS:-}"
export LD_LIBRARY_PATH="$TORCH_DIR/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
echo "torch $($PY -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda)'); $(go version); LIBTORCH=$LIBTORCH abi=$ABI"
bash -c "$1"
