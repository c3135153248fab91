#!/usr/bin/env python3
"""The Python half of `make bench-recipes` (Go package bench).

A server the Go driver starts once and talks to on stdin/stdout, one JSON
object per line each way. It builds a recipe's Python twin from the weights
and batch torchfit wrote (torch.save format), checks that one step gives the
loss and gradients torchfit computed, and times training steps when asked,
so that Go and Python steps can be interleaved in one run.

Requests and replies:
  {"op": "info"}  -> {"torch": torch.__version__, "compile": whether torch.compile exists}
  {"op": "load", "script": PATH, "file": PT, "threads": N, "compile": false,
   "device": "cpu"}
        -> {"params": number of parameters, "threads": N}
        "device": "cuda" (or "cuda:N") loads the weights and the batch onto
        that device and builds the twin with it as torch's default device
        (torch.set_default_device, PyTorch 2.x; back to the CPU once built:
        the default device costs a Python call on every torch function, so
        the twins' steps make their tensors on their inputs' device
        themselves); spec["device_type"] tells twins that autocast
        themselves. Each step then ends with torch.cuda.synchronize(), as
        the Go side's does.
        "compile": true wraps the twin's functions in torch.compile (below);
        with a torch that has none (1.13) the reply is the error
        "torch 1.13 has no torch.compile". "compile_mode" is torch.compile's
        mode ("default" when absent; "reduce-overhead": inductor's kernels
        replayed as CUDA graphs, with
        torch.compiler.cudagraph_mark_step_begin() before each step and
        check, as PyTorch's docs ask of a training loop; on the CPU it has
        no graphs and compiles as the default mode does).
  {"op": "check"}  one forward/backward at the loaded weights, compared with
        the file's "check" entry (torchfit's loss and gradients): max_rel is
        the largest difference of a gradient over its largest element (or
        the request's "floor" times the model's largest gradient element,
        when larger); the twin's noise_grads (gradients that are zero in
        exact arithmetic) are reported under "noise", not compared
        -> {"loss": x, "go_loss": y, "grads": n, "max_abs": a, "max_rel": r,
            "worst": name, "missing": [...]}
  {"op": "steps", "n": K}  K training steps -> {"times": [seconds, ...],
        "cpu": [the process's CPU seconds (user + system), ...]}; a compiled
        twin's reply adds "graphs": [graphs dynamo compiled in each step, ...]
  {"op": "peak"}  one profiled training step -> {"peak": bytes, "base": bytes}
  {"op": "profile", "n": K}  K training steps under torch.profiler (CUDA
        activity too on a GPU), each ending synchronised as in "steps":
        where a step's time goes -> {"steps": K, "wall": seconds,
        "device_busy": seconds the GPU ran anything (the union of its
        kernels', copies' and fills' intervals), "kernels", "copies": what
        ran on the device, "launches", "syncs": CUDA runtime calls that
        queue a kernel or wait for the device (the steps' own final
        synchronisations not counted), "ops": ATen operators recorded,
        "top_ops": those Python called itself (no operator above them),
        "libtorch": seconds inside libtorch (the union of the intervals of
        the outermost operators, the autograd engine's backward and the
        CUDA runtime's waits, on any thread: what a binding that cost
        nothing would leave; the rest of "wall" is Python's own time and
        the profiler's between operators)}
  {"op": "quit"}
An error is replied as {"error": message}.

A recipe script (scripts/twins/<recipe>.py) defines build(spec, tensors)
returning an object with
  model   the torch.nn.Module (its state-dict names are torchfit's)
  loss()  the loss of the batch the file holds (a scalar in the graph)
and, for loops that are not one model and one optimizer (a GAN), step()
of its own (its optimizers listed in an "optimizers" attribute, for the
memory figures) and check() or backward(). A twin whose step is one model and AdamW but whose
forward/backward is not one loss (accumulation over micro-batches, CLIP's
grad cache) defines backward() instead of loss(): it accumulates the
step's gradients and returns the loss as a float; the default step and
check use it. after_step(), when defined, runs after each optimizer step
(CLIP clamps its temperature). The default step is what torchfit's train.Trainer does
for one micro-batch: loss under autocast (bf16) or not, backward,
loss.item() (torchfit reads a window's loss once, after its last
backward), clip_grad_norm_, AdamW (PyTorch's default implementation) with
the file's parameter groups, zero_grad(set_to_none=True).

torch.compile: what a PyTorch 2.x user compiles, in the default mode
(inductor, on CPU C++ kernels that g++ builds) or the load's compile_mode: the twin's loss() -- forward
and, through AOTAutograd, its backward -- or, for a twin without one, its
backward() and step(); the optimizer step stays PyTorch's default AdamW, as
in the eager twin. Compilation happens in the first step, which the driver
times on its own (warm-up); dynamo's caches are reset at every load. The
driver runs a compiled twin in a server of its own, so that dynamo, the
inductor's compile workers and its kernels never share a process with the
eager twin's timings.

Peak memory: PyTorch 1.13 keeps no CPU allocator statistics, so one
steady-state step runs under torch.profiler(profile_memory=True), whose
memory events are every allocation and free of c10's CPU allocator with its
size; the peak is the maximum of their running sum -- bytes held by tensors
above the step's starting point, as torchfit's counting allocator reports it
(PeakAllocated - Allocated before the step). "base" is what the model,
its gradients, optimizer state and batch hold between steps (unique storages).
"""
import importlib.util
import json
import sys
import time
import traceback

import torch
from torch.profiler import ProfilerActivity, profile


class NotAvailable(Exception):
    """An option this torch does not have (replied without the class name)."""


def torch_version():
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def dynamo_graphs():
    """Graphs dynamo has compiled in this process so far (0 without dynamo)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def load_script(path):
    spec = importlib.util.spec_from_file_location("twin_" + str(abs(hash(path))), path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # torch.compile looks modules up by name
    spec.loader.exec_module(mod)
    return mod


class Runner:
    def __init__(self):
        self.tw = None
        self.compiled = False
        self.device = torch.device("cpu")

    def load(self, req):
        torch.set_num_threads(int(req["threads"]))
        self.device = torch.device(req.get("device", "cpu"))
        if self.device.type != "cpu" and not hasattr(torch, "set_default_device"):
            raise NotAvailable(f"torch {torch_version()} has no set_default_device: the twins run on the CPU only")
        data = torch.load(req["file"], map_location=self.device)
        spec = json.loads(data["spec"])
        spec["device_type"] = self.device.type
        self.spec = spec
        self.data = data
        mod = load_script(req["script"])
        self.tw = None
        self.compiled = bool(req.get("compile", False))
        self.compile_mode = req.get("compile_mode", "default")
        if self.compiled and not hasattr(torch, "compile"):
            raise NotAvailable(f"torch {torch_version()} has no torch.compile")
        if self.compiled:
            importlib.import_module("torch._dynamo").reset()
        if self.device.type != "cpu":
            torch.set_default_device(self.device)
        try:
            self.tw = mod.build(spec, data)
        finally:
            if self.device.type != "cpu":
                torch.set_default_device("cpu")
        if self.compiled:
            self.compile_twin()
        self.custom_step = getattr(self.tw, "step", None)
        self.backward = getattr(self.tw, "backward", None)
        self.after_step = getattr(self.tw, "after_step", None)
        if self.custom_step is None:
            self.opt = self.make_opt()
        return {"params": sum(p.numel() for p in self.tw.model.parameters()), "threads": torch.get_num_threads()}

    def compile_twin(self):
        """Replaces the twin's loss() (or backward() and step()) with
        torch.compile of it, in the load's mode: compiled when first called."""
        names = ["loss"] if hasattr(self.tw, "loss") else ["backward", "step"]
        for name in names:
            fn = getattr(self.tw, name, None)
            if fn is not None:
                setattr(self.tw, name, torch.compile(fn, mode=self.compile_mode))

    def mark_step(self):
        """Tells CUDA graph trees a new iteration begins (reduce-overhead):
        the last step's graph outputs (its loss, its gradients) are dead."""
        if self.compiled and self.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()

    def make_opt(self):
        o = self.spec["optim"]
        named = dict(self.tw.model.named_parameters())
        groups = []
        for g in o["groups"]:
            groups.append({"params": [named[n] for n in g["params"]], "weight_decay": g["weight_decay"]})
        return torch.optim.AdamW(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])

    def forward(self):
        if self.spec.get("precision") == "bf16":
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                loss = self.tw.loss()
        else:
            loss = self.tw.loss()
        if loss.dtype != torch.float32:
            loss = loss.float()
        return loss

    def step(self):
        self.mark_step()
        if self.custom_step is not None:
            return self.custom_step()
        if self.backward is not None:
            self.backward()
        else:
            loss = self.forward()
            loss.backward()
            loss.item()
        clip = self.spec["optim"].get("clip_norm", 0)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(self.tw.model.parameters(), clip)
        self.opt.step()
        if self.after_step is not None:
            self.after_step()
        self.opt.zero_grad(set_to_none=True)

    def check(self, req):
        self.mark_step()
        if hasattr(self.tw, "check"):
            return self.tw.check()
        model = self.tw.model
        model.zero_grad(set_to_none=True)
        if self.backward is not None:
            loss = float(self.backward())
        else:
            loss = self.forward()
            loss.backward()
            loss = loss.item()
        want = self.data["check"]
        out = {"loss": loss, "go_loss": float(want["loss"]), "grads": 0, "max_abs": 0.0,
               "max_rel": 0.0, "worst": "", "missing": []}
        go_grads = want["grads"]
        # A gradient's difference is measured against its own largest
        # element, or against a fraction ("floor", 1e-3 by default) of the
        # largest gradient element of the model when its own is smaller: a
        # bias that a normalisation follows has a gradient of pure rounding
        # noise.
        top = max((g.abs().max().item() for g in go_grads.values()), default=0.0)
        floor = float(req.get("floor", 1e-3)) * top
        # A twin names the parameters whose gradient is exactly zero in
        # exact arithmetic (a bias that a training-mode batch norm follows):
        # both sides hold rounding noise there, which is reported ("noise":
        # each side's largest element over the model's largest gradient
        # element) but not compared.
        noise = set(getattr(self.tw, "noise_grads", ()))
        for name, p in model.named_parameters():
            g = p.grad
            if name not in go_grads:
                if g is not None and g.abs().max().item() > 0:
                    out["missing"].append(name)
                continue
            gg = go_grads[name].double()
            pg = g.double() if g is not None else torch.zeros_like(gg)
            if name in noise:
                out.setdefault("noise", {})[name] = [gg.abs().max().item() / max(top, 1e-30),
                                                     pg.abs().max().item() / max(top, 1e-30)]
                continue
            diff = (gg - pg).abs().max().item()
            scale = max(gg.abs().max().item(), floor, 1e-30)
            out["grads"] += 1
            out.setdefault("rels", []).append([diff / scale, name])
            if diff / scale > out["max_rel"]:
                out["max_rel"], out["worst"] = diff / scale, name
            out["max_abs"] = max(out["max_abs"], diff)
        out["rels"] = sorted(out.get("rels", []), reverse=True)[:4]
        model.zero_grad(set_to_none=True)
        return out

    def steps(self, req):
        times, cpu, graphs = [], [], []
        for _ in range(int(req["n"])):
            g0 = dynamo_graphs() if self.compiled else 0
            c0 = time.process_time()
            t0 = time.perf_counter()
            self.step()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if self.compiled:
                graphs.append(dynamo_graphs() - g0)
        out = {"times": times, "cpu": cpu}
        if self.compiled:
            out["graphs"] = graphs
        return out

    def peak(self, req):
        opts = [self.opt] if hasattr(self, "opt") else getattr(self.tw, "optimizers", [])
        base = held_bytes(self.tw.model, opts, self.data)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            self.step()
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        # Kineto's events carry start_us() in 1.13, start_ns() in 2.x.
        events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us())
        run = peak = 0
        for e in events:
            run += e.nbytes()
            peak = max(peak, run)
        return {"peak": peak, "base": base}

    def profile(self, req):
        n = int(req["n"])
        cuda = self.device.type == "cuda"
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        wall = 0.0
        with profile(activities=acts) as prof:
            for _ in range(n):
                t0 = time.perf_counter()
                self.step()
                if cuda:
                    torch.cuda.synchronize(self.device)
                wall += time.perf_counter() - t0
        return summarize_profile(prof.events(), n, wall, n if cuda else 0)


def summarize_profile(events, n, wall, own_syncs):
    """Counts what a profile of n steps recorded (see "profile" above);
    own_syncs is how many device synchronisations the caller added."""
    out = {"steps": n, "wall": wall, "device_busy": 0.0, "kernels": 0, "copies": 0,
           "launches": 0, "syncs": 0, "ops": 0, "top_ops": 0, "libtorch": 0.0}
    device, host = [], []
    for e in events:
        name = e.name
        span = (e.time_range.start, e.time_range.end)
        if e.device_type == torch.autograd.DeviceType.CUDA:
            device.append(span)
            if name.startswith(("Memcpy", "Memset")):
                out["copies"] += 1
            else:
                out["kernels"] += 1
            continue
        outermost = not _under(e, ("aten::", "autograd::engine", "cuda"))
        if name.startswith("aten::"):
            out["ops"] += 1
            # Called by Python: no operator above it, and not in backward
            # (the autograd engine's nodes are not operators).
            if outermost and not _under(e, ("autograd::engine",)):
                out["top_ops"] += 1
        elif name.startswith(("cudaLaunch", "cuLaunch")):
            out["launches"] += 1
        elif "Synchronize" in name:
            out["syncs"] += 1
        if outermost and name.startswith(("aten::", "autograd::engine", "cuda")):
            host.append(span)
    out["syncs"] = max(0, out["syncs"] - own_syncs)
    out["device_busy"] = _union(device) / 1e6  # the profiler's times are microseconds
    out["libtorch"] = _union(host) / 1e6
    return out


def _under(e, prefixes):
    """Whether an event above e (its CPU parents) is named with one of prefixes."""
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith(prefixes):
            return True
        p = p.cpu_parent
    return False


def _union(spans):
    """The length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def held_bytes(model, opts, data):
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if not isinstance(t, torch.Tensor):
            return
        s = t.storage()
        key = s.data_ptr()
        if key in seen or s.size() == 0:
            return
        seen.add(key)
        total += s.nbytes()

    for t in model.state_dict(keep_vars=True).values():
        add(t)
        if isinstance(t, torch.nn.Parameter) and t.grad is not None:
            add(t.grad)
    for opt in opts:
        for st in opt.state.values():
            for v in st.values():
                add(v)
    batch = data.get("batch", {})
    for v in batch.values():
        add(v)
    return total


def main():
    r = Runner()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        op = req.get("op")
        if op == "quit":
            break
        try:
            if op == "info":
                out = {"torch": torch.__version__, "compile": hasattr(torch, "compile")}
            elif op == "load":
                out = r.load(req)
            elif op == "check":
                out = r.check(req)
            elif op == "steps":
                out = r.steps(req)
            elif op == "peak":
                out = r.peak(req)
            elif op == "profile":
                out = r.profile(req)
            else:
                out = {"error": f"unknown op {op!r}"}
        except NotAvailable as e:
            out = {"error": str(e)}
        except Exception as e:  # reported to the driver, which stops
            out = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
