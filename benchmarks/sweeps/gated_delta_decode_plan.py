"""Sweep the Gated DeltaNet decode kernel's launch plan (V rows per program, warps) on the GPU.

    python benchmarks/sweeps/gated_delta_decode_plan.py [--out results.json]

Forces each candidate ``(BLOCK_V, num_warps)`` on Qwen3-Next's decode shape (H_v 32, H_qk 16, K = V = 128,
bf16 q/k/v, fp32 state, l2-normalised q/k) at several batch sizes, updating a pool in place, and reports
the state bandwidth (read + write) with the bench's timing. Outputs are checked against the default plan.
"""

from __future__ import annotations

import argparse
import json

import torch

from kernelworks.bench.timing import time_fn
from kernelworks.ops.gated_delta import decode
from kernelworks.ops.gated_delta.api import gated_delta_decode

BATCHES = (1, 8, 64, 256)
PLANS = [(bv, w) for bv in (8, 16, 32, 64) for w in (1, 2, 4, 8) if bv * 128 // (w * 32) <= 128]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args()
    results = []
    for batch in BATCHES:
        torch.manual_seed(0)
        dev, hq, hv, d = "cuda", 16, 32, 128
        q = torch.randn(batch, hq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, hq, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, hv, d, device=dev, dtype=torch.bfloat16)
        g = -torch.rand(batch, hv, device=dev) * 0.1
        beta = torch.rand(batch, hv, device=dev)
        pool = torch.randn(batch, hv, d, d, device=dev) * 0.1
        state_bytes = 2 * pool.numel() * 4
        ref_pool = pool.clone()
        ref_o = gated_delta_decode(q, k, v, g, beta, ref_pool, use_qk_l2norm=True)
        for block_v, warps in PLANS:
            original = decode._plan
            decode._plan = lambda *a, _p=(d, block_v, warps): _p
            try:
                work = pool.clone()
                o = gated_delta_decode(q, k, v, g, beta, work, use_qk_l2norm=True)
                ok = bool(torch.allclose(o.float(), ref_o.float(), atol=2e-2, rtol=2e-2)
                          and torch.allclose(work, ref_pool, atol=1e-4, rtol=1e-4))
                scratch = pool.clone()  # timed updates in place: keep ``pool`` the inputs of every check
                t = time_fn(lambda: gated_delta_decode(q, k, v, g, beta, scratch, use_qk_l2norm=True),  # noqa: B023
                            warmup_ms=10, rep_ms=40)
            finally:
                decode._plan = original
            gbs = state_bytes / (t.median_ms * 1e-3) / 1e9
            results.append({"batch": batch, "BLOCK_V": block_v, "num_warps": warps, "median_us": t.median_ms * 1e3,
                            "state_gbs": gbs, "agrees": ok})
            print(f"batch {batch:4d} BLOCK_V {block_v:3d} warps {warps}  {t.median_ms * 1e3:8.1f} µs  "
                  f"{gbs:6.0f} GB/s  agrees={ok}", flush=True)
    for batch in BATCHES:
        best = max((r for r in results if r["batch"] == batch and r["agrees"]), key=lambda r: r["state_gbs"])
        print(f"best batch {batch}: BLOCK_V {best['BLOCK_V']} warps {best['num_warps']} "
              f"{best['state_gbs']:.0f} GB/s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
