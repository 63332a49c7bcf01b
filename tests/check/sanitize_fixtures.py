"""Specs for the ``kw check --sanitize`` tests (test fixtures, not shipped), each a deliberate bug for one tool
and its control:

- ``OOB``: a copy kernel that reads and writes past its tensors' ends (memcheck); ``MASKED``: the same kernel
  with its tail masked, the control that shows the test's only difference is the mask. ``x`` has 1000 float32
  elements (4000 bytes); one program of ``BLOCK = 1024`` copies it, so without the mask the last 24 lanes read
  96 bytes past ``x`` and write 96 bytes past ``y``: inside the 2 MiB segment the caching allocator would give
  them, outside the ``cudaMalloc`` each gets under ``kw check --sanitize`` (and inside memcheck's padding).
- ``UNINIT``: a kernel that reads a ``torch.empty`` tensor its wrapper never writes (initcheck, in the op's own
  kernel).
- ``TORCH_UNINIT``: the masked copy, then torch's own reduction over a ``torch.empty`` tensor (initcheck, in a
  kernel outside the op: ``at::native::reduce_kernel``).

The child process loads this file by path (``…/sanitize_fixtures.py:OOB``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from kernelworks.spec import Case, Cost, OpSpec, Provider, randn

BLOCK = 1024


@triton.jit
def _oob_copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """y[i] = x[i] for i < BLOCK; the tail masked at ``n`` only when ``MASKED``."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        m_i = o_i < n
        tl.store(y_ptr + o_i, tl.load(x_ptr + o_i, mask=m_i), mask=m_i)
    else:
        tl.store(y_ptr + o_i, tl.load(x_ptr + o_i))  # the bug: no tail mask


@triton.jit
def _scale_kernel(x_ptr, s_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[i] = x[i] · s[i] for i < n."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(y_ptr + o_i, tl.load(x_ptr + o_i, mask=m_i) * tl.load(s_ptr + o_i, mask=m_i), mask=m_i)


def _copy(x: torch.Tensor, masked: bool) -> torch.Tensor:
    y = torch.empty_like(x)
    _oob_copy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, MASKED=masked)
    return y


def _scale_by_unwritten(x: torch.Tensor) -> torch.Tensor:
    scale, y = torch.empty_like(x), torch.empty_like(x)  # the bug: ``scale`` is read, never written
    _scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, scale, y, x.numel(), BLOCK=BLOCK)
    return y


def _copy_then_torch_reads_unwritten(x: torch.Tensor) -> torch.Tensor:
    unwritten = torch.empty(8, device=x.device)  # few elements: every report fits under the print limit
    return _copy(x, masked=True) + 0 * unwritten.sum()  # the bug: torch's reduction reads what no one wrote


def _spec(name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> OpSpec:
    return OpSpec(
        name=name, reference=lambda x: x.clone(),
        inputs=lambda case, device: {"x": randn((case["n"],), case, device)},
        check_cases=[Case("1000", {"n": 1000}, torch.float32, frozenset({"quick"}))], bench_cases=[],
        cost=lambda case, mode: Cost(bytes=8 * case["n"]),
        providers={"mine": Provider("mine", fn, supports_backward=False)},
        subject="mine", baselines=("torch",))


OOB = _spec("sanitize_oob", lambda x: _copy(x, masked=False))
MASKED = _spec("sanitize_masked", lambda x: _copy(x, masked=True))
UNINIT = _spec("sanitize_uninit", _scale_by_unwritten)
TORCH_UNINIT = _spec("sanitize_torch_uninit", _copy_then_torch_reads_unwritten)
