"""Per-op host time of PyTorch on 1-element tensors (make gpu-check's
op-overhead check; internal/gpucheck/opoverhead.go runs it beside
torchfit's ops and libtorch's own floor, package internal/opfloor).

argv[1]: JSON {"device": "cpu" | "cuda:0", "n": calls per run, "runs": R}.
Prints JSON {"torch": version, "add": ns, "add_": ns}: for x + y and
x.add_(y), the best of R runs of n calls, nanoseconds per call. On CUDA
each run ends with torch.cuda.synchronize(), as the Go side's and the
floor's end with a wait for the device. One thread, as the other sides.
"""
import json
import sys
import time

import torch


def main():
    spec = json.loads(sys.argv[1])
    dev = torch.device(spec["device"])
    n, runs = int(spec["n"]), int(spec["runs"])
    torch.set_num_threads(1)
    x = torch.zeros(1, device=dev)
    y = torch.ones(1, device=dev)

    def add(k):
        for _ in range(k):
            x + y

    def add_(k):
        for _ in range(k):
            x.add_(y)

    out = {"torch": torch.__version__}
    for name, fn in (("add", add), ("add_", add_)):
        fn(min(n, 1000))  # warm-up: the kernels load, the caches fill
        best = float("inf")
        for _ in range(runs):
            t0 = time.perf_counter()
            fn(n)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            best = min(best, (time.perf_counter() - t0) / n * 1e9)
        out[name] = best
    print(json.dumps(out))


if __name__ == "__main__":
    main()
