#!/usr/bin/env python3
"""Fused attention: torchfit (Go) next to Python's nn.MultiheadAttention.

Run by `make bench-attention`, which first runs the Go benchmark
(BenchmarkAttention in nn/attention_fused_test.go) into
/tmp/torchfit-bench-attention-go.txt: one forward and backward of a
batch-first self-attention block (batch 1, float32, training mode) at each
sequence length, through torchfit's fused CPU kernel and through the
explicit path (scores, softmax, dropout, product), with the step's peak CPU
memory from torchfit's counting allocator. This script times the same block
in PyTorch -- torch.nn.MultiheadAttention(e, h, dropout, batch_first=True),
the same key padding mask, y.sum().backward() -- at the Go run's thread
count, and prints a markdown table: time per step and the ratios, and the
peaks. On PyTorch 1.13 Python runs the explicit path (its peak is Go's
explicit one); on 2.x its nn.MultiheadAttention calls
scaled_dot_product_attention.
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.nn as nn

GO_RESULTS = os.environ.get("TORCHFIT_BENCH_GO", "/tmp/torchfit-bench-attention-go.txt")
LINE = re.compile(r"^BenchmarkAttention/(\w+)/L=(\d+)/(\w+)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op(.*)$")
# name: (embed dim, heads, dropout, key padding on the last eighth), as attnBenchShapes.
SHAPES = {"vit": (768, 12, 0.0, False), "conformer": (256, 4, 0.1, True)}


def parse_go(path):
    res, threads = {}, None
    try:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if not m:
                    continue
                extra = m.group(6)
                peak = re.search(r"([\d.e+]+) peak-bytes", extra)
                t = re.search(r"([\d.]+) threads", extra)
                res[(m.group(1), int(m.group(2)), m.group(3))] = (
                    float(m.group(5)) / 1e6,
                    float(peak.group(1)) if peak else None,
                )
                if t:
                    threads = int(float(t.group(1)))
    except FileNotFoundError:
        sys.exit(f"{path} not found: run `make bench-attention` for the Go side")
    return res, threads


def time_python(name, length, min_time, reps):
    e, h, p, pad = SHAPES[name]
    torch.manual_seed(13)
    m = nn.MultiheadAttention(e, h, dropout=p, batch_first=True)
    m.train()
    x = torch.randn(1, length, e)
    kpm = None
    if pad:
        kpm = torch.zeros(1, length, dtype=torch.bool)
        kpm[:, length - length // 8:] = True

    def step():
        xi = x.detach().requires_grad_(True)
        y, _ = m(xi, xi, xi, key_padding_mask=kpm, need_weights=False)
        y.sum().backward()
        m.zero_grad(set_to_none=True)

    step()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if len(times) >= reps and time.perf_counter() - start >= min_time:
            break
    times.sort()
    return times[len(times) // 2] * 1e3


def mib(b):
    return "" if b is None else f"{b / 2**20:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed Python steps per row")
    ap.add_argument("--reps", type=int, default=3, help="at least this many timed Python steps per row")
    a = ap.parse_args()
    go, threads = parse_go(GO_RESULTS)
    if threads:
        torch.set_num_threads(threads)
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads; Go results from {GO_RESULTS}\n")
    print("| block | L | Go fused ms | Go explicit ms | Python MHA ms | explicit ÷ fused | Python ÷ fused "
          "| peak fused MiB | peak explicit MiB | explicit ÷ fused peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted({(n, l) for (n, l, _) in go}, key=lambda k: (list(SHAPES).index(k[0]), k[1]))
    for name, length in keys:
        f = go.get((name, length, "fused"))
        x = go.get((name, length, "explicit"))
        py = time_python(name, length, a.min_time, a.reps)
        fr = lambda v: "" if v is None else f"{v:.1f}"
        ratio = lambda num, den: "" if num is None or den is None else f"{num / den:.2f}"
        print(f"| {name} | {length} | {fr(f and f[0])} | {fr(x and x[0])} | {py:.1f} "
              f"| {ratio(x and x[0], f and f[0])} | {ratio(py, f and f[0])} "
              f"| {mib(f and f[1])} | {mib(x and x[1])} | {ratio(x and x[1], f and f[1])} |", flush=True)


if __name__ == "__main__":
    main()
