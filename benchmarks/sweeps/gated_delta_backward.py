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
import kernelworks.ops.gated_delta.prefill_chunked as pc
from kernelworks.bench.timing import kernel_times_us
from kernelworks.ops.gated_delta import reference
from kernelworks.ops.gated_delta.api import gated_delta_prefill
from kernelworks.ops.gated_delta.prefill_bwd import gated_delta_prefill_bwd
from kernelworks.ops.gated_delta.prefill_chunked import chunked_prefill_fwd
from kernelworks.runtime import replay

# The plans are swapped under the ops' feet: a replayed call would repeat the first variant's launches.
replay.set_enabled(False)

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
SHAPES = {  # (B, T, sequence lengths, with initial state + final-state gradient)
    "B8-T4096-H16": (8, 4096, None, False),
    "varlen8-32k-H16": (1, 32768, (1000, 7000, 3000, 5000, 2000, 6000, 4000, 4768), False),
    "B8-T4096-H16-h0-dht": (8, 4096, None, True),  # d initial_state stored too (the scan's 4 warps spill)
}
if args.smoke:
    SHAPES = {"smoke-B2-T40-H16": (2, 40, None, False), "smoke-varlen": (1, 50, (20, 1, 29), False),
              "smoke-h0-dht": (2, 40, None, True)}
PREVIOUS = {"BLOCK_V_SCAN": 64, "BLOCK_V_CHUNK": 32, "warps_scan": 8, "stages_scan": 1, "warps_dqkwg": 8,
            "stages_dqkwg": 2, "warps_wy": 8, "stages_wy": 2, "K_SPLIT": 1, "BLOCK_V_DQ": 0, "states_16bit": False,
            "split_state": True, "w_from_t": False, "dk_16bit": False}
FORWARD_T = "default + forward T"
RECOMPUTE = "recompute"  # a variant's key for overrides of the forward plan its recompute runs
VARIANTS = {  # overrides of the default plan (prefill_bwd_chunked._plan)
    "default": {},
    FORWARD_T: {},  # the public path: the forward's chunk inverses passed in (no chunk-inverse kernel)
    "previous default: fp32 states 8 warps": PREVIOUS,
    "dk fp32": {"dk_16bit": False},
    "scan bv32 s2": {"BLOCK_V_SCAN": 32, "stages_scan": 2},
    "dq bv32 s2": {"BLOCK_V_DQ": 32, "stages_dqkwg": 2},
    "dq whole K 8 warps": {"K_SPLIT": 1, "warps_dqkwg": 8, "BLOCK_V_DQ": 32, "stages_dqkwg": 2},
    "wy s2": {"stages_wy": 2},
    "scan s2": {"stages_scan": 2},
    "recompute bv32": {RECOMPUTE: {"BLOCK_V": 32}},
    "recompute s3": {RECOMPUTE: {"stages_scan": 3}},
}
if args.variants:
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in args.variants.split(",")}
timed = {}
for tag, (B, T, lens, states) in SHAPES.items():
    n = len(lens) if lens else B
    x = inputs(B, T, 16, 16, D, D, seed=2, n_h0=n if states else 0)
    do = torch.randn(B, T, 16, D, device=dev).to(BF)
    dht = torch.randn(n, 16, D, D, device=dev) if states else None
    cu = cu_of(lens)
    with torch.no_grad():
        t_fwd = bench(functools.partial(gated_delta_prefill, x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=cu,
                                        initial_state=x["initial_state"], output_final_state=states))
    _, _, saved = chunked_prefill_fwd(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=D ** -0.5,
                                      initial_state=x["initial_state"], output_final_state=False, cu_seqlens=cu,
                                      chunk_size=16 if args.smoke else 64)
    timed[tag] = (x, do, dht, cu, t_fwd, (saved["T"], saved["G"]))
    del saved
    results["shapes"][tag] = {"fwd_ms": t_fwd}
    if args.old:
        results["shapes"][tag]["sequential_bwd_ms"] = bench(
            functools.partial(bwd, gated_delta_prefill_bwd, x, do, dht, cu, D ** -0.5), rep=300)

orig_plan, orig_fwd_plan = pbc._plan, pc._plan
table = []
for name, over in VARIANTS.items():
    mine = {k: v for k, v in over.items() if k != RECOMPUTE}
    pbc._plan = lambda K, V, mine=mine: orig_plan(K, V)._replace(**mine)
    fwd_over = over.get(RECOMPUTE, {})
    pc._plan = lambda c, K, V, fp32, fused, o=fwd_over: orig_fwd_plan(c, K, V, fp32, fused)._replace(
        **({} if fused else o))
    row = {"overrides": over}
    try:
        worst = 0.0
        for tag, (x, do, dht, cu, want) in ref_cases.items():
            got = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, dht, cu, D ** -0.5)
            worst = max(worst, *check(f"{name} | {tag}", grad_names(x), got, want, 2e-2))
        row["worst_rel_l2"] = worst
        for tag, (x, do, dht, cu, t_fwd, inverses) in timed.items():
            extra = {"inverses": inverses} if name == FORWARD_T else {}
            run = functools.partial(bwd, pbc.gated_delta_prefill_bwd_chunked, x, do, dht, cu, D ** -0.5, **extra)
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
        pbc._plan, pc._plan = orig_plan, orig_fwd_plan
    results["variants"][name] = row

results["fails"] = fails
with open(args.out, "w") as f:
    json.dump(results, f, indent=1, default=str)
fwd_cols = "  ".join(f"{tag} fwd {v[4]:.3f} ms" for tag, v in timed.items())
print(f"\nbackward variants (ms; {fwd_cols})")
print(f"{'variant':40s} {'worst err':>9s} " + " ".join(f"{tag:>16s}" for tag in timed))
for name, worst, *ts in table:
    print(f"{name:40s} {worst:9.2e} " + " ".join(f"{t:9.3f} ({t / v[4]:4.2f}x)" for t, v in zip(ts, timed.values())))
print(f"{len(fails)} FAIL line(s)" if fails else "all checks ok")
