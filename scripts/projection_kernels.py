#!/usr/bin/env python3
"""Counts the kernels a multi-head attention's input projection costs in
backward, as PyTorch writes it and as nn.MultiheadAttention does since
2026-11-29 (docs/gpu.md, "Fewer kernels in every attention").

PyTorch's _in_projection_packed takes proj[0], proj[1], proj[2] (and
torchfit also sliced the packed weight and bias per projection): each
select's and slice's backward fills a zero tensor of the whole projection
or parameter and copies its part in, and the parts are then added.
torchfit now takes the parts by one unbind and the weight whole (self-
attention, through an alias: autocast keeps no cast of a view) or by one
split (cross-attention with a shared key/value).

Run: .venv/bin/python scripts/projection_kernels.py (any torch 2.x; on
the CPU: the autograd graph is the same on CUDA, where each counted op is
a kernel launch). It prints, per form, the compute ops torch.profiler
records during backward (the loss's and the linears' own included, the
same in both forms), so the difference between the two lines of a pair
is what the change saves.
"""
import collections

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

KERNELS = {"aten::fill_", "aten::zero_", "aten::copy_", "aten::add", "aten::add_", "aten::stack",
           "aten::cat", "aten::mm", "aten::addmm", "aten::sum", "aten::mul", "aten::bmm", "aten::clone"}


def main():
    torch.manual_seed(0)
    n, l, s, e, h = 4, 32, 24, 64, 2
    w = torch.randn(3 * e, e, requires_grad=True)
    b = torch.randn(3 * e, requires_grad=True)
    x = torch.randn(n, l, e, requires_grad=True)
    mem = torch.randn(n, s, e, requires_grad=True)

    def heads(t, length):
        return t.reshape(n, length, h, e // h).transpose(1, 2)

    def packed(inp, wt, bt, parts, length):
        return F.linear(inp, wt, bt).reshape(n, length, parts, e).permute(2, 0, 1, 3).contiguous()

    def self_selects():
        y = packed(x, w.narrow(0, 0, 3 * e), b.narrow(0, 0, 3 * e), 3, l)
        return [heads(y[i], l) for i in range(3)]

    def self_unbind():  # the weight and bias through aten::alias, as torchfit passes them
        return [heads(t, l) for t in packed(x, torch.ops.aten.alias(w), torch.ops.aten.alias(b), 3, l).unbind(0)]

    def cross_selects():
        q = packed(x, w.narrow(0, 0, e), b.narrow(0, 0, e), 1, l)
        kv = packed(mem, w.narrow(0, e, 2 * e), b.narrow(0, e, 2 * e), 2, s)
        return [heads(q[0], l), heads(kv[0], s), heads(kv[1], s)]

    def cross_split():
        (wq, wkv), (bq, bkv) = w.split([e, 2 * e]), b.split([e, 2 * e])
        q = packed(x, wq, bq, 1, l)
        kv = packed(mem, wkv, bkv, 2, s)
        return [heads(q.reshape(n, l, e), l)] + [heads(t, s) for t in kv.unbind(0)]

    def count(fwd):
        for t in (w, b, x, mem):
            t.grad = None
        loss = sum((o * o).sum() for o in fwd())
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss.backward()
        c = collections.Counter()

        def walk(ev):
            if ev.name in KERNELS and not any(k.name in KERNELS for k in ev.cpu_children):
                c[ev.name] += 1
            for k in ev.cpu_children:
                walk(k)
        for ev in prof.events():
            if ev.cpu_parent is None:
                walk(ev)
        return c

    for name, fn in [("self-attention, selects and slices", self_selects), ("self-attention, unbind", self_unbind),
                     ("cross-attention, selects and slices", cross_selects), ("cross-attention, split and unbind", cross_split)]:
        c = count(fn)
        print(f"{name}: {sum(c.values())} ops in backward {dict(sorted(c.items()))}")


if __name__ == "__main__":
    main()
