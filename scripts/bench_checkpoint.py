#!/usr/bin/env python3
"""Activation checkpointing: torchfit (Go) next to Python PyTorch.

Run by `make bench-checkpoint`, which first runs the Go benchmark
(BenchmarkCheckpointStack in nn/checkpoint_bench_test.go) into
/tmp/torchfit-bench-checkpoint-go.txt. This script builds the same model in
PyTorch 1.13 -- an input Linear(d, d), then 12 residual blocks
x + fc2(gelu(fc1(x))) with fc1: d->4d, fc2: 4d->d, on a (2048, 128) input,
loss mean(y^2), Adam -- and trains it with and without
torch.utils.checkpoint.checkpoint(block, h, use_reentrant=True) around each
block, in float32 and with the forward under bf16 autocast. It prints a markdown table of the peak memory of one training step
and the time per step, Go next to Python.

How the peak is measured. The Go side reads torchfit's counting CPU
allocator: PeakAllocated minus Allocated at the start of the step (forward,
backward, Adam step, zero_grad), in steady state (Adam's state already
exists). PyTorch 1.13 has no CPU allocator statistics, so this script
profiles one steady-state step with torch.profiler(profile_memory=True):
the profiler records every allocation and free of c10's CPU allocator with
its size (the raw kineto "[memory]" events), and the peak is the maximum of
their running sum -- the same quantity, bytes requested by tensors above the
step's starting point, with no RSS or allocator-cache noise. The profiled
step is not timed; the timing comes from separate, unprofiled steps.
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

GO_RESULTS = os.environ.get("TORCHFIT_BENCH_GO", "/tmp/torchfit-bench-checkpoint-go.txt")
LINE = re.compile(r"^BenchmarkCheckpointStack/(\w+)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op(.*)$")


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Stack(nn.Module):
    def __init__(self, depth, d):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))

    def forward(self, x, ckpt):
        h = self.inp(x)
        for b in self.blocks:
            h = checkpoint(b, h, use_reentrant=True) if ckpt else b(h)
        return h


def parse_go(path):
    res, threads = {}, None
    try:
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if not m:
                    continue
                extra = m.group(4)
                peak = re.search(r"([\d.e+]+) peak-bytes", extra)
                t = re.search(r"([\d.]+) threads", extra)
                res[m.group(1)] = (float(m.group(3)), float(peak.group(1)) if peak else None)
                if t:
                    threads = int(float(t.group(1)))
    except FileNotFoundError:
        print(f"({path} not found: run `make bench-checkpoint` for the Go side)", file=sys.stderr)
    return res, threads


def peak_bytes(step):
    """Peak of the running sum of CPU allocations during step()."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())  # stable: same-time events keep their order (start_us in 1.13, start_ns in 2.x)
    run = peak = 0
    for e in events:
        run += e.nbytes()
        peak = max(peak, run)
    return peak


def bench(ckpt, bf16, args):
    torch.manual_seed(0)
    model = Stack(args.depth, args.dim)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(args.tokens, args.dim)

    def step():
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x, ckpt)
            loss = out.float().square().mean()
            del out  # autograd keeps what backward needs, as on the Go side
        else:
            loss = model(x, ckpt).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # Adam's state exists from here on: steady state
    peak = peak_bytes(step)
    n, start = 0, time.perf_counter()
    while n < args.min_iters or time.perf_counter() - start < args.min_time:
        step()
        n += 1
    ns = (time.perf_counter() - start) / n * 1e9
    return ns, peak, n


def mib(b):
    return f"{b / 2**20:.1f} MiB" if b is not None else "-"


def ms(ns):
    return f"{ns / 1e6:.0f} ms" if ns is not None else "-"


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed steps per configuration")
    ap.add_argument("--min-iters", type=int, default=3)
    args = ap.parse_args()

    go, threads = parse_go(GO_RESULTS)
    if threads:
        torch.set_num_threads(threads)
    print(f"libtorch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}"
          f" (Go side: {threads if threads else 'unknown'}); {args.depth} blocks, d={args.dim},"
          f" {args.tokens} tokens, Adam")
    print()
    names = ("plain", "checkpoint", "plain_bf16", "checkpoint_bf16")
    py = {name: bench(name.startswith("checkpoint"), name.endswith("_bf16"), args) for name in names}
    print("| configuration | Go peak | Python peak | Go time/step | Python time/step | Go / Python time |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        g_ns, g_peak = go.get(name, (None, None))
        p_ns, p_peak, _ = py[name]
        label = name.replace("_bf16", ", bf16 autocast")
        print(f"| {label} | {mib(g_peak)} | {mib(p_peak)} | {ms(g_ns)} | {ms(p_ns)} | {ratio(g_ns, p_ns)} |")
    for suffix, label in (("", "checkpoint / plain"), ("_bf16", "checkpoint / plain, bf16")):
        gp, gc = go.get("plain" + suffix, (None, None)), go.get("checkpoint" + suffix, (None, None))
        pp, pc = py["plain" + suffix], py["checkpoint" + suffix]
        print(f"| {label} | {ratio(gc[1], gp[1])} | {ratio(pc[1], pp[1])} | {ratio(gc[0], gp[0])} |"
              f" {ratio(pc[0], pp[0])} | |")


if __name__ == "__main__":
    main()
