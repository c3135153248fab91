#!/usr/bin/env python3
"""The Python side of gpu-check's cuda-graph check (internal/gpucheck/graphs.go).

  graph_step.py SPEC_JSON

SPEC_JSON is the check's model and timing (graphModel): width, hidden,
blocks, batch, steps, reps, warmup. The model is the Go side's: blocks x
[LayerNorm, Linear(width, hidden), GELU, Linear(hidden, width)] and a
Linear(width, width) head, MSE against tanh(x A), bf16 autocast, AdamW
(fused=True, lr 1e-3, weight decay 0.01), zero_grad(set_to_none=True) each
step, nothing read back to the host inside a step. Timed as Go times it:
warm-up steps, then reps repetitions of steps steps with the device
synchronised at the end of each, the median per-step time.

Two runs, each from a fresh model:
  eager     the step as a PyTorch user writes it;
  compiled  the loss (forward, and through AOTAutograd its backward) under
            torch.compile(mode="reduce-overhead") -- inductor kernels replayed
            as CUDA graphs -- with torch.compiler.cudagraph_mark_step_begin()
            at each step; the optimizer step stays the fused AdamW. Its first
            step (compilation) is timed apart. Without torch.compile or
            triton, or when compilation fails, "compiled_na" says why.

Prints one JSON object: torch, eager_ms, compiled_ms, compile_seconds,
compiled_na.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def build(c, dev):
    torch.manual_seed(0)
    layers = []
    for _ in range(c["blocks"]):
        layers += [nn.LayerNorm(c["width"]), nn.Linear(c["width"], c["hidden"]), nn.GELU(),
                   nn.Linear(c["hidden"], c["width"])]
    layers.append(nn.Linear(c["width"], c["width"]))
    return nn.Sequential(*layers).to(dev)


def measure(c, compiled):
    dev = torch.device("cuda", 0)
    model = build(c, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    gen = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(c["width"], c["width"], device=dev, generator=gen) / math.sqrt(c["width"])
    x = torch.randn(c["batch"], c["width"], device=dev, generator=gen)
    y = torch.tanh(x @ a)

    def loss_fn(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        return F.mse_loss(out.float(), y)

    if compiled:
        loss_fn = torch.compile(loss_fn, mode="reduce-overhead")

    def step():
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(c["warmup"]):
        step()
    torch.cuda.synchronize()
    per = []
    for _ in range(c["reps"]):
        t0 = time.perf_counter()
        for _ in range(c["steps"]):
            step()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) * 1000 / c["steps"])
    return statistics.median(per), first


def compile_missing():
    if not hasattr(torch, "compile"):
        return "torch %s has no torch.compile" % torch.__version__
    try:
        import triton  # noqa: F401  (inductor's GPU kernels need it)
    except ImportError:
        return "skipped: no triton"
    return ""


def main():
    c = json.loads(sys.argv[1])
    out = {"torch": torch.__version__, "eager_ms": 0.0, "compiled_ms": 0.0, "compile_seconds": 0.0, "compiled_na": ""}
    out["eager_ms"], _ = measure(c, False)
    out["compiled_na"] = compile_missing()
    if not out["compiled_na"]:
        try:
            out["compiled_ms"], out["compile_seconds"] = measure(c, True)
        except Exception as e:  # what torch.compile gives a user is reported, not fatal
            out["compiled_na"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
