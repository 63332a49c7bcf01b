"""Grouped GEMM plans on the Qwen3-30B-A3B MoE layer's shapes (65536 rows = 8192 tokens × top 8, 128 experts,
a random router): the forward kernel's plans on all four products a training step runs (gate_up and down,
forward and dA) and the weight-gradient kernel's plans on its two. Each plan's result is checked against the
default plan's before it is timed (``time_fn``: events, L2 flushed, median).

``kw tune grouped_matmul --case qwen3-moe-e128-64k`` covers the forward's products; this script stays for what
the tuner cannot express yet: the dA products (the same kernel on the transposed weights, inside the backward)
and the weight-gradient kernel, neither of which has a backward config hook.

    python benchmarks/sweeps/grouped_moe_plans.py          # on a GPU; $OUT/grouped_sweep.json
    python benchmarks/sweeps/grouped_moe_plans.py          # without one: a dry run of the script, tiny shapes

Results: ``benchmarks/results/h100-80gb-hbm3/sweeps/grouped_moe_plans.{json,txt}`` (session 17).
"""
import json
import os
from collections.abc import Callable

import torch

import kernelworks as kw
from kernelworks.bench.timing import time_fn
from kernelworks.ops.gemm import grouped
from kernelworks.ops.gemm.forward import Plan, forced_plan
from kernelworks.runtime import replay

SMOKE = not torch.cuda.is_available()
"""No GPU: a dry run of the script itself on tiny shapes (the kernels in the interpreter), nothing timed."""
DEVICE = "cpu" if SMOKE else "cuda"
TOKENS, EXPERTS, TOP_K, HIDDEN, INNER = (64, 4, 2, 64, 32) if SMOKE else (8192, 128, 8, 2048, 768)
PAIRS = TOKENS * TOP_K

FORWARD_TILES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); the TMA kernel, FLATTEN on unless noted
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 128, 64, 4, 5),
    (64, 256, 64, 4, 4), (64, 128, 64, 4, 5), (128, 128, 128, 8, 3), (128, 192, 64, 8, 4), (256, 128, 64, 8, 3),
]
WGRAD_PLANS = [  # (BLOCK_K, BLOCK_N, BLOCK_R, warps, stages) of _grouped_wgrad_kernel
    (128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 32, 8, 4), (128, 128, 64, 4, 3), (128, 256, 64, 8, 3),
    (256, 128, 64, 8, 3), (128, 128, 128, 8, 2), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (128, 128, 32, 4, 5),
]


def _timed(fn: Callable[[], torch.Tensor], ref: torch.Tensor, flops: float) -> tuple[float | None, str]:
    """(µs, note) of ``fn`` after checking its result against ``ref`` (relative L2 under 1e-2)."""
    try:
        out = fn()
    except Exception as e:  # a plan that does not compile or launch is a row, not the end of the sweep
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    if err > 1e-2:
        return None, f"WRONG {err:.2e}"
    if SMOKE:
        return 0.0, "dry run"
    ms = time_fn(fn).median_ms
    return ms * 1e3, f"{flops / ms / 1e9:.0f} TF/s"


def main() -> None:
    torch.manual_seed(0)
    top_k_index = torch.rand(TOKENS, EXPERTS, device=DEVICE).argsort(-1)[:, :TOP_K]
    _, _, sizes = kw.moe_sort(top_k_index, EXPERTS)
    print("rows per expert: min", int(sizes.min()), "max", int(sizes.max()), flush=True)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, device=DEVICE) * scale).bfloat16()

    w_gate_up = randn(EXPERTS, 2 * INNER, HIDDEN, scale=HIDDEN ** -0.5)  # HF's layout [E, 2I, H]
    w_down = randn(EXPERTS, HIDDEN, INNER, scale=INNER ** -0.5)          # [E, H, I]
    x, h = randn(PAIRS, HIDDEN), randn(PAIRS, INNER)
    d_gate_up, d_down = randn(PAIRS, 2 * INNER), randn(PAIRS, HIDDEN)
    products = {  # name: (a, b as the op takes it, flops)
        "gate_up fwd": (x, w_gate_up.transpose(1, 2), 4 * PAIRS * HIDDEN * INNER),
        "down fwd": (h, w_down.transpose(1, 2), 2 * PAIRS * INNER * HIDDEN),
        "gate_up dA": (d_gate_up, w_gate_up, 4 * PAIRS * INNER * HIDDEN),
        "down dA": (d_down, w_down, 2 * PAIRS * HIDDEN * INNER),
    }
    plans: list[Plan | None] = [None] + [Plan(not SMOKE, *tile) for tile in FORWARD_TILES]
    plans.append(Plan(not SMOKE, 128, 256, 64, 8, 3, FLATTEN=False))
    rows = []
    with replay.paused():  # forced plans are state the replayed calls would not see
        for name, (a, b, flops) in products.items():
            ref = grouped.grouped_matmul(a, b, sizes)
            for plan in plans:
                def call(plan: Plan | None = plan, a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
                    if plan is None:
                        return grouped.grouped_matmul(a, b, sizes)
                    with forced_plan(plan):
                        return grouped.grouped_matmul(a, b, sizes)
                label = "default" if plan is None else (
                    f"{plan.BLOCK_M}x{plan.BLOCK_N}x{plan.BLOCK_K} w{plan.num_warps} s{plan.num_stages}"
                    + ("" if plan.FLATTEN else " noflat"))
                rows.append((name, label, *_timed(call, ref, flops)))
                print(rows[-1], flush=True)

        wgrads = {"gate_up dB": (x, d_gate_up, w_gate_up.transpose(1, 2)),
                  "down dB": (h, d_down, w_down.transpose(1, 2))}
        default_wgrad_plan = grouped.wgrad_plan
        for name, (a, g, b) in wgrads.items():
            ref = grouped._grouped_wgrad(a, g, sizes, False, b)
            for wplan in [None, *WGRAD_PLANS]:
                grouped.wgrad_plan = default_wgrad_plan if wplan is None else (lambda _size, p=wplan: p)
                label = "default" if wplan is None else "x".join(map(str, wplan[:3])) + f" w{wplan[3]} s{wplan[4]}"
                try:
                    def call(a: torch.Tensor = a, g: torch.Tensor = g, b: torch.Tensor = b) -> torch.Tensor:
                        return grouped._grouped_wgrad(a, g, sizes, False, b)
                    rows.append((name, label, *_timed(call, ref, 2 * PAIRS * a.shape[1] * g.shape[1])))
                finally:
                    grouped.wgrad_plan = default_wgrad_plan
                print(rows[-1], flush=True)

    out = os.environ.get("OUT", ".")
    with open(f"{out}/grouped_sweep.json", "w") as f:
        json.dump({"gpu": "cpu (dry run)" if SMOKE else torch.cuda.get_device_name(), "rows": rows,
                   "commit": os.environ.get("KERNELWORKS_COMMIT")}, f, indent=1)
    best: dict[str, tuple[str, float]] = {}
    for name, label, us, _ in rows:
        if us is not None and (name not in best or us < best[name][1]):
            best[name] = (label, us)
    print("\n| product | plan | µs | rate |\n|---|---|---|---|")
    for name, label, us, note in rows:
        if label == "default" or best.get(name, ("",))[0] == label:
            print(f"| {name} | {label} | {'' if us is None else round(us, 1)} | {note} |")


if __name__ == "__main__":
    main()
