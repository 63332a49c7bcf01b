"""A tunable op whose configs the compile gate must turn away: at module level, so the compile worker can
import the kernel by path."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
import triton
import triton.language as tl

from kernelworks.runtime.device import planning_active
from kernelworks.spec import Case, Cost, OpSpec, Provider, randn


@triton.jit
def _row_stat_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    """y[row] = Σ x·σ(x) + Σ exp(x) · max(x) over the row's first n ≤ BLOCK values, in fp32."""
    i = tl.program_id(0).to(tl.int64)
    o = tl.arange(0, BLOCK)
    m = o < n
    b_x = tl.load(p_x + i * n + o, mask=m, other=0.0).to(tl.float32)
    b_y = tl.sum(b_x * tl.sigmoid(b_x), axis=0) + tl.sum(tl.where(m, tl.exp(b_x), 0.0), axis=0) * \
        tl.max(tl.where(m, b_x, -float("inf")), axis=0)
    tl.store(p_y + i, b_y)


CONFIGS = [
    {"BLOCK": 64, "num_warps": 1},                   # fine
    {"BLOCK": 48, "num_warps": 1},                   # tl.arange of 48: not a power of two, fails to compile
    {"BLOCK": 4096, "num_warps": 1, "maxnreg": 32},  # 128 fp32 values a lane in 32 registers: spills
    {"BLOCK": 128, "num_warps": 2},                  # fine
]
_CONFIG: ContextVar[Mapping[str, Any]] = ContextVar("row_stat_config", default=CONFIGS[0])
RUNS: list[dict[str, Any]] = []
"""The config of every call of :func:`row_stat` that ran its kernel, in order (what the tests read)."""


@contextmanager
def configured(config: Mapping[str, Any]) -> Iterator[None]:
    token = _CONFIG.set(config)
    try:
        yield
    finally:
        _CONFIG.reset(token)


def row_stat(x: torch.Tensor) -> torch.Tensor:
    """The statistic of each row of a contiguous ``x [rows, n]``."""
    config = dict(_CONFIG.get())
    if not planning_active():  # the gate's capture calls this too, launching nothing
        RUNS.append(dict(config))
    y = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    block = config.pop("BLOCK")
    _row_stat_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=block, **config)
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    return (x * torch.sigmoid(x)).sum(1) + torch.exp(x).sum(1) * x.amax(1)


SPEC = OpSpec(
    name="row_stat", reference=reference,
    inputs=lambda case, device: {"x": randn((case["rows"], case["cols"]), case, device)},
    check_cases=[Case("3x40", {"rows": 3, "cols": 40}, torch.float32)],
    bench_cases=[Case("3x40", {"rows": 3, "cols": 40}, torch.float32)],
    cost=lambda case, mode: Cost(bytes=4 * case["rows"] * case["cols"]),
    providers={"ours": Provider("ours", row_stat)}, subject="ours", baselines=(),
    configs=CONFIGS, configured=configured,
)
