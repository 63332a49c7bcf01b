"""Output allocation. Under :func:`poison_outputs` every output is NaN-filled first, so an element the kernel
fails to write shows up as NaN in ``kw check`` instead of passing on stale memory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import torch

from kernelworks.runtime import context

_POISON: ContextVar[bool] = ContextVar("kernelworks_poison_outputs", default=False)


@contextlib.contextmanager
def poison_outputs(enabled: bool = True) -> Iterator[None]:
    """Within this block, :func:`empty` and :func:`empty_like` return NaN-filled (int: -1-filled) tensors."""
    token = _POISON.set(enabled)
    try:
        with context.scope():  # the backward's allocations too, on autograd's own thread
            yield
    finally:
        _POISON.reset(token)


def _poison(t: torch.Tensor) -> torch.Tensor:
    if _POISON.get():
        t.fill_(float("nan") if t.is_floating_point() else -1)
    return t


def empty(shape: Sequence[int], *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``torch.empty`` that honours :func:`poison_outputs`; every op allocates its outputs through this."""
    return _poison(torch.empty(tuple(shape), dtype=dtype, device=device))


def empty_like(t: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Contiguous ``torch.empty`` shaped like ``t`` that honours :func:`poison_outputs`."""
    return empty(t.shape, dtype=dtype or t.dtype, device=t.device)


def empty_layout_of(t: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(t)`` (t's strides where t is dense, e.g. a transposed view) that honours
    :func:`poison_outputs`: a gradient laid out as its parameter, so autograd need not copy it."""
    return _poison(torch.empty_like(t))


_COUNTERS: dict[tuple, torch.Tensor] = {}


def arrival_counters(device: torch.device, n: int) -> torch.Tensor:
    """``n`` int32 arrival counters, zero between launches, for kernels whose last program to arrive finishes
    the work of the others (the GEMM's in-launch split-K, the loss's sum over rows): the kernel that counts
    also resets the counter it used, so one zeroed buffer per (device, stream) serves every launch without a
    memset. Per stream, because two launches running at once must not share counters; launches on one stream
    run in order, so its kernels share one buffer. It only grows (a new, zeroed buffer). A replayed call
    (:mod:`kernelworks.runtime.replay`) calls this again rather than keeping the buffer it was recorded with,
    so a signature recorded on one stream and replayed on another counts on the other's buffer."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        buf._kernelworks_counters = True  # runtime.replay asks for the current stream's buffer on every replay
        _COUNTERS[key] = buf
    return buf
