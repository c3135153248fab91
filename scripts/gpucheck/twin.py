#!/usr/bin/env python3
"""The Python side of `make gpu-check` (internal/gpucheck): the same
allocation patterns and facts through PyTorch's own API, printed as one JSON
object on stdout.

  twin.py facts      torch, CUDA, cuDNN, NCCL versions; the device
  twin.py pattern    the memory-stats allocation pattern (allocated,
                     reserved, peak after each stage)
"""
import json
import sys

import torch

MB = 1 << 20


def stats():
    return {
        "allocated": torch.cuda.memory_allocated(0),
        "reserved": torch.cuda.memory_reserved(0),
        "peak": torch.cuda.max_memory_allocated(0),
    }


def facts():
    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "available": torch.cuda.is_available(),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(
            device=p.name,
            capability="%d.%d" % (p.major, p.minor),
            total=p.total_memory,
            cudnn=torch.backends.cudnn.version(),
            nccl=".".join(str(v) for v in torch.cuda.nccl.version()),
        )
    return out


def pattern():
    # Mirrors memoryPattern in internal/gpucheck/checks.go stage by stage.
    dev = "cuda:0"
    torch.cuda.init()
    torch.cuda.reset_peak_memory_stats(0)
    st = [stats()]
    xs = [torch.zeros(1000, 1000, device=dev) for _ in range(10)]
    st.append(stats())
    del xs[:5]
    st.append(stats())
    big = torch.zeros(4096, 4096, device=dev)
    st.append(stats())
    del big
    xs.clear()
    st.append(stats())
    return {"stages": st}


if __name__ == "__main__":
    fn = {"facts": facts, "pattern": pattern}[sys.argv[1]]
    print(json.dumps(fn()))
