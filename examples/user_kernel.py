"""A user's own Triton kernel taken through the kernelworks workbench.

    kw check examples/user_kernel.py:SPEC      # correctness checklist (CPU interpreter or GPU)
    kw bench examples/user_kernel.py:SPEC      # timing against torch and torch.compile (GPU)
    kw lint examples/user_kernel.py            # static checks of the kernel source
    kw inspect examples/user_kernel.py:SPEC    # registers, occupancy, SASS mix for sm_90 (no GPU needed)
    kw diagnose examples/user_kernel.py:SPEC --case 8192x8192   # what limits it (GPU)
    kw tune examples/user_kernel.py:SPEC       # search its BLOCK × num_warps configs, each checked (GPU)
    python examples/user_kernel.py             # check (and bench) from Python

The kernel is a leaky ReLU with a learnable-free slope: y = x if x > 0 else slope·x.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import triton
import triton.language as tl

if not torch.cuda.is_available():  # before the @triton.jit below: run in the interpreter on the CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelworks.spec import Case, Cost, OpSpec, Provider, randn


@triton.jit
def _leaky_relu_kernel(x_ptr, y_ptr, n, slope, BLOCK: tl.constexpr):
    """y[i] = x[i] if x[i] > 0 else slope·x[i], for a flat contiguous x of n elements."""
    o_x = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m_x = o_x < n
    b_x = tl.load(x_ptr + o_x, mask=m_x, other=0.0).to(tl.float32)
    b_y = tl.where(b_x > 0, b_x, b_x * slope)
    tl.store(y_ptr + o_x, b_y.to(y_ptr.dtype.element_ty), mask=m_x)


CONFIGS = [{"BLOCK": block, "num_warps": warps} for block in (1024, 2048, 4096, 8192) for warps in (4, 8)]
"""The launch configs ``kw tune`` searches, simplest first."""
DEFAULT_CONFIG = {"BLOCK": 4096, "num_warps": 4}
_CONFIG: ContextVar[Mapping[str, int] | None] = ContextVar("leaky_relu_config", default=None)


@contextmanager
def configured(config: Mapping[str, int]) -> Iterator[None]:
    """Within the block, :func:`leaky_relu` launches with ``config`` (how ``kw tune`` tries each one)."""
    token = _CONFIG.set({**DEFAULT_CONFIG, **config})
    try:
        yield
    finally:
        _CONFIG.reset(token)


def leaky_relu(x: torch.Tensor, slope: float = 0.01) -> torch.Tensor:
    """Leaky ReLU of any-shaped ``x`` (made contiguous first); returns a tensor like ``x``."""
    x = x.contiguous()
    y = torch.empty_like(x)
    config = _CONFIG.get() or DEFAULT_CONFIG
    block = config["BLOCK"]
    _leaky_relu_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), slope, BLOCK=block,
                                                         num_warps=config["num_warps"])
    return y


def reference(x: torch.Tensor, slope: float = 0.01) -> torch.Tensor:
    """The math in PyTorch: the ground truth (on float64 inputs) and the eager baseline."""
    return torch.nn.functional.leaky_relu(x, slope)


def make_inputs(case: Case, device: torch.device) -> dict:
    return {"x": randn((case["rows"], case["cols"]), case, device), "slope": case.get("slope", 0.01)}


def cost(case: Case, mode: str) -> Cost:
    n = case["rows"] * case["cols"]
    return Cost(flops=2 * n, bytes=2 * n * case.itemsize)  # read x once, write y once


SPEC = OpSpec(
    name="user_leaky_relu",
    reference=reference,
    inputs=make_inputs,
    check_cases=[
        Case("one_row", {"rows": 1, "cols": 7}, torch.float32, frozenset({"quick"})),
        Case("odd", {"rows": 13, "cols": 127, "slope": 0.2}, torch.float16),
        Case("odd", {"rows": 13, "cols": 127, "slope": 0.2}, torch.bfloat16),
    ],
    bench_cases=[Case("8192x8192", {"rows": 8192, "cols": 8192}, torch.bfloat16, frozenset({"gpu", "quick"}))],
    cost=cost,
    providers={"mine": Provider("mine", leaky_relu)},
    subject="mine",
    configs=CONFIGS,
    configured=configured,
)

if __name__ == "__main__":
    import kernelworks

    results = kernelworks.check(SPEC)
    failed = [r for r in results if not (r.passed or r.skipped)]
    if torch.cuda.is_available():
        kernelworks.bench(SPEC)
    sys.exit(1 if failed else 0)
