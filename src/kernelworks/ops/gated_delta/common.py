"""What every Gated DeltaNet kernel shares: the log-decay floor, causal chunk products, sequence bounds.

- **Gates.** ``g`` enters the chunk kernels as a cumulative sum ``G`` (log2 units) and decays as
  ``2^{G_i − G_j}``. A ``g = −inf`` (a full reset of the state) would make ``G_i − G_j = −inf − (−inf)`` =
  NaN, and a very negative finite g (−1e30) swamps the cumsum, so that ``G_i − G_j`` for later tokens
  rounds to 0 (decay 1 instead of the true one). :func:`log2_gate` floors each ``g·log2(e)`` at
  :data:`G_FLOOR` (``2^−100``: a reset to 30 digits), so the reset stays a reset and ``G`` stays small
  enough to difference (NaN passes through: it is not floored into a silent reset).
- **Causality.** In chunk form the products over a chunk's tokens are ``M X`` with ``M`` zero above the
  diagonal, and ``tl.dot`` multiplies those zeros by every row of X: a NaN or inf in a later token's row
  (``0 · NaN = NaN``) would reach earlier outputs. :func:`causal_dot` zeroes X's non-finite entries before
  the product and writes NaN from the first one down its column after it — exactly the causal part of
  what the plain product would have spread.
- **Sequences.** A ``cu_seqlens`` table is made safe on the host (:func:`sequence_offsets`: clamped into
  ``[0, T]`` and non-decreasing, so sequences never overlap and a decreasing pair is an empty sequence),
  and every kernel clamps what it reads again (:func:`sequence_bounds`), so no value reaches memory outside
  the tensors. Rows no sequence covers (before ``cu[0]``, past ``cu[N]``) are written as zeros by the
  first and last sequence's programs (:func:`zero_gaps`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops._math import LOG2E
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.launch import cdiv, launch, next_pow2

G_FLOOR = tl.constexpr(-100.0)
"""The least per-token log2-decay: a floored gate scales what came before by ``2^−100`` ≈ 8e-31, a full
reset as ``g = −inf`` is in the recurrence to 30 digits. The floor is a trade: the cumulative ``G`` of
the tokens after a reset sits near −100, where fp32's spacing (7.6e-6) is the error of the decay
differences ``G_i − G_j`` between them (~1e-5 relative in an fp32 result: −160, an exact fp32 zero, would
double it); between tokens with no reset in between, G is as precise as ever. (The fp32 kernels take G's sums in
fp64, :func:`chunk_decays`, so there the difference is exact to fp32 either way.)"""

FLT_MAX = tl.constexpr(3.4028234663852886e38)


@triton.jit
def log2_gate(b_g):
    """Per-token log2 decay ``g·log2(e)`` in fp32, floored at :data:`G_FLOOR` (NaN kept)."""
    b_g = b_g.to(tl.float32) * LOG2E
    return tl.where(b_g < G_FLOOR, G_FLOOR, b_g)


@triton.jit
def chunk_decays(b_g):
    """A chunk's log2 decays from its per-token log2 gates ``b_g [C]``: ``(G [C], G_C, G_s − G_r [C, C],
    G_C − G_s [C])``, fp32, G the cumulative sum within the chunk.

    Only differences of G enter the math, and those are small where they matter (a ratio ``2^(G_s − G_r)``
    underflows past ~126), but G itself grows with the chunk: with saturated gates (g ≈ −30 a token, ~−43 in
    log2) it reaches ~−700 in 16 tokens, where an fp32 ulp is 6e-5, so differences of fp32 cumulative sums
    carried ~4e-5 relative error into every decay factor (``kw check``'s fp32 saturated-gate case, session 16).
    The sums are taken in fp64 and the [C, C] differences formed from an fp32 hi/lo split of them (two fp32
    subtractions instead of one; nothing [C, C] is held in fp64), so each difference is exact to fp32's own
    rounding of it. The fp32 kernels use this; the 16-bit ones round far coarser elsewhere."""
    b_G64 = tl.cumsum(b_g.to(tl.float64), axis=0)
    b_last64 = tl.sum(b_g.to(tl.float64), axis=0)
    b_G = b_G64.to(tl.float32)
    b_lo = (b_G64 - b_G.to(tl.float64)).to(tl.float32)
    b_dG = (b_G[:, None] - b_G[None, :]) + (b_lo[:, None] - b_lo[None, :])
    return b_G, b_last64.to(tl.float32), b_dG, (b_last64 - b_G64).to(tl.float32)


@triton.jit
def _exact_causal_dot(b_m, b_x, acc, PRECISION: tl.constexpr):
    o_c = tl.arange(0, b_x.shape[0])
    m_ok = tl.abs(b_x) <= FLT_MAX            # False for NaN and ±inf
    first = tl.min(tl.where(m_ok, b_x.shape[0], o_c[:, None]), axis=0)
    b_y = tl.dot(b_m, tl.where(m_ok, b_x, 0.0).to(b_m.dtype), acc, input_precision=PRECISION)
    return tl.where(o_c[:, None] >= first[None, :], float("nan"), b_y)


@triton.jit
def causal_dot(b_m, b_x, acc, PRECISION: tl.constexpr, CAUSAL: tl.constexpr = True, CHECKED: tl.constexpr = True):
    """``acc + M X`` for ``M [C, C]`` zero above the diagonal (token-causal) and ``X [C, N]`` a row per
    token, where a non-finite ``X[j, n]`` reaches rows ``i ≥ j`` of column n (as NaN) and no earlier row.

    The exact form runs the product on X with those entries zeroed, so rows before them are bit-equal to
    a run where they were finite, then writes NaN from each down its column. CHECKED: only a tile holding
    a non-finite entry (``x · 0`` is NaN there: one sum tells) takes it, the plain product otherwise.
    CAUSAL False: the plain product. ``acc`` may be None; X is cast to M's dtype for the product."""
    if not CAUSAL:  # compile-time branches: the check is built only where asked for
        b_y = tl.dot(b_m, b_x.to(b_m.dtype), acc, input_precision=PRECISION)
    elif not CHECKED:
        b_y = _exact_causal_dot(b_m, b_x, acc, PRECISION)
    elif tl.sum(tl.sum(b_x * 0.0, 1), 0) == 0.0:
        b_y = tl.dot(b_m, b_x.to(b_m.dtype), acc, input_precision=PRECISION)
    else:
        b_y = _exact_causal_dot(b_m, b_x, acc, PRECISION)
    return b_y


@triton.jit
def sequence_bounds(p_cu, i_n, T):
    """``(bos, eos)`` int64 of sequence ``i_n`` of a ``cu_seqlens`` table, clamped: ``0 ≤ bos ≤ eos ≤ T``
    (a decreasing pair is an empty sequence)."""
    bos = tl.minimum(tl.maximum(tl.load(p_cu + i_n).to(tl.int64), 0), T)
    eos = tl.minimum(tl.maximum(tl.load(p_cu + i_n + 1).to(tl.int64), bos), T)
    return bos, eos


@triton.jit
def zero_rows(p, s_t, lo, hi, o_col, m_col, CHUNK: tl.constexpr):
    """Zeros into rows ``[lo, hi)`` (``s_t`` elements apart) of ``p``, columns ``o_col`` where ``m_col``."""
    o_c = tl.arange(0, CHUNK)
    for t0 in range(lo, hi, CHUNK):
        o_t = (t0 + o_c).to(tl.int64)
        m = (o_t < hi)[:, None] & m_col[None, :]
        tl.store(p + o_t[:, None] * s_t + o_col[None, :], tl.zeros([CHUNK, o_col.shape[0]], dtype=tl.float32)
                 .to(p.dtype.element_ty), mask=m)


@triton.jit
def zero_gaps(p, s_t, bos, eos, T, o_col, m_col, CHUNK: tl.constexpr):
    """Zeros into the rows of a packed ``[T, ·]`` output that no sequence covers, from a program of a
    sequence grid (axis 2): the first sequence's programs write ``[0, bos)``, the last one's ``[eos, T)``
    (with :func:`sequence_offsets`' tables, those are all such rows)."""
    if tl.program_id(2) == 0:
        zero_rows(p, s_t, 0, bos, o_col, m_col, CHUNK)
    if tl.program_id(2) == tl.num_programs(2) - 1:
        zero_rows(p, s_t, eos, T, o_col, m_col, CHUNK)


def sequence_offsets(cu_seqlens: torch.Tensor, T: int) -> torch.Tensor:
    """``cu_seqlens`` as the kernels read it: contiguous int32, clamped into ``[0, T]`` and made
    non-decreasing (a running maximum: an entry below its predecessor makes an empty sequence), on the
    device with no sync. The identity on a valid table; strided or expanded views come back contiguous."""
    return torch.cummax(cu_seqlens.clamp(0, T).to(torch.int32), 0).values


@triton.jit
def _sum_groups_kernel(p_x, p_out, R, RATIO: tl.constexpr, K: tl.constexpr, BLOCK_R: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    """``out[r] = Σ_j x[r·RATIO + j]`` over rows of K, in fp32 and in a fixed order, rounded once to out's
    dtype: the gradient of a q/k head summed over the value heads that share it, in one pass."""
    o_r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    o_k = tl.arange(0, BLOCK_K)
    m = (o_r < R)[:, None] & (o_k < K)[None, :]
    acc = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float32)
    for j in tl.static_range(RATIO):
        acc += tl.load(p_x + (o_r * RATIO + j)[:, None] * K + o_k[None, :], mask=m, other=0.0)
    tl.store(p_out + o_r[:, None] * K + o_k[None, :], acc.to(p_out.dtype.element_ty), mask=m)


def sum_head_groups(x: torch.Tensor, ratio: int, dtype: torch.dtype) -> torch.Tensor:
    """``x`` ``[B, T, H_v, K]`` float32 (contiguous), value heads in groups of ``ratio`` per q/k head, summed
    to ``[B, T, H_v / ratio, K]`` in ``dtype`` (one kernel; ``x.view(…, ratio, K).sum(3).to(dtype)`` took a
    reduction and a cast, ~0.46 ms of a 16k-token Qwen3-Next backward on the H100)."""
    if x.dtype != torch.float32 or not x.is_contiguous() or x.dim() != 4 or x.shape[2] % ratio:
        raise ValueError(f"sum_head_groups: expected a contiguous float32 [B, T, H_v, K] with H_v a multiple of "
                         f"{ratio}, got {x.dtype} {tuple(x.shape)} strides {x.stride()}")
    B, T, H_v, K = x.shape
    out = empty((B, T, H_v // ratio, K), dtype=dtype, device=x.device)
    rows = B * T * (H_v // ratio)
    block_k = next_pow2(K)
    block_r = max(1, 4096 // block_k)
    launch(_sum_groups_kernel, (cdiv(rows, block_r),), x, out, rows,
           num_warps=4, RATIO=ratio, K=K, BLOCK_R=block_r, BLOCK_K=block_k)
    return out
