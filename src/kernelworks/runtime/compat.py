"""Differences between the torch / triton / numpy releases kernelworks supports, handled in one place.

Tested stacks: triton 3.6 with torch 2.11–2.13 (the GPU image; CI pins torch 2.13 CPU) and triton 3.8 with
torch 2.14 (what ``pip install`` resolves today); CI (``.ci/run``) runs both ends on the CPU. :data:`TESTED`
is that range and pyproject.toml declares the same (a test keeps the two equal); outside it ``import
kernelworks`` warns once (:func:`check_versions`) instead of letting kernels fail one by one.

Kernels are written once, as valid Triton for every tested release. Where a release's *interpreter* runs
valid Triton differently from its compiler, or breaks with a numpy we support, the interpreter is patched
here at import (:func:`patch_interpreter`), never a kernel. The low-overhead launcher's dependence on the
release lives in :mod:`kernelworks.runtime.launch`.
"""

from __future__ import annotations

import contextvars
import functools
import warnings
from dataclasses import dataclass
from importlib import metadata

import torch
import triton
import triton.language as tl


def version_tuple(version: str) -> tuple[int, int]:
    """``"3.8.0+git1a2b"`` / ``"2.14.1+cu130"`` -> ``(3, 8)`` / ``(2, 14)``: major and minor numbers."""
    major, minor, *_ = [*version.split("+")[0].split("."), "0"]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


TRITON = version_tuple(triton.__version__)
"""The installed triton's ``(major, minor)``."""


@dataclass(frozen=True)
class VersionRange:
    """Releases of one package that CI tests: ``low <= (major, minor) < high``, less ``skip``."""

    low: tuple[int, int]
    high: tuple[int, int]
    skip: tuple[tuple[int, int], ...] = ()

    def __contains__(self, version: tuple[int, int]) -> bool:
        return self.low <= version < self.high and version not in self.skip

    def __str__(self) -> str:
        """As a pip specifier: ``>=3.6,<3.9,!=3.7.*``."""
        parts = [f">={self.low[0]}.{self.low[1]}", f"<{self.high[0]}.{self.high[1]}"]
        return ",".join(parts + [f"!={major}.{minor}.*" for major, minor in self.skip])


TESTED: dict[str, VersionRange] = {
    "torch": VersionRange((2, 11), (2, 15)),
    # torch 2.12 and 2.13 pin triton 3.7 on PyPI, a release no CI run covers: pip then resolves torch 2.14.
    "triton": VersionRange((3, 6), (3, 9), skip=((3, 7),)),
    # Kernels use numpy only in the interpreter; on a GPU the image's numpy (2.5) is what GPU runs test.
    "numpy": VersionRange((2, 2), (2, 6)),
}
"""The releases that are tested, no wider: CI (``.ci/run``) runs torch 2.13 CPU + triton 3.6 + numpy 2.2 and
what pip resolves (today torch 2.14 + triton 3.8 + numpy 2.4) on the CPU; GPU runs use the GPU image (torch
2.11 + triton 3.6 + numpy 2.5). pyproject.toml declares the same specifiers (tests/runtime/test_compat.py
keeps them equal)."""

TESTED_INTERPRETER: dict[str, VersionRange] = {"numpy": VersionRange((2, 2), (2, 5))}
"""Narrower ranges that hold where kernels run in Triton's interpreter, which computes with numpy: the
numpy releases of CI's two stacks."""


class UntestedVersionWarning(UserWarning):
    """torch, triton or numpy outside the tested range (:data:`TESTED`)."""


def tested_ranges(interpreter: bool) -> dict[str, VersionRange]:
    """:data:`TESTED`, narrowed by :data:`TESTED_INTERPRETER` where kernels run in the interpreter."""
    return {**TESTED, **TESTED_INTERPRETER} if interpreter else dict(TESTED)


def untested_versions(installed: dict[str, str] | None = None, *, interpreter: bool = False) -> list[str]:
    """``"triton 3.9.0 (tested: >=3.6,<3.9,!=3.7.*)"`` for each package outside the tested range
    (:func:`tested_ranges`). ``installed`` maps package -> version (default: what is installed)."""
    if installed is None:
        installed = {name: metadata.version(name) for name in TESTED}
    where = " in the interpreter" if interpreter else ""
    return [f"{name} {installed[name]} (tested: {tested}{where * (name in TESTED_INTERPRETER)})"
            for name, tested in tested_ranges(interpreter).items()
            if name in installed and version_tuple(installed[name]) not in tested]


def check_versions(installed: dict[str, str] | None = None, *, interpreter: bool = False) -> str | None:
    """Warn once (:class:`UntestedVersionWarning`) when the stack is outside the tested range; returns
    the message, None when every version is tested. ``interpreter``: kernels run in Triton's interpreter."""
    untested = untested_versions(installed, interpreter=interpreter)
    if not untested:
        return None
    wanted = " ".join(f"'{name}{tested}'" for name, tested in tested_ranges(interpreter).items())
    message = (f"untested versions: {'; '.join(untested)}. Kernels may fail or run wrongly because of these "
               f"releases, not of the ops; a tested stack: pip install {wanted}")
    warnings.warn(message, UntestedVersionWarning, stacklevel=2)
    return message


# ------------------------------------------------------------------------------------ interpreter patches

# Binary operators of tl.constexpr that can meet a tensor operand (tl.tensor has no __pow__/__rpow__, so
# those are left alone).
_CONSTEXPR_BINARY_OPS = (
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
)


def _defer_to_tensor(op):
    @functools.wraps(op)
    def binary(self, other):
        value = other.value if isinstance(other, tl.constexpr) else other
        if isinstance(value, tl.tensor):
            return NotImplemented  # Python then calls the tensor's reflected operator, as the compiler does
        return op(self, other)

    binary._kernelworks_patch = True
    return binary


def _patch_constexpr_tensor_ops() -> None:
    """``C * x`` with ``C = tl.constexpr(0.5)`` a module constant and ``x`` a tensor.

    The compiler sends a binary operator with a tensor on either side to the tensor's method
    (``CodeGenerator._apply_binary_method``). The interpreter runs the kernel as Python, so
    ``constexpr.__mul__`` gets the tensor and wraps the product in a constexpr. Triton 3.6's
    ``to_tensor`` unwrapped that again; 3.8's rejects it (``cannot convert [...] of type
    <class 'triton.language.core.tensor'> to tensor``). Deferring to the tensor's reflected operator gives
    the interpreter the compiler's behaviour, a plain tensor, in every release.
    """
    for name in _CONSTEXPR_BINARY_OPS:
        op = getattr(tl.constexpr, name)
        if not getattr(op, "_kernelworks_patch", False):
            setattr(tl.constexpr, name, _defer_to_tensor(op))


def _patch_scalar_index() -> None:
    """``range(n)``, ``x[i]``, ``tl.static_range`` over a kernel's scalar argument ``n`` under triton 3.6.

    Its interpreter holds scalars as 1-element arrays and converts them with ``int(array)``, which numpy
    deprecated in 1.25 and 2.3+ refuses (``only 0-dimensional arrays can be converted to Python scalars``).
    Triton 3.8 converts ``int(array.squeeze())``; this installs that conversion into the interpreter's
    per-launch patching of ``tl.tensor``, so 3.6's runs with any numpy (3.8's is unchanged by it).
    """
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "_kernelworks_patch", False):
        return

    def patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor._kernelworks_patch = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def patch_interpreter() -> None:
    """Make the interpreter run what the compiler accepts, with every numpy we support. Both patches give
    every release the same behaviour (no branch on the version): the first is needed from triton 3.8 on,
    the second on triton 3.6 with numpy >= 2.3. Idempotent; ``import kernelworks`` calls it when kernels
    run in the interpreter (``TRITON_INTERPRET=1``)."""
    _patch_constexpr_tensor_ops()
    _patch_scalar_index()


def prepare_runtime() -> None:
    """What ``import kernelworks`` does for the installed stack, once the interpreter is decided: one
    warning if the stack is untested, and the interpreter's patches when kernels will run in it."""
    from kernelworks.runtime.device import interpreter_active

    interpreter = interpreter_active()
    check_versions(interpreter=interpreter)
    if interpreter:
        patch_interpreter()


_tls_key = getattr(torch._C, "_is_key_in_tls", None)
_tls_obj = getattr(torch._C, "_get_obj_in_tls", None)


def backward_caller_context() -> contextvars.Context | None:
    """The context (``contextvars``) of the thread that started the backward pass now running, or None.

    Autograd runs a CUDA graph's backward on its own thread per device, where the caller's ``ContextVar`` s are
    unset. ``torch.autograd.backward`` stashes a copy of the caller's context in thread-local state (torch's
    own compiled backward runs in it). None where this torch has no such stash, no backward is running, or the
    stash does not reach this thread: torch 2.11's CUDA device threads see none (H100, session 15);
    :mod:`kernelworks.runtime.context` then falls back on its own record of the caller's context."""
    if _tls_key is None or _tls_obj is None or not _tls_key("context"):
        return None
    ctx = _tls_obj("context")
    return ctx if isinstance(ctx, contextvars.Context) else None


_keep_graph = getattr(getattr(torch._C, "_autograd", None), "_get_current_graph_task_keep_graph", None)


def backward_keeps_graph() -> bool:
    """True inside a backward pass that keeps its graph (``retain_graph=True``, ``create_graph=True``): the
    saved tensors will be read again by a later backward. torch's own compiled backward asks the engine the
    same question; where this torch cannot answer, True (the safe side: the caller then copies)."""
    return True if _keep_graph is None else bool(_keep_graph())
