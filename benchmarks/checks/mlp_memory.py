"""Memory and time of a gated MLP's forward+backward at the Llama-3-8B layer (8192 tokens, H 4096, I 14336,
bf16): ``kw.gated_mlp`` against the projections around ``kw.swiglu`` (the patch's path for wrapped
projections), plain torch and Liger's SwiGLU.

    python benchmarks/checks/mlp_memory.py [--tokens 8192] [--out F.json]

Per variant: bytes saved for the backward (beyond the inputs), the extra peak of the forward and of the
backward over what is live before each, the median time of 5 forward+backward (CUDA events, after a warm-up),
and for ours the blocks live at the backward's peak by allocating line.
"""
import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch
import triton
from torch.nn import functional

import kernelworks as kw
from kernelworks.bench.results import git_commit
from kernelworks.runtime import replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from memory import peak_live, recorded, site

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=8192)
ap.add_argument("--out")
args = ap.parse_args()
N, H, INNER = args.tokens, 4096, 14336
g = torch.Generator(device="cuda").manual_seed(0)


def make(*shape, scale=1.0):
    return (scale * torch.randn(shape, device="cuda", generator=g)).bfloat16().requires_grad_()


x, wg, wu = make(N, H), make(INNER, H, scale=H ** -0.5), make(INNER, H, scale=H ** -0.5)
wd = make(H, INNER, scale=INNER ** -0.5)
grad_y = torch.randn(N, H, device="cuda", generator=g).bfloat16()


def with_swiglu(x, wg, wu, wd):
    return functional.linear(kw.swiglu(functional.linear(x, wg), functional.linear(x, wu)), wd)


def plain(x, wg, wu, wd):
    return functional.linear(functional.silu(functional.linear(x, wg)) * functional.linear(x, wu), wd)


def liger(x, wg, wu, wd):
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return functional.linear(LigerSiLUMulFunction.apply(functional.linear(x, wg), functional.linear(x, wu)), wd)


def variant_of_ours(block: bool = True, accum: torch.dtype = torch.float32):
    """kw.gated_mlp with its backward's knobs set: blocks of the layer's width or one block, grad_x's
    accumulator dtype."""
    from kernelworks.ops.activation import mlp

    def run(*tensors):
        saved = mlp.inner_block, mlp.GRAD_X_ACCUM
        mlp.GRAD_X_ACCUM = accum
        if not block:
            mlp.inner_block = lambda tokens, hidden, inner, itemsize: inner
        try:
            with replay.paused():  # the knobs are read by the body: no replay recorded under others
                return _Deferred(kw.gated_mlp(*tensors), (block, accum))
        finally:
            mlp.inner_block, mlp.GRAD_X_ACCUM = saved
    return run


class _Deferred:
    """The output of a knob-set variant: its backward runs with the same knobs."""

    def __init__(self, out, knobs):
        self.out, self.knobs = out, knobs

    def backward(self, grad):
        from kernelworks.ops.activation import mlp

        block, accum = self.knobs
        saved = mlp.inner_block, mlp.GRAD_X_ACCUM
        mlp.GRAD_X_ACCUM = accum
        if not block:
            mlp.inner_block = lambda tokens, hidden, inner, itemsize: inner
        try:
            with replay.paused():
                self.out.backward(grad)
        finally:
            mlp.inner_block, mlp.GRAD_X_ACCUM = saved


VARIANTS = {"kw.gated_mlp": kw.gated_mlp, "kw.gated_mlp, one block": variant_of_ours(block=False),
            "kw.gated_mlp, bf16 grad_x": variant_of_ours(accum=torch.bfloat16),
            "linear + kw.swiglu": with_swiglu, "torch": plain, "liger swiglu": liger}


def trace_backward() -> list[str]:
    """The allocator's alloc/free events of one kw.gated_mlp backward, in order, with the lines that asked."""
    y = kw.gated_mlp(x, wg, wu, wd)
    _, trace = recorded(lambda: y.backward(grad_y), max_entries=100_000)
    out, live = [], 0
    for e in trace:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        live += e["size"] if e["action"] == "alloc" else -e["size"]
        frames = [f"{Path(f['filename']).name}:{f['line']}" for f in e.get("frames") or []
                  if not f["filename"].startswith("<")][:3]
        out.append(f"{e['action'][:5]} {e['size'] / 1e6:8.1f} MB  live {live / 1e6:8.1f}  {' < '.join(frames)}")
    return out


def where() -> str:
    """The blocks live at the peak of one kw.gated_mlp backward, by allocating file:line."""
    y = kw.gated_mlp(x, wg, wu, wd)
    before, trace = recorded(lambda: y.backward(grad_y), max_entries=100_000)
    _, live = peak_live(before, trace, {}, label=site)
    return ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in Counter(live).most_common(10))


rows = []
for name, fn in VARIANTS.items():
    try:
        for _ in range(2):  # warm-up; replay records its signatures on the second call
            fn(x, wg, wu, wd).backward(grad_y)
        for t in (x, wg, wu, wd):
            t.grad = None
        saved: dict[int, int] = {}

        def pack(t, saved=saved):
            saved[t.data_ptr()] = t.numel() * t.element_size()
            return t

        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = fn(x, wg, wu, wd)
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated() - base
        inputs = {t.data_ptr() for t in (x, wg, wu, wd)}
        saved_bytes = sum(v for k, v in saved.items() if k not in inputs)
        mid = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y.backward(grad_y)
        torch.cuda.synchronize()
        bwd_peak = torch.cuda.max_memory_allocated() - mid
        del y
        times = []
        for _ in range(5):
            for t in (x, wg, wu, wd):
                t.grad = None
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(x, wg, wu, wd).backward(grad_y)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        rows.append(dict(variant=name, saved_gb=saved_bytes / 1e9, fwd_extra_peak_gb=fwd_peak / 1e9,
                         bwd_extra_peak_gb=bwd_peak / 1e9, ms=statistics.median(times)))
    except Exception as exc:  # a peer's API may differ across versions: report it, go on
        rows.append(dict(variant=name, error=f"{type(exc).__name__}: {exc}"[:200]))
    for t in (x, wg, wu, wd):
        t.grad = None
    torch.cuda.empty_cache()
rows[0]["live_at_backward_peak"] = where()
for t in (x, wg, wu, wd):
    t.grad = None
rows[0]["backward_trace"] = trace_backward()

env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
           commit=git_commit(Path(__file__).resolve().parents[2]),
           tokens=N, hidden=H, intermediate=INNER)
if args.out:
    with open(args.out, "w") as f:
        json.dump(dict(environment=env, rows=rows), f, indent=1)
print(env)
print(f"{'variant':20s} {'saved GB':>9s} {'fwd peak':>9s} {'bwd peak':>9s} {'ms':>7s}")
for r in rows:
    if "error" in r:
        print(f"{r['variant']:20s} {r['error']}")
        continue
    print(f"{r['variant']:20s} {r['saved_gb']:9.3f} {r['fwd_extra_peak_gb']:9.3f} {r['bwd_extra_peak_gb']:9.3f} "
          f"{r['ms']:7.2f}")
print("kw.gated_mlp, live at the backward's peak:", rows[0]["live_at_backward_peak"])
print("kw.gated_mlp's backward, allocator events:")
print("\n".join(rows[0]["backward_trace"]))
