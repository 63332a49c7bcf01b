"""Peak memory, time and ``grad_weight`` error of the fused linear cross-entropy's accumulation choices, at the
Llama-3-8B LM head (8192 tokens, H 4096, V 128256, bf16), beside Liger's — what the e2e 8B step's peak is made of.

    python benchmarks/checks/flce_memory.py [--tokens 8192] [--out F.json] [--where]

Per variant: the extra peak of one forward+backward over the inputs (GB), the median time of 5 (ms, CUDA
events, after a warm-up), and the relative L2 error of ``grad_weight`` and ``grad_hidden`` against an fp32
computation of the same loss (TF32 off). ``--where``: also the blocks live at each kw variant's peak, by the
line that allocated them (the allocator's history).
"""
import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch
import triton

import kernelworks as kw
from kernelworks.bench.results import git_commit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from memory import peak_live, recorded, site

ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, default=8192)
ap.add_argument("--out")
ap.add_argument("--where", action="store_true")
args = ap.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
N, H, V = args.tokens, 4096, 128256
g = torch.Generator(device="cuda").manual_seed(0)
hidden = torch.randn(N, H, device="cuda", generator=g).bfloat16()
weight = (0.02 * torch.randn(V, H, device="cuda", generator=g)).bfloat16()
target = torch.randint(0, V, (N,), device="cuda", generator=g)

h32, w32 = hidden.float().requires_grad_(), weight.float().requires_grad_()
torch.nn.functional.cross_entropy(h32 @ w32.t(), target).backward()
ref_gh, ref_gw = h32.grad, w32.grad
del h32, w32
torch.cuda.empty_cache()


def kw_loss(**opts):
    return lambda h, w: kw.fused_linear_cross_entropy(h, w, target, **opts)


def liger_loss(accum_dtype=None):
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    def loss(h, w):
        out = LigerFusedLinearCrossEntropyFunction.apply(h, w, target, None, None, -100, 0.0, 0.0, "mean", None,
                                                         False, accum_dtype)
        return out[0] if isinstance(out, tuple) else out
    return loss


VARIANTS = {
    "kw fp32 accum (default)": kw_loss(),
    "kw fp32 accum, chunk 1024": kw_loss(chunk_size=1024),
    "kw bf16 accum (chunk 1024)": kw_loss(accum_dtype=torch.bfloat16),
    "kw bf16 accum, chunk 4096": kw_loss(accum_dtype=torch.bfloat16, chunk_size=4096),
    "kw bf16 accum, chunk 2048": kw_loss(accum_dtype=torch.bfloat16, chunk_size=2048),
    "kw bf16 accum, chunk 512": kw_loss(accum_dtype=torch.bfloat16, chunk_size=512),
    "kw bf16 accum, chunk 256": kw_loss(accum_dtype=torch.bfloat16, chunk_size=256),
}
try:
    VARIANTS["liger (bf16 accum)"] = liger_loss()
    VARIANTS["liger fp32 accum"] = liger_loss(torch.float32)
except ImportError as e:
    print("liger not installed:", e)


def rel(a, b):
    return float((a.float() - b).norm() / b.norm())


def where(fn, h, w) -> str:
    """The blocks live at the peak of one forward+backward, by allocating file:line (innermost real frame)."""
    before, trace = recorded(lambda: fn(h, w).backward(), max_entries=100_000)
    _, live = peak_live(before, trace, {}, label=site)
    return ", ".join(f"{label} {size / 1e9:.2f} GB" for label, size in Counter(live).most_common(6))


rows = []
for name, fn in VARIANTS.items():
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    try:
        fn(h, w).backward()  # warm-up (compiles)
        h.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(h, w).backward()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 1e9
        err_w, err_h = rel(w.grad, ref_gw), rel(h.grad, ref_gh)
        times = []
        for _ in range(5):
            h.grad = w.grad = None
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(h, w).backward()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        rows.append(dict(variant=name, extra_peak_gb=peak, ms=statistics.median(times), grad_weight_rel_l2=err_w,
                         grad_hidden_rel_l2=err_h))
        if args.where and name.startswith("kw"):
            h.grad = w.grad = None
            rows[-1]["live_at_peak"] = where(fn, h, w)
    except Exception as exc:  # a peer's signature may differ across versions: report, go on
        rows.append(dict(variant=name, error=f"{type(exc).__name__}: {exc}"[:200]))
    del h, w
    torch.cuda.empty_cache()

env = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
           commit=git_commit(Path(__file__).resolve().parents[2]),
           tokens=N, hidden=H, vocab=V)
if args.out:
    with open(args.out, "w") as f:
        json.dump(dict(environment=env, rows=rows), f, indent=1)
print(env)
print(f"{'variant':34s} {'extra peak GB':>13s} {'ms':>7s} {'gW rel':>9s} {'gH rel':>9s}")
for r in rows:
    if "error" in r:
        print(f"{r['variant']:34s} {r['error']}")
    else:
        print(f"{r['variant']:34s} {r['extra_peak_gb']:13.2f} {r['ms']:7.2f} {r['grad_weight_rel_l2']:9.2e} "
              f"{r['grad_hidden_rel_l2']:9.2e}")
        if "live_at_peak" in r:
            print(f"    at the peak: {r['live_at_peak']}")
