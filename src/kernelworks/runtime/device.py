"""Where kernels run: a CUDA GPU, or Triton's interpreter on the CPU when there is none."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Iterator

import torch

INTERPRET_ENV = "TRITON_INTERPRET"

# A plain module flag, not a ContextVar: validation reads it inside code torch.compile traces, and dynamo
# cannot trace ContextVar.get (a graph break). Planning is process-wide and never nested across threads.
_planning_for_gpu = False
_planned_capability: tuple[int, int] = (9, 0)


@contextlib.contextmanager
def planning_for_gpu(capability: tuple[int, int] = (9, 0)) -> Iterator[None]:
    """Within this block the ops plan their launches for a GPU even where kernels would run in the
    interpreter: launch heuristics take their GPU branch (:func:`interpreter_active` is False), validation
    accepts CPU tensors as stand-ins for CUDA ones, and :func:`kernelworks.runtime.launch.launch` takes the
    plain ``kernel[grid]`` path. ``kw inspect`` uses it to capture the launches a GPU would see, on any
    machine; nothing may actually run a kernel inside it. ``capability``: the compute capability
    :func:`gpu_capability` reports meanwhile (the compile target's: ``(9, 0)`` plans the Hopper paths)."""
    global _planning_for_gpu, _planned_capability
    before = _planning_for_gpu, _planned_capability
    _planning_for_gpu, _planned_capability = True, capability
    try:
        yield
    finally:
        _planning_for_gpu, _planned_capability = before


def planning_active() -> bool:
    """True inside :func:`planning_for_gpu`."""
    return _planning_for_gpu


def cpu_tensors_allowed() -> bool:
    """CPU tensors are valid kernel inputs: under the interpreter, or as stand-ins while planning."""
    return _planning_for_gpu or _interpret_env()


_interpret: bool | None = None


def _interpret_env() -> bool:
    # Read once: it is asked on every launch and check, and Triton itself reads the variable only when a
    # kernel is decorated, so a later change could not move kernels anyway (enable_interpreter_without_gpu
    # resets it). A module global rather than functools.cache, which torch.compile warns about when tracing.
    global _interpret
    if _interpret is None:
        _interpret = os.environ.get(INTERPRET_ENV, "0").lower() in ("1", "true", "on", "yes")
    return _interpret


def runs_kernels(t: torch.Tensor) -> bool:
    """True when kernels can take ``t``: a CUDA tensor, or a CPU one where CPU tensors are allowed (the
    interpreter, planning). Model integration falls back to torch on anything else (a model left on the
    CPU of a GPU machine)."""
    return t.is_cuda or (t.device.type == "cpu" and cpu_tensors_allowed())


def has_gpu() -> bool:
    """True when a CUDA device is visible to PyTorch."""
    return torch.cuda.is_available()


def interpreter_active() -> bool:
    """True when Triton kernels run in the interpreter (``TRITON_INTERPRET=1``), i.e. on CPU tensors, and
    launches are not being planned for a GPU (:func:`planning_for_gpu`)."""
    return _interpret_env() and not _planning_for_gpu


def gpu_capability() -> tuple[int, int] | None:
    """The compute capability kernels are planned for: the planned target's inside
    :func:`planning_for_gpu`, the current CUDA device's otherwise, None under the interpreter. Ops pick
    architecture-specific paths (TMA, wgmma-sized tiles on ``(9, 0)``) from it."""
    if _planning_for_gpu:
        return _planned_capability
    if interpreter_active() or not has_gpu():
        return None
    return _device_capability(torch.cuda.current_device())


@functools.cache
def _device_capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def enable_interpreter_without_gpu() -> None:
    """Turn on Triton's interpreter when no GPU is present, so the ops still run (slowly) on CPU tensors.

    Triton reads the variable when a kernel is *decorated*, so this must run before kernel modules are
    imported; ``import kernelworks`` calls it first thing. An explicit setting is never overridden.
    """
    if INTERPRET_ENV not in os.environ and not has_gpu():
        global _interpret
        os.environ[INTERPRET_ENV] = "1"
        _interpret = None
        if "triton" in sys.modules:
            # Too late for triton's own library (tl.cdiv, tl.sum, ...): it was decorated for a GPU at its
            # import, and every kernel would fail with "Cannot call @triton.jit'd outside of the scope".
            global _interpreter_too_late
            _interpreter_too_late = True
            warnings.warn(INTERPRETER_TOO_LATE, RuntimeWarning, stacklevel=3)


INTERPRETER_TOO_LATE = ("triton was imported before kernelworks on a machine with no GPU, so kernels cannot run in "
                        "Triton's interpreter: import kernelworks first (before transformers, which imports "
                        "triton), or set TRITON_INTERPRET=1 before importing triton")
_interpreter_too_late = False


def check_interpreter_usable() -> None:
    """Raise a RuntimeError saying what to do when kernels would run in an interpreter that triton's import
    order broke (:func:`enable_interpreter_without_gpu`); Triton's own error there is unreadable."""
    if _interpreter_too_late:
        raise RuntimeError(INTERPRETER_TOO_LATE)


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu`` (the interpreter's device)."""
    return torch.device("cuda") if has_gpu() else torch.device("cpu")


def device_name() -> str:
    """The GPU's marketing name, or ``"cpu (Triton interpreter)"``."""
    if has_gpu():
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"


@functools.lru_cache(maxsize=64)
def sm_count(device_index: int = 0) -> int:
    """Multiprocessors of a CUDA device; 132 (an H100 SXM, the project's target) with no GPU present, where
    launches are only planned (``kw inspect``) or interpreted."""
    if not torch.cuda.is_available():
        return 132
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def interpreter_dot_operand(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a kernel that feeds it to ``tl.dot`` should read it: upcast to float32 when it is bfloat16
    and kernels run in the interpreter, unchanged otherwise.

    Triton's interpreter computes ``tl.dot`` on bfloat16 operands wrongly (numpy has no bfloat16, and the
    emulation returns values off by orders of magnitude), so every op whose kernels call ``tl.dot`` passes
    its bf16 operands through this on the way in and stores in the caller's dtype on the way out. On a GPU
    it costs one dtype compare."""
    if t.dtype == torch.bfloat16 and interpreter_active():
        return t.float()
    return t
