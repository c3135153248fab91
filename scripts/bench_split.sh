#!/usr/bin/env bash
# Where each side's step time goes (make bench-split): for each twin and
# precision, bench-recipes runs under a system-wide `perf record` that it
# switches on around Go's and eager Python's timed steps only; the samples
# are split by library into libtorch (its kernels: ATen, oneDNN's JIT
# code, BLAS, OpenMP, sleef), system (libc, the loader, the kernel: the
# allocator's calls and page faults, both sides) and binding (Python's
# interpreter and torch's bindings; Go's runtime, its code, cgo and the
# shim), and in Go torchfit's own kernels (fused AdamW, dropout, attention,
# scan), which stand in for libtorch's.
# Arguments: the bench-recipes binary and its flags (-threads, -reps,
# -steps...; -twins and -precisions are taken from SPLIT_TWINS and
# SPLIT_PRECISIONS). Each side's top symbols go to $SPLIT_OUT/top.txt.
set -euo pipefail
bin=$1; shift
command -v perf >/dev/null || { echo "bench-split: needs perf (apt-get install linux-perf)" >&2; exit 2; }
twins=${SPLIT_TWINS:-asr/tiny clip/cpu ganvit/vit-cpu ganvit/gan-cpu tts/cpu}
precs=${SPLIT_PRECISIONS:-fp32 bf16}
out=${SPLIT_OUT:-/tmp/torchfit-bench-split}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"; : > "$out/top.txt"
gocomm=$(basename "$bin" | cut -c1-15)
echo "| twin, precision | Go samples | Python samples | Go / Python | Go: libtorch | Go: own kernels | Go: system | Go: binding | Python: libtorch | Python: system | Python: binding | kernels Go / Python | floor |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for tw in $twins; do
	for p in $precs; do
		tag=$(echo "$tw-$p" | tr / -)
		rm -f "$out/ctl" "$out/ack"; mkfifo "$out/ctl" "$out/ack"
		perf record -a -F 999 -D -1 --control "fifo:$out/ctl,$out/ack" -o "$out/$tag.data" -q -- sleep 100000 &
		perfpid=$!
		"$bin" -twins "$tw" -precisions "$p" -compile=false -perf-control "$out/ctl,$out/ack" "$@" > "$out/$tag.log" 2>&1 ||
			{ kill $perfpid; echo "bench-split: $tw $p failed: $out/$tag.log" >&2; exit 1; }
		pkill -INT -P $perfpid sleep 2>/dev/null || kill -INT $perfpid; wait $perfpid 2>/dev/null || true
		perf script -i "$out/$tag.data" -F comm,ip,sym,dso 2>/dev/null > "$out/$tag.txt"
		python3 "$here/bench_split.py" "$out/$tag.txt" "$tw, $p" "$gocomm" "$out/$tag.top"
		cat "$out/$tag.top" >> "$out/top.txt"
	done
done
