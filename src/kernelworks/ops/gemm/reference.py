"""The GEMM family's math in PyTorch eager: the ground truth (on float64-upcast inputs) and the ``torch``
baseline (on native inputs: cuBLAS, then the epilogue as separate eager ops — exactly the unfused
pipeline the fused kernels are measured against)."""

from __future__ import annotations

import torch
from torch.nn import functional


def _keep_f64(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, except that the float64 ground truth stays float64."""
    return t if t.dtype == torch.float64 else t.to(dtype)


def epilogue(z: torch.Tensor, bias: torch.Tensor | None, activation: str | None, residual: torch.Tensor | None,
             alpha: float, beta: float) -> torch.Tensor:
    """``act(alpha·z + bias) + beta·residual`` in eager ops (each skipped when it is the identity)."""
    if alpha != 1.0:
        z = z * alpha
    if bias is not None:
        z = z + bias.to(z.dtype)
    if activation == "swiglu":
        gate, up = z.chunk(2, dim=-1)
        z = functional.silu(gate) * up
    elif activation == "relu":
        z = torch.relu(z)
    elif activation == "silu":
        z = functional.silu(z)
    elif activation in ("gelu", "gelu_tanh"):
        z = functional.gelu(z, approximate="tanh" if activation == "gelu_tanh" else "none")
    if residual is not None:
        z = z + beta * residual.to(z.dtype) if beta != 1.0 else z + residual.to(z.dtype)
    return z


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None,
           residual: torch.Tensor | None = None, alpha: float = 1.0, beta: float = 1.0,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.matmul(a, b)`` followed by the epilogue, in ``out_dtype`` (default ``a``'s)."""
    if residual is not None and beta == 0.0:
        residual = None
    z = torch.matmul(a, b)
    if out_dtype is not None and a.dtype != torch.float64:
        z = z.to(out_dtype)
    return _keep_f64(epilogue(z, bias, activation, residual, alpha, beta), out_dtype or a.dtype)


def fp8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               bias: torch.Tensor | None = None, activation: str | None = None,
               out_dtype: torch.dtype = torch.bfloat16, fast_accum: bool = False) -> torch.Tensor:
    """``(a·sa) @ (b·sb)`` with the scales broadcast over their blocks, then the epilogue; fp32 math
    (``fast_accum``, a speed/accuracy choice of the kernels, does not change the math: ignored).

    ``scale_a``: ``[]``/``[1]`` (per tensor), ``[M]`` (per row), ``[M, ⌈K/128⌉]`` (1×128 blocks);
    ``scale_b``: ``[]``/``[1]``, ``[N]`` (per column), ``[⌈N/128⌉, ⌈K/128⌉]`` (128×128 blocks).
    """
    work = torch.float64 if scale_a.dtype == torch.float64 else torch.float32
    m, k = a.shape
    n = b.shape[1]
    af, bf = a.to(work), b.to(work)
    sa, sb = scale_a.to(work), scale_b.to(work)
    kb = -(-k // 128)
    # a block shape can also read as a per-row one ([M, 1] for K ≤ 128, b's [1, 2] for N = 2): block scales go
    # together, so beside an unambiguous block scale the other is read as blocks (as the op does)
    rows_a = sa.numel() > 1 and tuple(sa.shape) in ((m,), (m, 1), (1, m))
    cols_b = sb.numel() > 1 and tuple(sb.shape) in ((n,), (n, 1), (1, n))
    blocks = (tuple(sa.shape) == (m, kb) and not rows_a) or (tuple(sb.shape) == (-(-n // 128), kb) and not cols_b)
    if sa.numel() == 1:
        af = af * sa.reshape(())
    elif rows_a and not blocks:  # per row
        af = af * sa.reshape(-1, 1)
    else:  # [M, K/128] → per element
        af = af * sa.repeat_interleave(128, dim=1)[:, :k]
    if sb.numel() == 1:
        bf = bf * sb.reshape(())
    elif cols_b and not blocks:  # per column
        bf = bf * sb.reshape(1, -1)
    else:  # [N/128, K/128] → per element of b [K, N]
        bf = bf * sb.repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k].t()
    z = af @ bf
    y = epilogue(z, bias, activation, None, 1.0, 0.0)
    return y if work == torch.float64 else y.to(out_dtype)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_sizes: torch.Tensor) -> torch.Tensor:
    """``C[rows of group e] = A[rows of group e] @ B[e]``: a loop of ``torch.matmul`` (the baseline); rows
    past the groups (``Σ sizes < T``) are zero."""
    out = a.new_zeros((a.shape[0], b.shape[2]))
    start = 0
    for e, size in enumerate(group_sizes.tolist()):
        out[start:start + size] = torch.matmul(a[start:start + size], b[e])
        start += size
    return out
