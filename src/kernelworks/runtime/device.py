"""Where kernels run: a CUDA GPU, or Triton's interpreter on the CPU when there is none."""

from __future__ import annotations

import os

import torch

INTERPRET_ENV = "TRITON_INTERPRET"


def has_gpu() -> bool:
    """True when a CUDA device is visible to PyTorch."""
    return torch.cuda.is_available()


def interpreter_active() -> bool:
    """True when Triton kernels run in the interpreter (``TRITON_INTERPRET=1``), i.e. on CPU tensors."""
    return os.environ.get(INTERPRET_ENV, "0").lower() in ("1", "true", "on", "yes")


def enable_interpreter_without_gpu() -> None:
    """Turn on Triton's interpreter when no GPU is present, so the ops still run (slowly) on CPU tensors.

    Triton reads the variable when a kernel is *decorated*, so this must run before kernel modules are
    imported; ``import kernelworks`` calls it first thing. An explicit setting is never overridden.
    """
    if INTERPRET_ENV not in os.environ and not has_gpu():
        os.environ[INTERPRET_ENV] = "1"


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu`` (the interpreter's device)."""
    return torch.device("cuda") if has_gpu() else torch.device("cpu")


def device_name() -> str:
    """The GPU's marketing name, or ``"cpu (Triton interpreter)"``."""
    if has_gpu():
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)"
