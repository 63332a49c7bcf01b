"""Input validation shared by every public op.

Every check raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (wrong device, rank, size, layout)
with a message naming the argument, what was expected and what came, so a bad call never reaches a kernel
(where it would crash inside Triton or, worse, return a silently wrong answer).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from kernelworks.runtime.device import cpu_tensors_allowed
from kernelworks.runtime.torch_op import PLAIN_TENSORS

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
"""The floating dtypes the kernels accept."""


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(name: str, t: object, *, min_dim: int = 1, max_dim: int | None = None) -> torch.Tensor:
    """``t`` is a non-empty tensor on a device our kernels can use, with a rank in ``[min_dim, max_dim]``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda and not (cpu_tensors_allowed() and t.device.type == "cpu"):
        hint = "" if cpu_tensors_allowed() else " (CPU tensors run only under TRITON_INTERPRET=1)"
        raise ValueError(f"{name}: expected a CUDA tensor, got a tensor on {t.device}{hint}")
    if t.dim() < min_dim or (max_dim is not None and t.dim() > max_dim):
        want = f"{min_dim}" if max_dim == min_dim else f"at least {min_dim}" if max_dim is None \
            else f"{min_dim} to {max_dim}"
        raise ValueError(f"{name}: expected {want} dimension(s), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty tensor, got shape {tuple(t.shape)}")
    return t


def check_dtype(name: str, t: torch.Tensor, dtypes: Sequence[torch.dtype]) -> None:
    """``t.dtype`` is one of ``dtypes``."""
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {_names(dtypes)}, got {str(t.dtype).replace('torch.', '')}")


def check_float_tensor(name: str, t: object, *, min_dim: int = 1, max_dim: int | None = None,
                       dtypes: Sequence[torch.dtype] = FLOAT_DTYPES) -> torch.Tensor:
    """:func:`check_tensor` plus a floating dtype the kernels support (fp32, fp16, bf16 by default)."""
    # the common case in one expression (every eager call validates; each nested call costs host time)
    if type(t) in PLAIN_TENSORS and t.is_cuda and t.dtype in dtypes and min_dim <= t.dim() \
            and (max_dim is None or t.dim() <= max_dim) and t.numel():
        return t
    if isinstance(t, torch.Tensor):
        check_dtype(name, t, dtypes)
    return check_tensor(name, t, min_dim=min_dim, max_dim=max_dim)


def check_same_dtype(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    """All tensors share one dtype."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        got = ", ".join(f"{n}={str(t.dtype).replace('torch.', '')}" for n, t in zip(names, tensors))
        raise TypeError(f"{', '.join(names)}: expected one dtype, got {got}")


def check_same_device(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    """All tensors live on one device."""
    if len(tensors) == 2 and tensors[0].device == tensors[1].device:  # the common call, without a set
        return
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        got = ", ".join(f"{n} on {t.device}" for n, t in zip(names, tensors))
        raise ValueError(f"{', '.join(names)}: expected one device, got {got}")


def check_same_shape(names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    """All tensors share one shape."""
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        got = ", ".join(f"{n}={tuple(t.shape)}" for n, t in zip(names, tensors))
        raise ValueError(f"{', '.join(names)}: expected one shape, got {got}")


def check_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    """The last dimension has stride 1 (for kernels that take row strides but not element strides)."""
    if t.stride(-1) != 1:
        raise ValueError(f"{name}: expected a unit stride in the last dimension, got strides {t.stride()}")


def check_real(name: str, value: object, *, low: float | None = None, high: float | None = None,
               low_inclusive: bool = True) -> float:
    """A finite real number (bools refused) within ``[low, high]`` (``(low, high]`` when not
    ``low_inclusive``); returned as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
    below = low is not None and (value < low if low_inclusive else value <= low)
    # comparisons, not math.isfinite: torch.compile traces them on a symbolic float (NaN fails both)
    if not -math.inf < value < math.inf or below or (high is not None and value > high):
        bounds = []
        if low is not None:
            bounds.append(f"{'>=' if low_inclusive else '>'} {low}")
        if high is not None:
            bounds.append(f"<= {high}")
        raise ValueError(f"{name}: expected a finite number{' ' + ' and '.join(bounds) if bounds else ''}, "
                         f"got {value}")
    return float(value)


def refuse_autograd(op: str, **tensors: torch.Tensor | None) -> None:
    """For a forward-only op: raise where autograd would need a gradient (grad mode on and an input that
    requires grad) instead of returning an output cut off from the graph, a silently lost gradient. Delete
    the op's call once it has a backward."""
    if not torch.is_grad_enabled():
        return
    names = [name for name, t in tensors.items() if t is not None and t.requires_grad]
    if names:
        raise NotImplementedError(f"{', '.join(names)}: {op} has no backward yet, got input(s) requiring grad "
                                  "with grad mode on; call it under torch.no_grad() or pass detached tensors")
