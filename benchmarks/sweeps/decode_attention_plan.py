"""GPU sweep of decode_attention plan variants on the spec's bench cases (+ page 64 / 256 variants of the
quick case). Every variant is checked against SDPA on the dense cache (fp32 math) before it is timed; a
wrong variant prints a FAIL line and is not timed. Times: kernelworks.bench.timing.time_fn (L2 flushed,
host overhead kept out). GB/s on the KV bytes (+ q, o) as the spec's cost. Table printed last. (Earlier
runs also timed the first kernel, since removed: ``benchmarks/results/h100-80gb-hbm3/sweeps/attn_decode_sweep.txt``.)

    PYTHONPATH=src python benchmarks/sweeps/decode_attention_plan.py --out decode_sweep.json
"""
from __future__ import annotations

import argparse
import json
import time

import torch

import kernelworks  # noqa: F401
from kernelworks.bench.timing import time_fn
from kernelworks.ops.attention import decode
from kernelworks.ops.attention.api import decode_attention
from kernelworks.ops.attention.spec import DECODE_ATTENTION_SPEC as SPEC
from kernelworks.runtime.device import sm_count
from kernelworks.runtime.launch import cdiv
from kernelworks.spec import case as mkcase

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--rep-ms", type=float, default=40.0)
ap.add_argument("--cases", default="", help="comma-separated case-name substrings (default: all)")
args = ap.parse_args()

dev = torch.device("cuda")
SMS = sm_count(0)
t_start = time.time()


def old_splits(batch, hkv, capacity):
    """The first plan's split rule (~4 programs per SM, >= 512 keys, <= 64)."""
    want = max(1, cdiv(4 * SMS, batch * hkv))
    s = max(1, min(want, 64, cdiv(capacity, 512)))
    chunk = cdiv(cdiv(capacity, s), 64) * 64
    return cdiv(capacity, chunk)


def model_splits(batch, hkv, capacity, bn, warps, stages):
    """The plan model's split count for another (BLOCK_N, warps, stages) (its own slots per SM)."""
    ctas = decode.CTAS_PER_SM.get((bn, warps, stages), 1)
    blocks = cdiv(capacity, bn)
    return decode._best_splits(batch * hkv, blocks, SMS * ctas,
                               max(1, min(decode.MAX_SPLITS, capacity // decode.MIN_SPLIT_TOKENS)))


def variants(batch, hkv, capacity, default):
    s0 = default.n_splits
    out = [
        ("default", {}),
        ("n64w4s3/old-splits", dict(BLOCK_N=64, num_warps=4, num_stages=3, splits=old_splits(batch, hkv, capacity))),
        ("n64w4s3/2x-splits", dict(BLOCK_N=64, num_warps=4, num_stages=3, splits=2 * s0)),
        ("n64w4s4", dict(BLOCK_N=64, num_warps=4, num_stages=4,
                         splits=model_splits(batch, hkv, capacity, 64, 4, 4))),
        ("n32w4s4", dict(BLOCK_N=32, num_warps=4, num_stages=4,
                         splits=model_splits(batch, hkv, capacity, 32, 4, 4))),
        ("n128w8s3", dict(BLOCK_N=128, num_warps=8, num_stages=3,
                          splits=model_splits(batch, hkv, capacity, 128, 8, 3))),
    ]
    return out


cases = list(SPEC.bench_cases)
quick = next(c for c in cases if c.name == "b8-ctx32k-gqa4")
extra = []
for page in (64, 256):
    params = {k: v for k, v in quick.params.items() if k not in ("page", "dense")}
    extra.append(mkcase(f"b8-ctx32k-gqa4-p{page}", quick.dtype, page=page, dense=False, tags=("gpu",), **params))
if args.cases:
    keys = args.cases.split(",")
    cases = [c for c in cases if any(k in c.name for k in keys)]
    extra = [c for c in extra if any(k in c.name for k in keys)]

rows, records = [], []


def reference_out(inp, dense_k, dense_v):
    q = inp["q"]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.float()[:, :, None], dense_k.float(), dense_v.float(), enable_gqa=q.shape[1] != dense_k.shape[1])
    return o[:, :, 0]


for c in cases + extra:
    torch.manual_seed(0)
    inp = SPEC.inputs(c, dev)
    cost = SPEC.cost(c, "fwd")
    kd, vd = inp.pop("k_dense", None), inp.pop("v_dense", None)
    if kd is None:
        kd, vd = (SPEC.inputs.__globals__["_dense_cache"](t, inp["block_table"], list(c["ctx"]))
                  for t in (inp["k_cache"], inp["v_cache"]))
    ref = reference_out(inp, kd, vd)
    batch, hkv = len(c["ctx"]), c["hkv"]
    capacity = inp["block_table"].shape[1] * c["page"]
    rows_ = c["hq"] // hkv
    default = decode.resolve_plan(batch, hkv, rows_, capacity, c["d"], SMS, 2)
    call_args = (inp["q"], inp["k_cache"], inp["v_cache"], inp["block_table"], inp["context_lens"])
    points = variants(batch, hkv, capacity, default) if "-p" not in c.name else \
        [v for v in variants(batch, hkv, capacity, default) if v[0] in ("n64w4s3/old-splits", "default")]
    for vname, knobs in points:
        with decode.forced_plan(**knobs):
            plan = decode.resolve_plan(batch, hkv, rows_, capacity, c["d"], SMS, 2)
            try:
                o = decode_attention(*call_args, check_indices=False)
                torch.cuda.synchronize()
                err = (o.float() - ref).abs().max().item()
                ok = err < 2e-2 and bool(torch.isfinite(o).all())
                if not ok:
                    print(f"FAIL {c.name} {vname}: max abs err {err:.3g}", flush=True)
                    records.append(dict(case=c.name, variant=vname, status="FAIL", err=err))
                    continue
                t = time_fn(lambda a=call_args: decode_attention(*a, check_indices=False), rep_ms=args.rep_ms)
            except Exception as e:  # a variant that fails to compile or launch is reported, the rest go on
                print(f"FAIL {c.name} {vname}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                records.append(dict(case=c.name, variant=vname, status=f"error: {type(e).__name__}"))
                continue
        gbs = cost.bytes / (t.median_ms * 1e-3) / 1e9
        rec = dict(case=c.name, variant=vname, status="ok", err=err, median_ms=t.median_ms, p20_ms=t.p20_ms,
                   p80_ms=t.p80_ms, gbs=gbs, splits=plan.n_splits, chunk=plan.chunk, BLOCK_N=plan.BLOCK_N,
                   num_warps=plan.num_warps, num_stages=plan.num_stages, programs=plan.n_splits * batch * hkv)
        records.append(rec)
        print(f"{c.name:24s} {vname:20s} {t.median_ms * 1e3:8.1f} us {gbs:7.0f} GB/s  splits {plan.n_splits:3d} "
              f"progs {rec['programs']:5d}  err {err:.2e}", flush=True)
    if "-p" not in c.name:
        q = inp["q"]
        def sd(q=q, kd=kd, vd=vd):
            return torch.nn.functional.scaled_dot_product_attention(q[:, :, None], kd, vd, enable_gqa=True)

        o = sd()[:, :, 0]
        err = (o.float() - ref).abs().max().item()
        t = time_fn(sd, rep_ms=args.rep_ms)
        gbs = cost.bytes / (t.median_ms * 1e-3) / 1e9
        records.append(dict(case=c.name, variant="sdpa-dense", status="ok", err=err, median_ms=t.median_ms, gbs=gbs))
        print(f"{c.name:24s} {'sdpa-dense':20s} {t.median_ms * 1e3:8.1f} us {gbs:7.0f} GB/s  err {err:.2e}", flush=True)
    inp = kd = vd = ref = None
    torch.cuda.empty_cache()

env = dict(gpu=torch.cuda.get_device_name(), sms=SMS, torch=torch.__version__,
           triton=__import__("triton").__version__, wall_s=time.time() - t_start)
with open(args.out, "w") as f:
    json.dump(dict(env=env, records=records), f, indent=1)

# table: per case, each variant's time, GB/s and ratio to SDPA / to the default plan
print(f"\n== decode sweep on {env['gpu']} ({SMS} SMs), {env['wall_s']:.0f} s ==")
print(f"{'case':24s} {'variant':20s} {'us':>8s} {'GB/s':>7s} {'xSDPA':>6s} {'xdefault':>8s} {'splits':>6s} "
      f"{'progs':>6s}")
by_case: dict[str, list] = {}
for r in records:
    by_case.setdefault(r["case"], []).append(r)
for name, rs in by_case.items():
    sdpa = next((r["median_ms"] for r in rs if r["variant"] == "sdpa-dense"), None)
    dflt = next((r["median_ms"] for r in rs if r["variant"] == "default" and r["status"] == "ok"), None)
    for r in rs:
        if r["status"] != "ok":
            print(f"{name:24s} {r['variant']:20s} {r['status']}")
            continue
        xs = f"{sdpa / r['median_ms']:6.2f}" if sdpa else "     -"
        xl = f"{dflt / r['median_ms']:8.2f}" if dflt else "       -"
        print(f"{name:24s} {r['variant']:20s} {r['median_ms'] * 1e3:8.1f} {r['gbs']:7.0f} {xs} {xl} "
              f"{r.get('splits', '-'):>6} {r.get('programs', '-'):>6}")
