"""Hopper's tensor memory accelerator (TMA) from Triton: when kernels may use it, and the scratch it needs.

Kernels that build descriptors on the device (``tl.make_tensor_descriptor``) need global scratch for them,
which Triton asks a per-context allocator for; :func:`ensure_tma_allocator` installs one backed by the
PyTorch caching allocator (so it is stream-ordered and graph-capturable). Ops choose their TMA path with
:func:`tma_available`, which is True on compute capability 9.0+ — also while ``kw inspect`` plans for
``sm_90`` on a machine with no GPU — and False under the interpreter.
"""

from __future__ import annotations

import torch
import triton

from kernelworks.runtime.device import gpu_capability


def tma_available() -> bool:
    """True when kernels are planned for a GPU with TMA (compute capability ≥ 9.0)."""
    cap = gpu_capability()
    return cap is not None and cap >= (9, 0)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    del alignment, stream  # the caching allocator's blocks are 512-byte aligned, on the current stream
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_tma_allocator() -> None:
    """Install the device-descriptor scratch allocator for the calling thread. Call it in every launcher
    that takes a ``tl.make_tensor_descriptor`` path, every time: Triton keeps the allocator in a
    ``ContextVar``, so one installed by the main thread is not seen by autograd's backward worker thread
    (measured: the GEMM backward failed with "no allocator was set" after the forward had installed it).
    Setting a ContextVar costs ~0.1 µs."""
    triton.set_allocator(_scratch)
