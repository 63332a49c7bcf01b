"""Gated DeltaNet prefill backward on the GPU: plan variants of the chunk-parallel backward
(prefill_bwd_chunked.py), each checked against autograd of the float64 recurrence (B1 T512 with h0, dht and
write strength; a small varlen case; bar 2e-2 relative L2 per gradient) and timed (B8 T4096 H16 and a
mixed-length varlen batch, with per-kernel profiles), against our forward in the same run; with --old the
sequential backward (prefill_bwd.py) too. Prints FAIL lines; a table last.

    PYTHONPATH=src python benchmarks/sweeps/gated_delta_backward.py --out gdn_bwd.json [--old] [--variants a,b]
"""
import argparse
import functools
import json
import os
import sys
import time

if "--smoke" in sys.argv:  # before triton is imported: its language functions are built for the interpreter then
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
from torch.nn import functional

import kernelworks.ops.gated_delta.prefill_bwd_chunked as pbc
from kernelworks.bench.timing import kernel_times_us
from kernelworks.ops.gated_delta import reference
from kernelworks.ops.gated_delta.api import gated_delta_prefill
from kernelworks.ops.gated_delta.prefill_bwd import gated_delta_prefill_bwd

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--old", action="store_true", help="also time the sequential backward (prefill_bwd.py)")
ap.add_argument("--variants", default="", help="comma-separated variant names (default: all)")
ap.add_argument("--smoke", action="store_true", help="CPU interpreter dry run: tiny shapes, fp16, head dim 16")
args = ap.parse_args()
dev, BF = ("cpu", torch.float16) if args.smoke else ("cuda", torch.bfloat16)
D = 16 if args.smoke else 128
results = {"device": "cpu-smoke" if args.smoke else torch.cuda.get_device_name(), "shapes": {}, "checks": [],
           "variants": {}}
fails = []
NAMES = ["dq", "dk", "dv", "dg", "dbeta", "dw", "dh0"]


def inputs(B, T, hq, hv, K, V, *, write=False, n_h0=0, seed=0, dtype=BF):
    torch.manual_seed(seed)
    x = {"q": torch.randn(B, T, hq, K, device=dev).to(dtype),
         "k": functional.normalize(torch.randn(B, T, hq, K, device=dev), dim=-1).to(dtype),
         "v": torch.randn(B, T, hv, V, device=dev).to(dtype),
         "g": functional.logsigmoid(torch.randn(B, T, hv, device=dev) + 2.0),
         "beta": torch.rand(B, T, hv, device=dev),
         "write_strength": torch.rand(B, T, hv, device=dev) if write else None,
         "initial_state": torch.randn(n_h0, hv, V, K, device=dev) if n_h0 else None}
    return x


def cu_of(lens):
    if lens is None:
        return None
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device=dev)


def bwd(fn, x, do, dht, cu, scale, **kw):
    return fn(do, dht, x["q"], x["k"], x["v"], x["g"], x["beta"], x["write_strength"], x["initial_state"], cu,
              scale, 16 if args.smoke else 64, x["initial_state"] is not None, **kw)


def grad_names(x):
    return ["dq", "dk", "dv", "dg", "dbeta"] + (["dw"] if x["write_strength"] is not None else []) + \
        (["dh0"] if x["initial_state"] is not None else [])


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def check(tag, names, got, want, bar):
    for nm, a, r in zip(names, got, want):
        e = rel(a, r)
        bad = (not torch.isfinite(a).all()) or e > bar
        results["checks"].append({"case": tag, "grad": nm, "rel_l2": e, "bar": bar, "ok": not bad})
        line = f"{'FAIL' if bad else 'ok  '} {tag:38s} {nm:6s} rel L2 {e:.2e} (bar {bar:.0e})"
        print(line, flush=True)
        if bad:
            fails.append(line)
    return [rel(a, r) for a, r in zip(got, want)]


def bench(fn, rep=200):
    if args.smoke:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")


def prof(fn, iters=5):
    return {} if args.smoke else kernel_times_us(fn, iters=iters)


def print_prof(name, per):
    tot = sum(per.values())
    print(f"   {name} per kernel (profiler, us): total {tot:.0f}")
    for kk, t in list(per.items())[:10]:
        print(f"      {t:9.1f}  {kk}")


# ------------------------------------------------------------------------------ 1. float64 references
t_start = time.time()
REFS = {
    "B1-T512-H2(hq1)-h0-dht-write": (1, 512, 1, 2, None, True),
    "varlen(37,200,63,1)-H2-h0-dht": (1, 301, 2, 2, (37, 200, 63, 1), False),
}
if args.smoke:
    REFS = {"smoke-T40": (1, 40, 1, 2, None, True), "smoke-varlen": (1, 30, 2, 2, (7, 22, 1), False)}
ref_cases = {}
for tag, (B, T, hq, hv, lens, write) in REFS.items():
    cu = cu_of(lens)
    n = len(lens) if lens else B
    x = inputs(B, T, hq, hv, D, D, write=write, n_h0=n, seed=1)
    do = torch.randn(B, T, hv, D, device=dev)
    dht = torch.randn(n, hv, D, D, device=dev)
    leaves = {k: (t.double().requires_grad_(True) if t is not None else None) for k, t in x.items()}
    o, fin = reference.gated_delta_rule(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"],
                                        initial_state=leaves["initial_state"], output_final_state=True,
                                        cu_seqlens=cu, scale=D ** -0.5, write_strength=leaves["write_strength"])
    order = [k for k in ("q", "k", "v", "g", "beta", "write_strength", "initial_state") if x[k] is not None]
    want = torch.autograd.grad((o * do.double()).sum() + (fin * dht.double()).sum(), [leaves[k] for k in order])
    ref_cases[tag] = (x, do.to(BF), dht, cu, want)
    if args.old:
        check(tag + " sequential", grad_names(x), bwd(gated_delta_prefill_bwd, x, do.to(BF), dht, cu, D ** -0.5),
              want, 2e-2)
print(f"[references took {time.time() - t_start:.0f}s]", flush=True)

# ------------------------------------------------------------------------------ 2. timed shapes, variants
SHAPES = {
    "B8-T4096-H16": (8, 4096, None),
    "varlen8-32k-H16": (1, 32768, (1000, 7000, 3000, 5000, 2000, 6000, 4000, 4768)),
}
if args.smoke:
    SHAPES = {"smoke-B2-T40-H16": (2, 40, None), "smoke-varlen": (1, 50, (20, 1, 29))}
S16 = {"states_16bit": True, "split_state": False}
NOW = {**S16, "w_from_t": True}
SCAN4 = {"warps_scan": 4, "stages_scan": 1}
KS2 = {"K_SPLIT": 2, "warps_dqkwg": 4}
VARIANTS = {
    "default": {},
    "s16": S16,
    "s16 scan4": {**S16, **SCAN4},
    "s16 noW": NOW,
    "s16 noW scan4": {**NOW, **SCAN4},
    "s16 noW scan4 ks2": {**NOW, **SCAN4, **KS2},
    "s16 noW scan4 ks2 bv64 s1": {**NOW, **SCAN4, **KS2, "BLOCK_V_DQ": 64, "stages_dqkwg": 1},
    "s16 noW scan4 ks2w8 bv64": {**NOW, **SCAN4, "K_SPLIT": 2, "BLOCK_V_DQ": 64},
    "s16 noW scan4 ks2w8 bv64 s1": {**NOW, **SCAN4, "K_SPLIT": 2, "BLOCK_V_DQ": 64, "stages_dqkwg": 1},
    "s16 noW scan4bv32s2 ks2": {**NOW, **KS2, "warps_scan": 4, "stages_scan": 2, "BLOCK_V_SCAN": 32},
    "s16 noW scan4 ks2 wy4 bv64 s1": {**NOW, **SCAN4, **KS2, "BLOCK_V_DQ": 32, "warps_wy": 4, "stages_wy": 1,
                                      "BLOCK_V_CHUNK": 64},
    "s16 noW scan4 ks2 wy8 s1": {**NOW, **SCAN4, **KS2, "stages_wy": 1},
}
if args.variants:
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in args.variants.split(",")}
timed = {}
for tag, (B, T, lens) in SHAPES.items():
    x = inputs(B, T, 16, 16, D, D, seed=2)
    do = torch.randn(B, T, 16, D, device=dev).to(BF)
    cu = cu_of(lens)
    with torch.no_grad():
        t_fwd = bench(functools.partial(gated_delta_prefill, x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=cu))
    timed[tag] = (x, do, cu, t_fwd)
    results["shapes"][tag] = {"fwd_ms": t_fwd}
    if args.old:
        results["shapes"][tag]["sequential_bwd_ms"] = bench(
            functools.partial(bwd, gated_delta_prefill_bwd, x, do, None, cu, D ** -0.5), rep=300)

orig_plan = pbc._plan
table = []
for name, over in VARIANTS.items():
    pbc._plan = lambda K, V, over=over: orig_plan(K, V)._replace(**over)
    row = {"overrides": over}
    try:
        worst = 0.0
        for tag, (x, do, dht, cu, want) in ref_cases.items():
            got = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, dht, cu, D ** -0.5)
            worst = max(worst, *check(f"{name} | {tag}", grad_names(x), got, want, 2e-2))
        row["worst_rel_l2"] = worst
        for tag, (x, do, cu, t_fwd) in timed.items():
            run = functools.partial(bwd, pbc.gated_delta_prefill_bwd_chunked, x, do, None, cu, D ** -0.5)
            t = bench(run)
            per = prof(run)
            row[tag] = {"ms": t, "over_fwd": t / t_fwd, "kernels_us": per}
            print(f"== {name} {tag}: {t:.3f} ms = {t / t_fwd:.2f}x fwd ({t_fwd:.3f} ms)", flush=True)
            print_prof(name, per)
        table.append((name, worst, *[row[tag]["ms"] for tag in timed]))
    except Exception as e:  # a variant that fails to compile or run is reported, the others still run
        line = f"FAIL variant {name}: {e!r:.300}"
        print(line, flush=True)
        fails.append(line)
        row["error"] = repr(e)[:300]
    finally:
        pbc._plan = orig_plan
    results["variants"][name] = row

results["fails"] = fails
with open(args.out, "w") as f:
    json.dump(results, f, indent=1, default=str)
fwd_cols = "  ".join(f"{tag} fwd {v[3]:.3f} ms" for tag, v in timed.items())
print(f"\nbackward variants (ms; {fwd_cols})")
print(f"{'variant':34s} {'worst err':>9s} " + " ".join(f"{tag:>16s}" for tag in timed))
for name, worst, *ts in table:
    print(f"{name:34s} {worst:9.2e} " + " ".join(f"{t:9.3f} ({t / v[3]:4.2f}x)" for t, v in zip(ts, timed.values())))
print(f"{len(fails)} FAIL line(s)" if fails else "all checks ok")
