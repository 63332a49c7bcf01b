"""Index tensors (block tables, ``cu_seqlens``, state slots, group sizes) and the opt-in validation mode.

Two lines of defence, on purpose:

- **In the kernel, always.** Every kernel bounds what it reads from an index tensor (clamp, skip, or write
  zeros), so no value, however wrong, reaches memory outside the tensors a call was given. That costs no
  host sync and nothing measurable on the GPU.
- **On the host, opt in.** Checking an index tensor's *values* needs them on the host: one device sync per
  call, which a decode step cannot afford. :func:`validation` (or ``KERNELWORKS_VALIDATE=1``) turns those
  checks on; each raises a ``ValueError`` naming the argument and the first bad value. The test suite runs
  with it on.

Structure (dtype, rank, device, shape) is always checked: that needs no sync.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import torch

from kernelworks.runtime.device import planning_active

VALIDATE_ENV = "KERNELWORKS_VALIDATE"
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)

def _from_environment() -> bool:
    return os.environ.get(VALIDATE_ENV, "0").lower() in ("1", "true", "on", "yes")


# A plain module flag (dynamo cannot trace ContextVar.get), read on every eager call: the environment variable
# is read at import and by set_validation(None), not per call.
_validate: bool = _from_environment()


def validation_enabled() -> bool:
    """True when index values are checked on the host (:func:`set_validation`, :func:`validation` or
    ``KERNELWORKS_VALIDATE=1``). Never under ``torch.compile`` tracing, nor while launches are only planned
    (``kw inspect``'s stand-in tensors hold no real indices): the values are not known there."""
    if torch.compiler.is_compiling() or planning_active():
        return False
    return _validate


def set_validation(enabled: bool | None) -> None:
    """Turn host-side checks of index values on or off for the process (None: follow ``KERNELWORKS_VALIDATE``
    as it is now)."""
    global _validate
    _validate = _from_environment() if enabled is None else enabled


@contextlib.contextmanager
def validation(enabled: bool = True) -> Iterator[None]:
    """Within this block, index values are checked on the host (one sync per call).

    Example::

        with kw.validation():
            o = kw.decode_attention(q, k_cache, v_cache, block_table, context_lens)  # ValueError on a bad page
    """
    global _validate
    before = _validate
    _validate = enabled
    try:
        yield
    finally:
        _validate = before


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_index_tensor(name: str, t: object, *, ndim: int, like: torch.Tensor,
                       dtypes: Sequence[torch.dtype] = INDEX_DTYPES, allow_empty: bool = False) -> torch.Tensor:
    """``t`` is an integer tensor of rank ``ndim`` on ``like``'s device (any strides: kernels take them)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {', '.join(map(_dtype_name, dtypes))}, got {_dtype_name(t.dtype)}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {tuple(t.shape)}")
    if t.device != like.device:
        raise ValueError(f"{name}: expected a tensor on {like.device} (the data's device), got {t.device}")
    if t.numel() == 0 and not allow_empty:
        raise ValueError(f"{name}: expected a non-empty tensor, got shape {tuple(t.shape)}")
    return t


def _first_bad(t: torch.Tensor, bad: torch.Tensor) -> str:
    where = tuple(int(i) for i in bad.nonzero()[0])
    pos = where[0] if len(where) == 1 else where
    return f"{t[where].item()} at index {pos}"


def check_index_values(name: str, t: torch.Tensor, low: int, high: int, *,
                       mask: torch.Tensor | None = None) -> None:
    """Validation mode only: every value of ``t`` (where ``mask``) lies in ``[low, high)``."""
    if not validation_enabled() or t.numel() == 0:
        return
    bad = (t < low) | (t >= high)
    if mask is not None:
        bad &= mask
    if bool(bad.any()):
        raise ValueError(f"{name}: expected values in [{low}, {high}), got {_first_bad(t, bad)}")


def check_offsets(name: str, t: torch.Tensor, total: int, *, start_at_zero: bool = True) -> None:
    """Validation mode only: ``t`` (a 1-D ``cu_seqlens``-like table) is non-decreasing, starts at 0 and
    ends at most at ``total`` (the packed length)."""
    if not validation_enabled() or t.numel() == 0:
        return
    if start_at_zero and int(t[0]) != 0:
        raise ValueError(f"{name}: expected the first offset to be 0, got {int(t[0])}")
    if int(t[0]) < 0:
        raise ValueError(f"{name}: expected offsets >= 0, got {int(t[0])} at index 0")
    if t.numel() > 1:
        step = t[1:] - t[:-1]
        if bool((step < 0).any()):
            i = int((step < 0).nonzero()[0, 0]) + 1
            raise ValueError(f"{name}: expected non-decreasing offsets, got {int(t[i - 1])} then {int(t[i])} "
                             f"at index {i}")
    last = int(t[-1])
    if last > total:
        raise ValueError(f"{name}: expected offsets <= {total} (the packed length), got {last} at index "
                         f"{t.numel() - 1}")
