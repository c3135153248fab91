#!/usr/bin/env python3
"""Per-op overhead: torchfit (Go) next to Python PyTorch on the same libtorch.

Run by `make bench-ops`, which first runs the Go benchmarks (BenchmarkOp*)
into /tmp/torchfit-bench-go.txt. This script times the same ops with timeit
(with torch.set_num_threads set to the Go side's thread count) and prints a
markdown table: op | Go ns/op | Python ns/op | ratio (Go / Python).
"""
import os
import re
import sys
import timeit

import torch

GO_RESULTS = os.environ.get("TORCHFIT_BENCH_GO", "/tmp/torchfit-bench-go.txt")

# Go benchmark name -> (label, setup, statement)
OPS = [
    ("OpAdd", "add, 1-element tensors", "x = torch.ones(1); y = torch.ones(1)", "x + y"),
    ("OpAddInPlace", "add_ in place, 1-element", "x = torch.zeros(1); y = torch.ones(1)", "x.add_(y)"),
    ("OpMatmul64", "matmul 64x64 float32", "x = torch.ones(64, 64); y = torch.ones(64, 64)", "x @ y"),
    ("OpDim", "t.dim() (bare call, no dispatcher)", "x = torch.ones(1)", "x.dim()"),
]

LINE = re.compile(r"^Benchmark(\w+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(.*)$")


def parse_go(path):
    res, threads = {}, None
    try:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if not m:
                    continue
                res[m.group(1)] = float(m.group(2))
                t = re.search(r"([\d.]+) threads", m.group(3))
                if t:
                    threads = int(float(t.group(1)))
    except FileNotFoundError:
        sys.exit(f"{path} not found: run `make bench-ops` (it runs the Go benchmarks first)")
    return res, threads


def time_py(setup, stmt):
    g = {"torch": torch}
    exec(setup, g)
    timer = timeit.Timer(stmt, globals=g)
    n, _ = timer.autorange()  # at least 0.2 s per run
    best = min(timer.repeat(repeat=5, number=n))
    return best / n * 1e9


def main():
    go, threads = parse_go(GO_RESULTS)
    if threads:
        torch.set_num_threads(threads)
    torch.set_grad_enabled(True)
    print(f"libtorch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}"
          f" (Go side: {threads if threads else 'unknown'})")
    print()
    print("| op | Go ns/op | Python ns/op | Go / Python |")
    print("|---|---:|---:|---:|")
    for name, label, setup, stmt in OPS:
        py = time_py(setup, stmt)
        g = go.get(name)
        if g is None:
            print(f"| {label} | (no Benchmark{name}) | {py:.0f} | |")
            continue
        print(f"| {label} | {g:.0f} | {py:.0f} | {g / py:.2f} |")


if __name__ == "__main__":
    main()
