#!/usr/bin/env python3
"""Split each side's sampled CPU time of `perf script -F comm,ip,sym,dso`
(a bench-recipes run recorded with -perf-control: the timed steps of Go
and of eager Python only) between libtorch's kernels, the binding, and
libc and the kernel. Arguments: the perf script text, the row's label,
the Go process's comm, and a file for each side's top symbols.

Prints one Markdown table row: samples per side (both sides run the same
number of steps, so their ratio is the CPU-time ratio), each side's split,
kernels Go / Python (libtorch's and torchfit's own kernels in Go against
libtorch's in Python: below 1 where Go brings faster kernels). The floor column is the share of Python's
time spent in libtorch and below it (kernels, libc, the kernel): what any
binding on the same libtorch would still spend, over Python's time, if
its own overhead were zero."""
import collections
import os
import re
import sys

text, label, gocomm, topfile = sys.argv[1:5]

# Where a sample's DSO belongs. Anything not named lands in "other"
# (printed, so that a new library is seen rather than guessed).
# perf-PID.map: code generated at run time and announced to perf (oneDNN's
# JIT kernels).
KERNELS = re.compile(r"^perf-[0-9]+\.map$|"
                     r"libtorch_cpu|libtorch\.so|libc10|^\[JIT\]|libgomp|libiomp|libmkl|openblas|libdnnl|libsleef|libm\.so|libstdc\+\+|libgcc_s|libblas|liblapack|libcpuinfo|libtensorpipe|libfbgemm|libXNNPACK|libpthreadpool|libgloo|libprotobuf|libtorch_cuda|libcu|libnv|libc10_cuda")
SYSTEM = re.compile(r"^libc\.so|^\[kernel|^ld-linux|libpthread|^\[vdso\]")
# torchfit's own kernels, compiled into the Go binary (fused AdamW, fused
# dropout, the attention kernel, the selective scan): by their function
# names, GCC's clones (name.avx512f...) included.
OWN = re.compile(r"\(anonymous namespace\)::(moments|apply)_(avx512|avx2|default)|apply_(f32|f64|bf16|f16|range|cpu)"
                 r"|(fwd|bwd)_(f32|f64|bf16|task|tasks)|::(micro|edge|gemm|keep|mask_row|to_local|from_local|load|loadT|transpose|fexp)\b")


def where(comm, dso, sym):
    base = os.path.basename(dso)
    if dso.startswith("[JIT]"):
        base = dso
    if KERNELS.search(base):
        return "libtorch"
    if SYSTEM.search(base):
        return "system"
    # The Go binary: perf's comm is the first 15 bytes of its file name
    # (make bench-split builds /tmp/torchfit-bench-recipes).
    if comm == gocomm and (base.startswith(gocomm) or dso == "[unknown]"):
        if OWN.search(sym):
            return "own"
        return "binding"  # Go's runtime, its code, cgo and the shim
    if comm != gocomm and (base.startswith("python") or base.startswith("libpython") or "torch_python" in base or ".cpython-" in base or dso == "[unknown]"):
        return "binding"  # the interpreter and torch's bindings
    return "other:" + base


# Kinds of work, by symbol (first match wins), for the top file: a rough
# map of where the kernels' time goes, to bound what fusing a chain of
# them could save.
KINDS = [("GEMM/conv", r"gemm|mkl_blas|dnnl|perf-[0-9]+\.map|conv|brgemm|jit|im2col|col2im|unfold"),
         ("layer norm", r"LayerNorm|RowwiseMoments|layer_norm"), ("SiLU/sigmoid", r"silu|sigmoid"), ("GLU", r"glu"),
         ("GELU", r"gelu|Gelu"), ("softmax", r"softmax|Softmax"), ("add/sub", r"add_kernel|sub_kernel|addcmul|lerp"),
         ("mul/div", r"mul_kernel|div_true|div_kernel"), ("copy/cast", r"copy_kernel|reduced_float_copy|direct_copy"),
         ("ReLU/threshold", r"threshold|relu|leaky"), ("fill", r"fill|memset"), ("reductions", r"sum_kernel|reduce|Reduce"),
         ("AdamW (torchfit)", r"moments_|::apply_(avx|default)"), ("dropout (torchfit)", r"apply_(f32|f64|bf16|f16|range)"),
         ("malloc/free", r"malloc|_int_free|cfree|memalign|unlink_chunk|consolidate"), ("OS kernel", r"kallsyms")]
kinds = {"go": collections.Counter(), "python": collections.Counter()}
count = {"go": collections.Counter(), "python": collections.Counter()}
syms = {"go": collections.Counter(), "python": collections.Counter()}
line_re = re.compile(r"^\s*(\S+)\s+[0-9a-f]+\s+(.*) \(([^()]*)\)\s*$")
with open(text, errors="replace") as f:
    for line in f:
        m = line_re.match(line)
        if not m:
            continue
        comm, sym, dso = m.groups()
        if comm == gocomm:
            side = "go"
        elif comm.startswith("python"):
            side = "python"
        else:
            continue  # another process sharing the machine
        w = where(comm, dso, sym)
        count[side][w] += 1
        syms[side][(w, sym, os.path.basename(dso))] += 1
        both = sym + " " + dso
        kinds[side][next((k for k, p in KINDS if re.search(p, both)), "other")] += 1

go, py = count["go"], count["python"]
gt, pt = sum(go.values()), sum(py.values())
if gt == 0 or pt == 0:
    sys.exit(f"bench_split: no samples for {'Go' if gt == 0 else 'Python'} ({gocomm}): was perf recording?")


def pct(c, k, t):
    return 100.0 * c[k] / t


others = sorted(k for k in set(go) | set(py) if k.startswith("other:"))
floor = (py["libtorch"] + py["system"]) / pt
print(f"| {label} | {gt} | {pt} | {gt / pt:.2f} | {pct(go, 'libtorch', gt):.1f} % | {pct(go, 'own', gt):.1f} % | {pct(go, 'system', gt):.1f} % | {pct(go, 'binding', gt):.1f} % "
      f"| {pct(py, 'libtorch', pt):.1f} % | {pct(py, 'system', pt):.1f} % | {pct(py, 'binding', pt):.1f} % "
      f"| {(go['libtorch'] + go['own']) / max(py['libtorch'], 1):.2f} | **{floor:.2f}** |"
      + (f" other: {', '.join(f'{k[6:]} {go[k] + py[k]}' for k in others)}" if others else ""))

with open(topfile, "w") as f:
    for side, total in (("go", gt), ("python", pt)):
        f.write(f"## {label}: {side}, {total} samples\n")
        f.write("kinds: " + ", ".join(f"{k} {100.0 * kinds[side][k] / total:.1f} %" for k, _ in KINDS + [("other", "")]) + "\n")
        for (w, sym, dso), n in syms[side].most_common(25):
            f.write(f"{100.0 * n / total:5.1f} %  {w:9s} {sym[:110]}  [{dso}]\n")
        f.write("\n")
