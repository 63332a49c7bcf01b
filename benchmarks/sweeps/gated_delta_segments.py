"""Gated DeltaNet prefill forward, segment-parallel scan (prefill_chunked.segmented_prefill_fwd): for batches
that leave SM slots idle, the time against the number of segments (1 = the plain fused forward), with
fla's chunk_gated_delta_rule in the same run where installed; each segmented result checked against the
plain forward (bar 5e-3 relative L2, o and final state). A table last; --smoke runs the interpreter.

    PYTHONPATH=src python benchmarks/sweeps/gated_delta_segments.py --out gdn_segments.json
"""
import argparse
import functools
import json
import os
import sys
import time

if "--smoke" in sys.argv:  # before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
from torch.nn import functional

from kernelworks.ops.gated_delta.prefill_chunked import chunked_prefill_fwd, prefill_segments, segmented_prefill_fwd

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
ap.add_argument("--smoke", action="store_true", help="CPU interpreter dry run: tiny shapes, fp16, head dim 16")
args = ap.parse_args()
dev, DT = ("cpu", torch.float16) if args.smoke else ("cuda", torch.bfloat16)
D = 16 if args.smoke else 128
SHAPES = {  # (B, T, H_qk, H_v)
    "B1-T8192-H16": (1, 8192, 16, 16),
    "B1-T16384-H16": (1, 16384, 16, 16),
    "B1-T32768-H16": (1, 32768, 16, 16),
    "B1-T65536-H16": (1, 65536, 16, 16),
    "B1-T32768-H32(qk16)": (1, 32768, 16, 32),
    "B2-T16384-H16": (2, 16384, 16, 16),
    "B4-T8192-H16": (4, 8192, 16, 16),
}
COUNTS = (1, 2, 4, 8, 16)
if args.smoke:
    SHAPES = {"smoke-B1-T96-H2": (1, 96, 1, 2)}
    COUNTS = (1, 3)
try:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
except ImportError:
    chunk_gated_delta_rule = None


def bench(fn):
    if args.smoke:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


results = {"device": "cpu-smoke" if args.smoke else torch.cuda.get_device_name(), "shapes": {}}
fails = []
table = []
for tag, (B, T, hq, hv) in SHAPES.items():
    torch.manual_seed(0)
    q = torch.randn(B, T, hq, D, device=dev).to(DT)
    k = functional.normalize(torch.randn(B, T, hq, D, device=dev), dim=-1).to(DT)
    v = torch.randn(B, T, hv, D, device=dev).to(DT)
    g = functional.logsigmoid(torch.randn(B, T, hv, device=dev) + 2.0)
    beta = torch.rand(B, T, hv, device=dev)
    kw = {"scale": D ** -0.5, "initial_state": None, "output_final_state": True,
          "chunk_size": 16 if args.smoke else 64}
    with torch.no_grad():
        o0, f0, _ = chunked_prefill_fwd(q, k, v, g, beta, cu_seqlens=None, **kw)
        row = {"chosen": prefill_segments(B, T, hv, D, torch.device(dev)), "ms": {}}
        for n in COUNTS:
            if n == 1:
                fn = functools.partial(chunked_prefill_fwd, q, k, v, g, beta, cu_seqlens=None, **kw)
            else:
                fn = functools.partial(segmented_prefill_fwd, q, k, v, g, beta, n_segments=n, **kw)
                o, f, _ = fn()
                for name, a, b in (("o", o, o0), ("final", f, f0)):
                    e = rel(a, b)
                    if not (e <= 5e-3):
                        fails.append(f"FAIL {tag} n={n} {name} rel {e:.2e}")
                        print(fails[-1], flush=True)
            row["ms"][n] = bench(fn)
        if row["chosen"] not in row["ms"]:
            row["ms_chosen"] = bench(functools.partial(segmented_prefill_fwd, q, k, v, g, beta,
                                                       n_segments=row["chosen"], **kw))
        if chunk_gated_delta_rule is not None and not args.smoke:
            fla = functools.partial(chunk_gated_delta_rule, q, k, v, g, beta, scale=D ** -0.5,
                                    output_final_state=True)
            row["fla_ms"] = bench(fla)
    results["shapes"][tag] = row
    print(tag, row, flush=True)
    table.append((tag, row))

results["fails"] = fails
with open(args.out, "w") as f:
    json.dump(results, f, indent=1)
print(f"\nforward ms by segment count ({results['device']}; * = prefill_segments' choice)")
print(f"{'shape':22s} " + " ".join(f"{n:>8d}" for n in COUNTS) + f" {'fla':>8s}  best/plain")
for tag, row in table:
    cells = " ".join(f"{row['ms'][n]:7.3f}{'*' if n == row['chosen'] else ' '}" for n in COUNTS)
    best = min(row["ms"].values())
    extra = f"  (chosen {row['chosen']}: {row['ms_chosen']:.3f})" if "ms_chosen" in row else ""
    print(f"{tag:22s} {cells} {row.get('fla_ms', float('nan')):8.3f}  {row['ms'][1] / best:5.2f}x{extra}")
print(f"{len(fails)} FAIL line(s)" if fails else "all checks ok")
