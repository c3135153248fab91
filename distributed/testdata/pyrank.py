# A Python rank in a process group with Go ranks (dist's TestGoAndPythonRanks):
# torch.distributed with the Gloo backend, init_method env:// (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the same collectives as the Go
# helper "interop", in the same order. Prints one JSON line.
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
r, w = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(r + 1), 10.0 * (r + 1), 0.5], dtype=torch.float32)
dist.all_reduce(x)
m = torch.tensor([float(r)], dtype=torch.float64)
dist.all_reduce(m, op=dist.ReduceOp.MAX)
b = torch.tensor([float(r) * 3 + 1, 2.0], dtype=torch.float32)
dist.broadcast(b, src=w - 1)
parts = [torch.zeros(2) for _ in range(w)]
dist.all_gather(parts, torch.tensor([float(r), -float(r)]))
dist.barrier()
print(json.dumps({"sum": x.tolist(), "max": m.tolist(), "bcast": b.tolist(), "gather": torch.cat(parts).tolist()}))
sys.stdout.flush()
dist.destroy_process_group()
