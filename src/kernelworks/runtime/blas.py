"""cuBLAS calls whose spelling differs between devices: a product accumulated into a wider tensor."""

from __future__ import annotations

import torch


def accumulate_mm(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b``, the product accumulated in fp32 and added in ``acc``'s dtype, with no temporary of
    ``acc``'s size: bf16/fp16 operands into an fp32 ``acc`` take cuBLAS's mixed-precision GEMM (``beta = 1``,
    C read and written in fp32); operands of ``acc``'s dtype, an in-place ``addmm_``. The CPU (interpreter
    runs) has no mixed-dtype addmm: the operands are upcast there."""
    if acc.dtype == a.dtype:
        acc.addmm_(a, b)  # cuBLAS beta = 1: C read, added in fp32, rounded once to acc's dtype
    elif acc.is_cuda:
        torch.addmm(acc, a, b, out_dtype=acc.dtype, out=acc)
    else:
        acc.addmm_(a.to(acc.dtype), b.to(acc.dtype))
