#!/usr/bin/env bash
# Packs what the GPU machine needs to build the project there: a Go toolchain
# (it has none), the vendored Go modules (it reaches no registry) and, as a
# fallback behind the machine's own, the CUDA crt and NCCL headers of the
# pinned wheels (make venv). From ../shared/device/pack.sh; make gpu-pack
# runs it and adds the recipes' data sets.
# Run from anywhere inside the project checkout. Writes .device/ at its root,
# which is git-ignored through .git/info/exclude. Carry ".device" in device runs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(git rev-parse --show-toplevel)
cd "$root"
out=.device
mkdir -p "$out"
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
goroot=$(go env GOROOT)
ver=$(go env GOVERSION)
if [ ! -s "$out/go.tar.xz" ] || [ "$(cat "$out/go.version" 2>/dev/null)" != "$ver" ]; then
  echo "packing $ver from $goroot (about a minute)..."
  tar -C "$(dirname "$goroot")" \
    --exclude='*/test' --exclude='*/api' --exclude='*/doc' --exclude='*/testdata' \
    --exclude='*_test.go' --exclude='*/pkg/tool/*/fix' --exclude='*/pkg/tool/*/preprofile' \
    -cf - "$(basename "$goroot")" | xz -T0 -6 > "$out/go.tar.xz"
  echo "$(basename "$goroot")" > "$out/go.dir"
  echo "$ver" > "$out/go.version"
fi
# Vendored modules travel compressed (34 MB as files, under 10 as xz).
rm -rf "$out/vendor" "$out/vendor.tar.xz"
if [ -f go.mod ] && grep -q '^require' go.mod; then
  tmp=$(mktemp -d)
  go mod vendor -o "$tmp/vendor"
  tar -C "$tmp" -cf - vendor | xz -T0 -6 > "$out/vendor.tar.xz"
  rm -rf "$tmp"
fi
cp "$here/device-run.sh" "$out/run.sh"
nv=$(ls -d .venv/lib/python3*/site-packages/nvidia 2>/dev/null | head -1)
if [ -n "$nv" ]; then
  rm -rf "$out/cuda-include" && mkdir -p "$out/cuda-include"
  cp -r "$nv/cu13/include/crt" "$out/cuda-include/" 2>/dev/null || true
  cp "$nv"/nccl/include/*.h "$out/cuda-include/" 2>/dev/null || true
  # ProcessGroupGloo.hpp includes gloo headers, which the wheel does not ship
  # (Debian libgloo-dev's compile against 2.11; the library is in libtorch_cpu).
  cp -r /usr/include/gloo "$out/cuda-include/" 2>/dev/null || true
fi
du -sh "$out"
echo "carry [\".device\"] and run: bash .device/run.sh 'make gpu-check OUT=\$OUT'"
