"""Sweep the cross-entropy forward kernel's launch plan (tile, warps) on the GPU, one shape at a time.

    python benchmarks/sweeps/cross_entropy_plan.py [--out results.json]

Times ``kernels.cross_entropy_fwd`` (loss + gradient, the training forward) with each candidate plan forced,
on the same inputs, with the bench's timing (L2 flushed, host kept ahead); prints GB/s over the fewest bytes
(one read and one write of the logits) and the best plan per shape. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import functools
import json

import torch

from kernelworks.bench.timing import time_fn
from kernelworks.ops.cross_entropy import kernels

CANDIDATES = {
    32000: [{"TILE": 32768, "ONE_TILE": True, "num_warps": w} for w in (8, 16, 32)]
    + [{"TILE": t, "ONE_TILE": False, "num_warps": w} for t, w in ((8192, 16), (16384, 32))],
    128256: [{"TILE": t, "ONE_TILE": False, "num_warps": w} for t, w in ((4096, 8), (8192, 16), (8192, 32),
                                                                         (16384, 16), (16384, 32))],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args()
    results = []
    for n_cols, plans in CANDIDATES.items():
        torch.manual_seed(0)
        x = torch.randn(args.rows, n_cols, device="cuda", dtype=torch.bfloat16)
        target = torch.randint(0, n_cols, (args.rows,), device="cuda")
        dx = torch.empty_like(x)
        loss = torch.empty(args.rows, device="cuda", dtype=torch.float32)
        scale = torch.full((1,), 1.0 / args.rows, device="cuda")
        reference = None
        for opts in plans:
            original = kernels.plan
            kernels.plan = lambda n, softcap=False, _o=opts: dict(_o)
            try:
                call = functools.partial(kernels.cross_entropy_fwd, x, target, loss, scale, dx, ignore_index=-100,
                                         label_smoothing=0.0, z_loss=0.0, softcap=None)
                call()
                torch.cuda.synchronize()
                if reference is None:
                    reference = dx.clone()
                ok = torch.allclose(dx.float(), reference.float(), atol=1e-6, rtol=1e-3)
                t = time_fn(call)
            finally:
                kernels.plan = original
            gbs = 2 * x.numel() * x.element_size() / (t.median_ms * 1e-3) / 1e9
            results.append({"cols": n_cols, **opts, "median_us": t.median_ms * 1e3, "gbs": gbs, "agrees": ok})
            print(f"{n_cols:7d} {opts}  {t.median_ms * 1e3:8.1f} µs  {gbs:6.0f} GB/s  agrees={ok}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": args.rows, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
