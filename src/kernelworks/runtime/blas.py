"""cuBLAS calls whose spelling differs between devices: a product accumulated into a wider tensor."""

from __future__ import annotations

import torch

from kernelworks.runtime.device import planning_active


def mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.mm(a, b, out=out)``, skipped while launches are only planned (``kw inspect``: stand-in inputs,
    no kernel runs): then the result's buffer comes back unwritten. Inspection looks at the Triton launches
    between the products, and a bf16 product of a model-sized stand-in can take many minutes on a CPU without
    bf16 units (1024³ took 4 s on a CI machine)."""
    if planning_active():
        return out if out is not None else torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    return torch.mm(a, b, out=out)


def accumulate_mm(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, first: bool = False) -> None:
    """``acc += a @ b`` (``first``: ``acc = a @ b``), the product accumulated in fp32 and added in ``acc``'s
    dtype, with no temporary of ``acc``'s size: bf16/fp16 operands into an fp32 ``acc`` take cuBLAS's
    mixed-precision GEMM (C read and written in fp32); operands of ``acc``'s dtype, an in-place ``addmm_``.
    ``first`` passes ``beta = 0``, so C is not read at all (NaN in it does not propagate, as ``addmm``
    documents): a loop of products needs no zero-filled accumulator, which for an LM head's fp32 weight
    gradient (V·H·4 bytes: 1.2–2.1 GB) saves one fill and one read of it. The CPU (interpreter runs) has no
    mixed-dtype addmm: the operands are upcast there."""
    if planning_active():  # as in mm: nothing runs while launches are only planned
        return
    beta = 0 if first else 1
    if acc.dtype == a.dtype:
        acc.addmm_(a, b, beta=beta)  # cuBLAS: C read (unless beta = 0), added in fp32, rounded once
    elif acc.is_cuda:
        torch.addmm(acc, a, b, beta=beta, out_dtype=acc.dtype, out=acc)
    else:
        acc.addmm_(a.to(acc.dtype), b.to(acc.dtype), beta=beta)
