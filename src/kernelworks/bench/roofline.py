"""Speed-of-light figures: the time a call cannot beat on this GPU, from its cost and the ceilings."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelworks.hardware import Ceilings
from kernelworks.spec import Cost


@dataclass(frozen=True)
class Roofline:
    """Achieved rates of one timed call and how close they come to the ceilings."""

    tflops: float
    gbs: float
    sol_ms: float
    pct_sol: float
    bound: str  # "memory" or "compute": which ceiling sets sol_ms


def roofline(cost: Cost, ms: float, ceil: Ceilings, dtype: torch.dtype) -> Roofline:
    """Rates for ``cost`` done in ``ms``; % of speed of light = roofline time / measured time."""
    seconds = ms * 1e-3
    mem_ms = cost.bytes / (ceil.bandwidth_gbs * 1e9) * 1e3 if ceil.bandwidth_gbs else 0.0
    peak = ceil.peak_tflops(dtype)
    compute_ms = cost.flops / (peak * 1e12) * 1e3 if peak else 0.0
    sol = max(mem_ms, compute_ms)
    return Roofline(
        tflops=cost.flops / seconds / 1e12 if seconds else 0.0,
        gbs=cost.bytes / seconds / 1e9 if seconds else 0.0,
        sol_ms=sol,
        pct_sol=100.0 * sol / ms if ms else 0.0,
        bound="memory" if mem_ms >= compute_ms else "compute",
    )
