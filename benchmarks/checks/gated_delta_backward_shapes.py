"""Which shapes does the chunk-parallel Gated DeltaNet backward get wrong on the GPU? New vs the sequential
backward, relative L2 per gradient, over head sizes, lengths, dtypes and plan variants (FAIL lines).

    python benchmarks/checks/gated_delta_backward_shapes.py [--out F.json]
    compute-sanitizer --tool memcheck python benchmarks/checks/gated_delta_backward_shapes.py --only sanitize

H100 (2026-11-21, results/h100-80gb-hbm3/sweeps/gdn_bwd_shapes.txt): wrong dk/dg with a 32-row scan block
whenever K ≠ 32 (K 16 V 32; K = V = 128 forced to 32 rows), right at every other size; memcheck clean. That
was the 8-warp plan; the 4-warp plan of 2026-11-22: ``gdn_bwd_shapes-2.txt``.
"""
import argparse
import json
import sys

import torch
from torch.nn import functional

from kernelworks.ops.gated_delta import prefill_bwd_chunked as pbc
from kernelworks.ops.gated_delta.prefill_bwd import gated_delta_prefill_bwd

ap = argparse.ArgumentParser()
ap.add_argument("--out")
ap.add_argument("--only", default="")
args = ap.parse_args()
rows = []
def run(B, T, hq, hv, K, V, dt, plan_over=None):
    torch.manual_seed(0)
    dev = "cuda"
    q = torch.randn(B, T, hq, K, device=dev).to(dt)
    k = functional.normalize(torch.randn(B, T, hq, K, device=dev), dim=-1).to(dt)
    v = torch.randn(B, T, hv, V, device=dev).to(dt)
    g = functional.logsigmoid(torch.randn(B, T, hv, device=dev) + 2.0)
    beta = torch.rand(B, T, hv, device=dev)
    h0 = torch.randn(B, hv, V, K, device=dev)
    do = torch.randn(B, T, hv, V, device=dev).to(dt)
    dht = torch.randn(B, hv, V, K, device=dev)
    a = dict(do=do, dht=dht, q=q, k=k, v=v, g=g, beta=beta, write_strength=None, initial_state=h0, cu_seqlens=None,
             scale=K ** -0.5, chunk_size=64, need_dh0=True)
    old = gated_delta_prefill_bwd(**a)
    orig = pbc._plan
    if plan_over:
        pbc._plan = lambda *x: orig(*x)._replace(**plan_over)
    try:
        new = pbc.gated_delta_prefill_bwd_chunked(**a)
        torch.cuda.synchronize()
    finally:
        pbc._plan = orig
    errs = {n: float((x.double() - y.double()).norm() / y.double().norm()) for n, x, y in
            zip(["dq", "dk", "dv", "dg", "dbeta", "dh0"], new, old)}
    bad = any(e > 2e-2 for e in errs.values())
    tag = f"B{B} T{T} hq{hq} hv{hv} K{K} V{V} {str(dt)[6:]} {plan_over or ''}"
    print(("FAIL " if bad else "ok   ") + tag + "  " + " ".join(f"{n} {e:.1e}" for n, e in errs.items()), flush=True)
    rows.append({"case": tag, "errs": errs})
if args.only == "sanitize":
    run(1, 128, 1, 2, 128, 128, torch.bfloat16, {"BLOCK_V_SCAN": 32})
    sys.exit(0)
for K, V in [(16, 32), (32, 32), (16, 16), (64, 64), (128, 128), (64, 128), (128, 64)]:
    for T in (40, 200):
        run(2, T, 1, 2, K, V, torch.float16)
run(2, 40, 1, 2, 16, 32, torch.bfloat16)
run(1, 40, 1, 1, 16, 32, torch.float16)
for over in ({"BLOCK_V_SCAN": 32}, {"stages_scan": 1}, {"warps_scan": 8, "stages_scan": 1},
             {"K_SPLIT": 1, "warps_dqkwg": 8}):
    run(2, 40, 1, 2, 16, 32, torch.float16, over)
    run(1, 200, 1, 2, 128, 128, torch.bfloat16, over)
if args.out:
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
