#!/usr/bin/env python3
"""The selective scan: torchfit's four formulations (Go) next to Python's.

Run by `make bench-scan`, which first runs the Go benchmark (BenchmarkScan
in scan/bench_test.go) into /tmp/torchfit-bench-scan-go.txt. This script
times the Python formulations on the same libtorch at the same shapes --
B=2, D=256, N=16, float32, L = 256, 1024, 4096 -- forward and backward
(y.backward(gy)), and prints one markdown table with both sides:

  py-sequential  the reference loop: exp(delta*A) and delta*x*B materialised
                 for the whole sequence, then one step per time step
                 (mamba-ssm's selective_scan_ref, with the per-step slices
                 taken by one unbind instead of an index per step -- an index
                 per step makes backward O(L^2): each index's backward writes
                 a zero gradient of the whole tensor);
  py-parallel    chunked Hillis-Steele: inclusive scans of the pairs
                 (exp(delta*A), delta*x*B) inside chunks of 64 steps, chunk
                 to chunk sequentially (the formulation of Go's LogDepth).

Both are the Go formulations written in Python, op for op. Columns: CPU
time per forward+backward (process CPU time, steadier than wall time on a
shared machine; Go reports the same as cpu-ns/op), wall time, bytes held for
backward (allocated by the forward and still alive after it, y excluded)
and the peak of forward+backward above the inputs.

How Python's bytes are measured: PyTorch 1.13 has no CPU allocator
statistics, so the forward, and separately forward+backward, run under
torch.profiler(profile_memory=True), which records every allocation and
free of c10's CPU allocator with its size; held bytes are the net sum over
the forward, the peak the maximum of the running sum. Go reads torchfit's
counting allocator: the same quantity.
"""
import argparse
import os
import re
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

GO_RESULTS = os.environ.get("TORCHFIT_BENCH_GO", "/tmp/torchfit-bench-scan-go.txt")
LINE = re.compile(r"^BenchmarkScan/(\w+)/L=(\d+)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op(.*)$")


def sequential(x, dt, A, B, C, D):
    b, l, d = x.shape
    n = A.shape[1]
    dA = torch.exp(dt.unsqueeze(-1) * A)  # (b, l, d, n)
    dBx = (dt * x).unsqueeze(-1) * B.unsqueeze(2)  # (b, l, d, n)
    h = x.new_zeros(b, d, n)
    ys = []
    for a, u, c in zip(dA.unbind(1), dBx.unbind(1), C.unsqueeze(-1).unbind(1)):
        h = a * h + u
        ys.append((h @ c).squeeze(-1))
    return torch.stack(ys, 1) + x * D


def parallel(x, dt, A, B, C, D, K=64):
    b, l, d = x.shape
    n = A.shape[1]
    h = x.new_zeros(b, d, n)
    ys = []
    for t0 in range(0, l, K):
        k = min(K, l - t0)
        dtc = dt[:, t0:t0 + k]
        a = torch.exp(dtc.unsqueeze(-1) * A)
        u = (dtc * x[:, t0:t0 + k]).unsqueeze(-1) * B[:, t0:t0 + k].unsqueeze(2)
        off = 1
        while off < k:
            a_hi = a[:, off:]
            u = torch.cat([u[:, :off], a_hi * u[:, :k - off] + u[:, off:]], 1)
            a = torch.cat([a[:, :off], a_hi * a[:, :k - off]], 1)
            off *= 2
        hs = a * h.unsqueeze(1) + u
        ys.append((hs @ C[:, t0:t0 + k].unsqueeze(-1)).squeeze(-1))
        h = hs[:, k - 1]
    return torch.cat(ys, 1) + x * D


def net_and_peak(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())  # start_us in 1.13, start_ns in 2.x
    run = peak = 0
    for e in events:
        run += e.nbytes()
        peak = max(peak, run)
    return run, peak


def bench(fn, l, args):
    torch.manual_seed(1)
    b, d, n = 2, 256, 16
    x = torch.randn(b, l, d)
    dt = torch.nn.functional.softplus(torch.randn(b, l, d))
    A = -torch.exp(torch.randn(d, n))
    B = torch.randn(b, l, n)
    C = torch.randn(b, l, n)
    D = torch.randn(d)
    ins = [x, dt, A, B, C, D]
    for t in ins:
        t.requires_grad_(True)
    gy = torch.randn(b, l, d)

    def step():
        y = fn(*ins)
        y.backward(gy)
        for t in ins:
            t.grad = None

    step()  # warm-up
    box = {}

    def fwd():
        box["y"] = fn(*ins)

    held, _ = net_and_peak(fwd)
    held -= box["y"].numel() * box["y"].element_size()
    box.clear()
    _, peak = net_and_peak(step)
    it, c0, w0 = 0, time.process_time(), time.perf_counter()
    while it < args.min_iters or time.perf_counter() - w0 < args.min_time:
        step()
        it += 1
    return (time.process_time() - c0) / it * 1e9, (time.perf_counter() - w0) / it * 1e9, held, peak


def parse_go(path):
    res, threads = {}, None
    try:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if not m:
                    continue
                extra = m.group(5)

                def metric(name):
                    v = re.search(r"([\d.e+]+) " + name, extra)
                    return float(v.group(1)) if v else None

                res[(m.group(1), int(m.group(2)))] = (metric("cpu-ns/op"), float(m.group(4)),
                                                      metric("held-bytes"), metric("peak-bytes"))
                t = metric("threads")
                if t:
                    threads = int(t)
    except FileNotFoundError:
        print(f"({path} not found: run `make bench-scan` for the Go side)", file=sys.stderr)
    return res, threads


def ms(ns):
    return f"{ns / 1e6:.1f} ms" if ns is not None else "-"


def mib(b):
    if b is None:
        return "-"
    return f"{b / 2**20:.2f} MiB" if b < 10 * 2**20 else f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default=os.environ.get("SCAN_BENCH_L", "256,1024,4096"))
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed steps per configuration")
    ap.add_argument("--min-iters", type=int, default=2)
    args = ap.parse_args()
    lengths = [int(s) for s in args.lengths.split(",")]
    go, threads = parse_go(GO_RESULTS)
    if threads:
        torch.set_num_threads(threads)
    print(f"libtorch {torch.__version__}, {torch.get_num_threads()} thread(s) (Go side: {threads or 'unknown'});"
          f" B=2, D=256, N=16, float32, chunks of 64; forward + backward")
    print()
    print("| L | formulation | CPU time | wall time | held for backward | peak | CPU time / fused |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for l in lengths:
        rows = []
        for name in ("fused", "chunked", "parallel", "sequential"):
            if (name, l) in go:
                rows.append(("go " + name,) + go[(name, l)])
        for name, fn in (("sequential", sequential), ("parallel", parallel)):
            rows.append(("py " + name,) + bench(fn, l, args))
        fused = go.get(("fused", l), (None,))[0]
        for name, cpu, wall, held, peak in rows:
            rel = f"{cpu / fused:.1f}" if cpu and fused else "-"
            print(f"| {l} | {name} | {ms(cpu)} | {ms(wall)} | {mib(held)} | {mib(peak)} | {rel} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
