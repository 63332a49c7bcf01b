"""Gated DeltaNet prefill backward on the GPU: our forward, the NEW chunk-parallel backward
(prefill_bwd_chunked.py), the OLD sequential backward (prefill_bwd.py), per-kernel profiles, a few plan
variants of the new one, and correctness (new vs old per gradient at every timed shape; new vs a float64
autograd reference at B1 T512 H2 and a small varlen case). Prints FAIL lines; a table last.

    PYTHONPATH=src python benchmarks/sweeps/gated_delta_backward.py --out gdn_bwd.json
"""
import argparse
import functools
import json
import time

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
ap.add_argument("--no-old", action="store_true", help="skip timing the old backward")
ap.add_argument("--smoke", action="store_true", help="CPU interpreter dry run: tiny shapes, fp16, head dim 16")
args = ap.parse_args()
if args.smoke:
    import kernelworks  # noqa: F401  (sets the interpreter)
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
    "ref-B1-T512-H2(hq1)-h0-dht-write": (1, 512, 1, 2, None, True),
    "ref-varlen(37,200,63,1)-H2-h0-dht": (1, 301, 2, 2, (37, 200, 63, 1), False),
}
if args.smoke:
    REFS = {"ref-smoke-T40": (1, 40, 1, 2, None, True), "ref-smoke-varlen": (1, 30, 2, 2, (7, 22, 1), False)}
for tag, (B, T, hq, hv, lens, write) in REFS.items():
    cu = cu_of(lens)
    n = len(lens) if lens else B
    x = inputs(B, T, hq, hv, D, D, write=write, n_h0=n, seed=1)
    do = torch.randn(B, T, hv, D, device=dev)
    dht = torch.randn(n, hv, D, D, device=dev)
    got = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do.to(BF), dht, cu, D ** -0.5)
    got_rt = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do.to(BF), dht, cu, D ** -0.5, reuse_T=False)
    old = bwd(gated_delta_prefill_bwd, x, do.to(BF), dht, cu, D ** -0.5)
    leaves = {k: (t.double().requires_grad_(True) if t is not None else None) for k, t in x.items()}
    o, fin = reference.gated_delta_rule(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"],
                                        initial_state=leaves["initial_state"], output_final_state=True,
                                        cu_seqlens=cu, scale=D ** -0.5, write_strength=leaves["write_strength"])
    order = [k for k in ("q", "k", "v", "g", "beta", "write_strength", "initial_state") if x[k] is not None]
    want = torch.autograd.grad((o * do.double()).sum() + (fin * dht.double()).sum(), [leaves[k] for k in order])
    names = grad_names(x)
    check(tag + " new", names, got, want, 2e-2)
    check(tag + " new(T recomputed)", names, got_rt, want, 2e-2)
    check(tag + " old", names, old, want, 2e-2)
print(f"[references took {time.time() - t_start:.0f}s]", flush=True)

# ------------------------------------------------------------------------------ 2. timed shapes
SHAPES = {
    "B8-T4096-H16": (8, 4096, None),
    "B8-T1024-H16": (8, 1024, None),
    "varlen8-32k-H16": (1, 32768, (1000, 7000, 3000, 5000, 2000, 6000, 4000, 4768)),
}
if args.smoke:
    SHAPES = {"smoke-B2-T40-H16": (2, 40, None), "smoke-varlen": (1, 50, (20, 1, 29))}
table = []
for tag, (B, T, lens) in SHAPES.items():
    cu = cu_of(lens)
    x = inputs(B, T, 16, 16, D, D, seed=2)
    do = torch.randn(B, T, 16, D, device=dev).to(BF)
    scale = D ** -0.5
    run_fwd = functools.partial(gated_delta_prefill, x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=cu)
    run_new = functools.partial(bwd, pbc.gated_delta_prefill_bwd_chunked, x, do, None, cu, scale)
    run_old = functools.partial(bwd, gated_delta_prefill_bwd, x, do, None, cu, scale)
    with torch.no_grad():
        t_fwd = bench(run_fwd)
    t_new = bench(run_new)
    new, old = run_new(), run_old()
    check(tag + " new vs old", grad_names(x), new, old, 2e-2)
    t_old = float("nan") if args.no_old else bench(run_old, rep=300)
    p_new = prof(run_new)
    p_old = {} if args.no_old else prof(run_old, iters=2)
    print(f"== {tag}: fwd {t_fwd:.3f} ms, new bwd {t_new:.3f} ms ({t_new / t_fwd:.2f}x fwd), "
          f"old bwd {t_old:.3f} ms", flush=True)
    print_prof("new bwd", p_new)
    print_prof("old bwd", p_old)
    results["shapes"][tag] = {"fwd_ms": t_fwd, "new_bwd_ms": t_new, "old_bwd_ms": t_old,
                              "new_over_fwd": t_new / t_fwd, "new_kernels_us": p_new, "old_kernels_us": p_old}
    table.append((tag, t_fwd, t_new, t_old))
    del new, old
    torch.cuda.empty_cache()

# ------------------------------------------------------------------------------ 3. plan variants (main shape)
B, T = (1, 40) if args.smoke else (8, 4096)
x = inputs(B, T, 16, 16, D, D, seed=2)
do = torch.randn(B, T, 16, D, device=dev).to(BF)
ref_new = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, None, None, D ** -0.5)
orig_plan = pbc._plan
VARIANTS = {
    "default": {},
    "scan bv32 w8 s1": {"BLOCK_V_SCAN": 32},
    "scan bv32 w4 s2": {"BLOCK_V_SCAN": 32, "warps_scan": 4, "stages_scan": 2},
    "chunk kernels s1": {"stages_dqkwg": 1, "stages_wy": 1},
}
for name, over in VARIANTS.items():
    pbc._plan = lambda K, V, over=over: orig_plan(K, V)._replace(**over)
    try:
        got = bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, None, None, D ** -0.5)
        check(f"variant {name} vs default", grad_names(x), got, ref_new, 1e-3)
        t = bench(lambda: bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, None, None, D ** -0.5))
        per = prof(lambda: bwd(pbc.gated_delta_prefill_bwd_chunked, x, do, None, None, D ** -0.5))
        mine = {k: v for k, v in per.items() if any(s in k for s in ("_dh_scan", "_dqkwg", "_wy_bwd"))}
        results["variants"][name] = {"ms": t, "kernels_us": mine}
        print(f"   variant {name:20s} {t:.3f} ms  " + "  ".join(f"{k.split('(')[0][:16]} {v:.0f}"
                                                             for k, v in mine.items()), flush=True)
    except Exception as e:
        line = f"FAIL variant {name}: {e!r:.300}"
        print(line)
        fails.append(line)
    finally:
        pbc._plan = orig_plan

results["fails"] = fails
with open(args.out, "w") as f:
    json.dump(results, f, indent=1, default=str)
print("\nshape               fwd ms   new bwd ms  (x fwd)   old bwd ms")
for tag, a, b, c in table:
    print(f"{tag:18s} {a:8.3f} {b:11.3f}  ({b / a:4.2f}x) {c:11.3f}")
print(f"{len(fails)} FAIL line(s)" if fails else "all checks ok")
