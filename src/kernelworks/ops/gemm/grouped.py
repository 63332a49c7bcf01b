"""``grouped_matmul``: the mixture-of-experts GEMM — one product per expert over its rows, one launch.

``A [T, K]`` holds every token's row, sorted by expert (``group_sizes[e]`` rows for expert ``e``, possibly
0); ``B [E, K, N]`` one weight per expert; ``C[rows of e] = A[rows of e] @ B[e]``.

The tile schedule is computed *inside the kernel* from the ``[E]`` sizes, so a call never synchronises with
the host (the sizes usually come from a router on the GPU): each program loads the sizes (E ≤ a few
hundred ints, L2-resident), prefix-sums the per-expert m-tile counts with ``tl.cumsum`` and finds its
expert by counting the experts whose tiles end at or before its own tile index. The grid is sized for the
worst case without reading the sizes, ``Σ_e ⌈s_e/BLOCK_M⌉ ≤ ⌈T/BLOCK_M⌉ + E`` m-tiles, and programs past
the real count return at once. The m-tile index is the fastest grid axis, so the programs in flight share
one column block of the experts' weights (each expert's ``B`` tile is read from DRAM about once).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops.gemm.api import check_operand
from kernelworks.ops.gemm.forward import _precision
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.validate import check_dtype, check_same_device


@triton.jit
def _grouped_matmul_kernel(
    p_a, p_b, p_c, p_sizes,
    N, K, E,
    s_am, s_ak, s_be, s_bk, s_bn, s_cm, s_cn,
    PRECISION: tl.constexpr, E_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """``C[r0_e + i] = A[r0_e + i] @ B[e]`` for the rows ``i < s_e`` of each expert ``e`` (``r0_e = Σ_{f<e}
    s_f``). Grid ``(⌈T/BLOCK_M⌉ + E, ⌈N/BLOCK_N⌉)``; program ``(i_tm, i_n)`` takes the ``i_tm``-th m-tile of
    the concatenated per-expert tilings."""
    i_tm = tl.program_id(0)
    i_n = tl.program_id(1)
    o_e = tl.arange(0, E_POW2)
    b_size = tl.load(p_sizes + o_e, mask=o_e < E, other=0)
    b_tiles = (b_size + BLOCK_M - 1) // BLOCK_M
    b_tile_end = tl.cumsum(b_tiles, 0)
    i_e = tl.sum((b_tile_end <= i_tm).to(tl.int32), 0)  # experts entirely before this tile
    if i_e < E:
        m_e = o_e == i_e
        size = tl.sum(tl.where(m_e, b_size, 0), 0)
        row0 = tl.sum(tl.where(m_e, tl.cumsum(b_size, 0) - b_size, 0), 0)
        tile0 = tl.sum(tl.where(m_e, b_tile_end - b_tiles, 0), 0)
        o_r = (i_tm - tile0) * BLOCK_M + tl.arange(0, BLOCK_M)  # rows within the expert's group
        m_m = o_r < size
        o_m = row0.to(tl.int64) + o_r
        o_n = i_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_n = o_n < N
        o_k = tl.arange(0, BLOCK_K)
        p_a_k = p_a + o_m[:, None] * s_am + o_k[None, :] * s_ak
        p_b_k = p_b + i_e.to(tl.int64) * s_be + o_k[:, None] * s_bk + o_n[None, :] * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            m_k = (k + o_k) < K
            b_a = tl.load(p_a_k, mask=m_m[:, None] & m_k[None, :], other=0.0)
            b_b = tl.load(p_b_k, mask=m_k[:, None] & m_n[None, :], other=0.0)
            acc = tl.dot(b_a, b_b, acc, input_precision=PRECISION)
            p_a_k += BLOCK_K * s_ak
            p_b_k += BLOCK_K * s_bk
        p_c_t = p_c + o_m[:, None] * s_cm + o_n[None, :] * s_cn
        tl.store(p_c_t, acc.to(p_c.dtype.element_ty), mask=m_m[:, None] & m_n[None, :])


@cached_plan
def grouped_plan(t: int, n: int, e: int, itemsize: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)``. Tokens per expert set BLOCK_M: a group
    shorter than the tile wastes the rest of it, so average groups under 256 rows take 64-row tiles."""
    if interpreter_active():
        return 16, 32, 32, 4, 1
    bm = 128 if t >= 256 * e else 64
    bk = 32 if itemsize == 4 else 64
    return bm, 128, bk, 8 if bm == 128 else 4, 3


def _grouped_forward(a: torch.Tensor, b: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    t, (n_exp, k, n) = a.shape[0], b.shape
    out = empty((t, n), dtype=a.dtype, device=a.device)
    if out.numel() == 0 or n_exp == 0:
        return out
    bm, bn, bk, warps, stages = grouped_plan(t, n, n_exp, a.element_size())
    grid = (cdiv(t, bm) + n_exp, cdiv(n, bn), 1)
    launch(_grouped_matmul_kernel, grid, a, b, out, sizes, n, k, n_exp,
           *a.stride(), *b.stride(), *out.stride(),
           num_warps=warps, num_stages=stages, PRECISION=_precision(a.dtype), E_POW2=next_pow2(n_exp),
           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    return out


_grouped_op = torch.library.custom_op("kernelworks::grouped_matmul", mutates_args=())(_grouped_forward)
"""``kernelworks::grouped_matmul``; eager calls run the body directly (no dispatch overhead)."""


@_grouped_op.register_fake
def _grouped_fake(a, b, sizes):
    return a.new_empty((a.shape[0], b.shape[2]))


def _sizes(group_sizes: object, offsets: object, n_experts: int, a: torch.Tensor) -> torch.Tensor:
    """The ``[E]`` int32 sizes on ``a``'s device, from ``group_sizes`` (tensor or list) or ``offsets``."""
    if (group_sizes is None) == (offsets is None):
        raise ValueError("group_sizes, offsets: expected exactly one of them")
    if offsets is not None:
        name, t, want = "offsets", offsets, n_experts + 1
    else:
        name, t, want = "group_sizes", group_sizes, n_experts
    if isinstance(t, (list, tuple)):
        if any(not isinstance(v, int) or v < 0 for v in t):
            raise ValueError(f"{name}: expected non-negative ints, got {list(t)}")
        total = t[-1] - t[0] if offsets is not None and t else sum(t)
        if total != a.shape[0]:
            raise ValueError(f"{name}: expected groups covering a's {a.shape[0]} rows, got {total}")
        t = torch.tensor(t, dtype=torch.int32, device=a.device)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or a list of ints, got {type(t).__name__}")
    check_dtype(name, t, (torch.int32, torch.int64))
    check_same_device(("a", name), (a, t))
    if tuple(t.shape) != (want,):
        raise ValueError(f"{name}: expected shape ({want},) for b's {n_experts} experts, got {tuple(t.shape)}")
    sizes = t[1:] - t[:-1] if offsets is not None else t
    return sizes if sizes.dtype == torch.int32 else sizes.to(torch.int32)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_sizes: torch.Tensor | list[int] | None = None, *,
                   offsets: torch.Tensor | list[int] | None = None) -> torch.Tensor:
    """Per-expert products in one launch: ``C[rows of e] = A[rows of e] @ B[e]``. Forward only.

    Args:
        a: ``[T, K]`` tokens sorted by expert; float16, bfloat16 or float32, any strides.
        b: ``[E, K, N]`` in ``a``'s dtype, any strides: expert weights stored ``[E, N, K]`` (each an
            ``nn.Linear`` weight) are passed as ``w.transpose(1, 2)``, no copy.
        group_sizes: ``[E]`` int32/int64 rows per expert (0 allowed), a tensor on ``a``'s device (never read
            on the host: no synchronisation) or a list of ints (checked to sum to T).
        offsets: instead of ``group_sizes``: ``[E + 1]`` row offsets, ``offsets[0] = 0``, ``offsets[E] = T``.

    The groups must cover ``a``'s rows exactly (``Σ sizes = T``); with a device tensor that is the caller's
    contract (rows past the last group are left unwritten).

    Returns:
        ``[T, N]`` in ``a``'s dtype, fp32 accumulation.

    Example::

        y = kw.grouped_matmul(x_sorted, w_experts.transpose(1, 2), tokens_per_expert)   # w: [E, N, K]
    """
    check_operand("a", a, (2,))
    check_operand("b", b, (3,))
    check_same_device(("a", "b"), (a, b))
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: expected one dtype, got a={a.dtype}, b={b.dtype}")
    if b.shape[1] != a.shape[1]:
        raise ValueError(f"b: expected [E, {a.shape[1]}, N] (a's K), got shape {tuple(b.shape)}")
    sizes = _sizes(group_sizes, offsets, b.shape[0], a)
    op = _grouped_op if torch.compiler.is_compiling() else _grouped_forward
    return op(a, b, sizes)
