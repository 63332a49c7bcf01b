"""Chunk-parallel prefill, forward: the intra-chunk work of every chunk in parallel, only the state scan
sequential (the alternative to ``prefill_fwd.py``'s one-program-per-sequence design, which is
latency-bound: its per-chunk forward substitution and small tiles sit on the scan's critical path).

Notation as in ``prefill_fwd.py`` (derivation in docs/notes/gated_delta.md): per chunk of C tokens, ``G``
the chunk-local cumulative log-decay (here in log2 units, ``G = log2(e)·cumsum(g)``), ``γ = 2^G``,
``A = strictly-lower(β_s (k_s·k_r) 2^{G_s−G_r})``, ``T = (I + A)⁻¹``. Four kernels:

K1a ``_chunk_inverse_kernel`` — grid (chunks, H_v, B), all chunks in parallel: G (fp32) and T by blocks
    (four C/4-row diagonal blocks inverted by forward substitution, merged with dots), T stored in the
    input dtype.
K1b ``_chunk_wy_kernel`` — same grid: ``W = T (βγ ⊙ K)`` ``[C, K]`` and ``Ũ = T (w ⊙ V)`` ``[C, V]``, in
    the input dtype (as fla does). (One kernel did both before: 8 warps, one program per SM, 1.24 ms of
    the forward's 2.65 ms on the H100 — its serial substitution exposed.)
K2 ``_state_pass_kernel`` — grid (V-blocks, H_v, sequences), chunks in order, the state fp32 in registers:
    ``U = Ũ − W S₀ᵀ`` (optionally the fp32 state split hi + lo for 16-bit dots);
    ``S_C = γ_C S₀ + (2^{G_C−G} ⊙ U)ᵀ K``.
    FUSE_O: also the output here, ``O = scale [(γ ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ 2^{G_t−G_s}) U]`` (no state
    round trip, the output work serialised with the scan). Otherwise it stores U and every chunk-start
    state ``S₀`` for
K3 ``_chunk_output_kernel`` — grid (V-blocks, chunks, B·H_v), all chunks in parallel: the output formula.

The public forward is K1a + K2 fused with FUSE_WY: ``U = T [(w ⊙ V) − (βγ ⊙ K) S₀ᵀ]`` straight from T, so
K1b and K3 do not run and only q, k, v, T, the gates and o cross DRAM (H100, B 8 T 4096 H 16, kernel
times: 544 µs against 1107 for the four-kernel form and 1028 for fla). The backward's recompute runs K2
unfused with U formed from T (``wy_in_scan``), storing U and the chunk-start states (bf16) and taking the
forward's T and G (``inverses``); K1b and K3 remain as the measured four-kernel alternative.

Bounds and causality (``common.py``): varlen tables are clamped and made non-decreasing on the device
(:func:`_varlen_chunks`) and clamped again where read; g is floored (a reset stays a reset); K1a inverts
finite blocks, the products over a chunk's tokens are causal (K1b, K3, unfused K2: checked; the fused K2:
plain, then an EXACT launch redoes the rare programs whose output went non-finite), so a NaN or inf in
token t reaches no output before t.

Intermediates are token-indexed (``[B, T, H_v, ·]``, contiguous), so dense and packed (varlen) batches
share them; chunk-start states are rows ``[n_chunks, H_v, V, K]`` (sequence n's chunk j at row
``coff[n] + j``: ``n · cdiv(T, C)`` dense, the exclusive cumsum of ``cdiv(len, C)`` varlen) — the layout
``prefill_bwd.py``'s ``hs`` uses.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernelworks.ops.gated_delta.common import (
    FLT_MAX,
    causal_dot,
    log2_gate,
    sequence_bounds,
    sequence_offsets,
    zero_gaps,
)
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, planning_active, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

# --------------------------------------------------------------------------------------------- helpers


@triton.jit
def _chunk_span(p_cs, p_ce, i_c, T, CHUNK: tl.constexpr, IS_VARLEN: tl.constexpr):
    """``(t0, n)``: the chunk's first token (in its batch row) and how many tokens its sequence has from
    there on (≥ CHUNK for all but a sequence's last chunk; 0 for a varlen slot past the last chunk). The
    table's values are clamped into ``[0, T]`` (``0 ≤ t0 ≤ t0 + n ≤ T`` whatever they hold)."""
    if IS_VARLEN:
        t0 = tl.minimum(tl.maximum(tl.load(p_cs + i_c).to(tl.int64), 0), T)
        n = (tl.minimum(tl.maximum(tl.load(p_ce + i_c).to(tl.int64), t0), T) - t0).to(tl.int32)
    else:
        t0 = i_c.to(tl.int64) * CHUNK
        n = (T - t0).to(tl.int32)
    return t0, n


@triton.jit
def _chunk_program(p_cs, p_ce, T, HV_PER_QK, H_V: tl.constexpr, CHUNK: tl.constexpr, IS_VARLEN: tl.constexpr,
                   SPLIT: tl.constexpr = 1):
    """A program of a ``(chunk slots · SPLIT, H_v, B)`` grid: ``(i_c, i_b, i_h, i_hq, t0, n, row0)`` — the
    chunk slot, batch row, value head and its q/k head, the chunk's span (:func:`_chunk_span`; ``n ≤ 0``: a
    varlen slot past the last chunk, nothing to do) and the int64 row of its first token in the
    ``[B, T, H_v, ·]`` intermediates. SPLIT programs share a chunk (``program_id(0) % SPLIT`` tells them
    apart), adjacent in launch order so that they read its tiles at about the same time (L2 hits)."""
    i_c = tl.program_id(0) // SPLIT
    i_h = tl.program_id(1).to(tl.int64)
    i_b = tl.program_id(2).to(tl.int64)
    t0, n = _chunk_span(p_cs, p_ce, i_c, T, CHUNK, IS_VARLEN)
    t0 = t0.to(tl.int64)  # already int64 (_chunk_span): a no-op that lets kw lint see the 64-bit offsets
    return i_c, i_b, i_h, i_h // HV_PER_QK, t0, n, (i_b * T + t0) * H_V + i_h


@triton.jit
def _sequence_span(p_cu, p_coff, i_n, T, NT, IS_VARLEN: tl.constexpr):
    """Where sequence ``i_n`` of a scan grid lies: ``(i_b, bos, L, coff)`` — its batch row and first token
    in that row (int64: B·T·H·K passes 2^31 at long contexts), its length (int32) and its first chunk-state
    row. Dense: row ``i_n``, tokens ``[0, T)``, chunks from ``i_n · NT``; varlen (B = 1): tokens
    ``[cu[n], cu[n + 1])`` (clamped: :func:`~kernelworks.ops.gated_delta.common.sequence_bounds`), chunks
    from ``coff[n]``."""
    if IS_VARLEN:
        i_b = i_n * 0
        bos, eos = sequence_bounds(p_cu, i_n, T)
        L = (eos - bos).to(tl.int32)
        coff = tl.load(p_coff + i_n).to(tl.int64)
    else:
        i_b = i_n
        bos = i_n * 0
        L = T
        coff = i_n * NT
    return i_b.to(tl.int64), bos.to(tl.int64), L, coff


@triton.jit
def _inv4_unit_lower(b_A0, b_A1, b_A2, b_A3, SUB: tl.constexpr):
    """``(I + A_i)⁻¹`` for four strictly-lower ``[SUB, SUB]`` fp32 tiles at once (independent chains: the
    steps of one interleave with the others'). Forward substitution: row i of T is ``e_i − Σ_{j<i} A_ij
    T_j``, rows in order (row i reads only finished rows)."""
    o = tl.arange(0, SUB)
    eye = tl.where(o[:, None] == o[None, :], 1.0, 0.0)
    b_T0, b_T1, b_T2, b_T3 = eye, eye, eye, eye
    for i in range(1, SUB):
        m_i = o[:, None] == i
        b_T0 = tl.where(m_i, b_T0 - tl.sum(tl.sum(tl.where(m_i, b_A0, 0.0), 0)[:, None] * b_T0, 0)[None, :], b_T0)
        b_T1 = tl.where(m_i, b_T1 - tl.sum(tl.sum(tl.where(m_i, b_A1, 0.0), 0)[:, None] * b_T1, 0)[None, :], b_T1)
        b_T2 = tl.where(m_i, b_T2 - tl.sum(tl.sum(tl.where(m_i, b_A2, 0.0), 0)[:, None] * b_T2, 0)[None, :], b_T2)
        b_T3 = tl.where(m_i, b_T3 - tl.sum(tl.sum(tl.where(m_i, b_A3, 0.0), 0)[:, None] * b_T3, 0)[None, :], b_T3)
    return b_T0, b_T1, b_T2, b_T3


@triton.jit
def _inv_unit_lower_product(b_A, PRECISION: tl.constexpr = "ieee"):
    """``(I + A)⁻¹`` for a strictly-lower ``[SUB, SUB]`` fp32 tile, SUB ≤ 16, with no serial row loop: A is
    nilpotent (``A^SUB = 0``), so ``(I + A)⁻¹ = Σ_m (−A)^m = (I − A)(I + A²)(I + A⁴)(I + A⁸)`` — three
    squarings and three products, fp32 FMA dots (the same value as forward substitution up to rounding)."""
    o = tl.arange(0, b_A.shape[0])
    b_A2 = _dot32(b_A, b_A, PRECISION)
    b_A4 = _dot32(b_A2, b_A2, PRECISION)
    b_A8 = _dot32(b_A4, b_A4, PRECISION)
    b_T = tl.where(o[:, None] == o[None, :], 1.0, 0.0) - b_A
    b_T += _dot32(b_T, b_A2, PRECISION)
    b_T += _dot32(b_T, b_A4, PRECISION)
    b_T += _dot32(b_T, b_A8, PRECISION)
    return b_T


@triton.jit
def _a_block(b_ki, b_kj, b_Gi, b_Gj, b_bi, DIAG: tl.constexpr, SUB: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Block (i, j) of ``A = β_s (k_s·k_r) 2^{G_s − G_r}``, fp32 ``[SUB, SUB]``; on the diagonal block only
    the strictly lower part, its exponent masked BEFORE exp2 (the upper part's is > 0 and may overflow)."""
    b_kk = tl.dot(b_ki, tl.trans(b_kj), input_precision=DOT_PRECISION)
    b_dG = b_Gi[:, None] - b_Gj[None, :]
    if DIAG:
        o = tl.arange(0, SUB)
        m = o[:, None] > o[None, :]
        return tl.where(m, b_kk * tl.exp2(tl.where(m, b_dG, 0.0)) * b_bi[:, None], 0.0)
    return b_kk * tl.exp2(b_dG) * b_bi[:, None]


@triton.jit
def _finite(b_A):
    """``b_A`` with its non-finite entries zeroed."""
    return tl.where(tl.abs(b_A) <= FLT_MAX, b_A, 0.0)


@triton.jit
def _dot32(a, b, PRECISION: tl.constexpr = "ieee"):
    """An fp32 product of two small T/A blocks (16×16×16): ``ieee`` FMA by default (the backward's choice);
    the forward's inverse kernel takes ``tf32`` tensor-core MMA on the GPU — T is rounded to 16 bits
    after, so tf32's 10-bit operands leave its error unchanged (H100 sweep: o / final-state / saturated
    rel. errors 3.4e-3 / 2.4e-3 / 4.2e-3 either way) while the kernel drops from 260 to 148 µs (as FMA
    dots these products need shared-memory layout shuffles: 950 shared-memory ops and 77 barriers
    against 124 and 43)."""
    return tl.dot(a, b, input_precision=PRECISION)


# ----------------------------------------------------------------------------------------------- K1


@triton.jit
def _store_block(p, b, o_r, m_r, o_c0, ROW: tl.constexpr, SUB: tl.constexpr):
    """Store a ``[SUB, SUB]`` tile at rows ``o_r`` (``ROW`` elements apart), columns ``o_c0 … + SUB``."""
    o_c = o_c0 + tl.arange(0, SUB)
    tl.store(p + o_r[:, None] * ROW + o_c[None, :], b, mask=m_r[:, None])


@triton.jit
def _chunk_inverse_kernel(
    p_k, p_g, p_beta, p_cs, p_ce, p_G, p_T,
    s_kb, s_kt, s_kh, s_gb, s_gt, s_gh, s_bb, s_bt, s_bh,
    T, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, SUB: tl.constexpr, BLOCK_K: tl.constexpr, IS_VARLEN: tl.constexpr,
    INV_PRODUCT: tl.constexpr, DOT_PRECISION: tl.constexpr, INV_PRECISION: tl.constexpr = "ieee",
):
    """Per chunk (C = 4·SUB tokens) and value head: ``G = log2(e) cumsum(g)`` ``[C]`` fp32 and
    ``T = (I + A)⁻¹`` ``[C, C]`` (stored in k's dtype, the upper triangle as zeros).

    Grid ``(n_chunks, H_v, B)``; dense: chunk i starts at token i·C of batch row program_id(2); varlen
    (B = 1): chunk slot i covers tokens ``[cs[i], min(cs[i] + C, ce[i]))``. k ``[B, T, H_qk, K]`` (unit
    last-dim stride), g/beta ``[B, T, H_v]`` (any strides); G ``[B, T, H_v]``, T ``[B, T, H_v, C]``
    contiguous (token t's row of its chunk's T).

    T by blocks: with ``L = I + A`` split in 4×4 blocks of SUB rows, ``T_ii = L_ii⁻¹`` (forward
    substitution, 4 chains at once) and ``T_ij = −T_ii Σ_{j≤m<i} A_im T_mj`` (dots), so the serial part
    is SUB steps on SUB×SUB tiles instead of C steps on C×C (INV_PRODUCT: the diagonal blocks by the
    product form of :func:`_inv_unit_lower_product` instead, no serial steps). This kernel holds no
    V-sized tile: it runs with few warps and many programs per SM, whose serial substitutions overlap (inside the
    8-warp kernel that also formed W and Ũ, one program per SM sat on the substitution's barriers: 1.24 ms
    of a 2.65 ms forward on the H100 at B 8 T 4096 H 16).
    """
    _, i_b, i_h, i_hq, t0, n, row0 = _chunk_program(p_cs, p_ce, T, HV_PER_QK, H_V, 4 * SUB, IS_VARLEN)
    if n <= 0:  # a varlen slot past the last chunk
        return
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_g += i_b * s_gb + t0 * s_gt + i_h * s_gh
    p_beta += i_b * s_bb + t0 * s_bt + i_h * s_bh
    p_G += row0
    p_T += row0 * (4 * SUB)

    o_s = tl.arange(0, SUB)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    # the four SUB-row blocks of the chunk; rows past the sequence end load k = g = β = 0
    o_t0, o_t1, o_t2, o_t3 = o_s, o_s + SUB, o_s + 2 * SUB, o_s + 3 * SUB
    m_t0, m_t1, m_t2, m_t3 = o_t0 < n, o_t1 < n, o_t2 < n, o_t3 < n
    b_k0 = tl.load(p_k + o_t0[:, None] * s_kt + o_k[None, :], mask=m_t0[:, None] & m_k[None, :], other=0.0)
    b_k1 = tl.load(p_k + o_t1[:, None] * s_kt + o_k[None, :], mask=m_t1[:, None] & m_k[None, :], other=0.0)
    b_k2 = tl.load(p_k + o_t2[:, None] * s_kt + o_k[None, :], mask=m_t2[:, None] & m_k[None, :], other=0.0)
    b_k3 = tl.load(p_k + o_t3[:, None] * s_kt + o_k[None, :], mask=m_t3[:, None] & m_k[None, :], other=0.0)
    DT = b_k0.dtype
    b_g0 = log2_gate(tl.load(p_g + o_t0 * s_gt, mask=m_t0, other=0.0))
    b_g1 = log2_gate(tl.load(p_g + o_t1 * s_gt, mask=m_t1, other=0.0))
    b_g2 = log2_gate(tl.load(p_g + o_t2 * s_gt, mask=m_t2, other=0.0))
    b_g3 = log2_gate(tl.load(p_g + o_t3 * s_gt, mask=m_t3, other=0.0))
    b_b0 = tl.load(p_beta + o_t0 * s_bt, mask=m_t0, other=0.0).to(tl.float32)
    b_b1 = tl.load(p_beta + o_t1 * s_bt, mask=m_t1, other=0.0).to(tl.float32)
    b_b2 = tl.load(p_beta + o_t2 * s_bt, mask=m_t2, other=0.0).to(tl.float32)
    b_b3 = tl.load(p_beta + o_t3 * s_bt, mask=m_t3, other=0.0).to(tl.float32)
    # G: cumsum within each block plus the totals of the blocks before it
    b_G0 = tl.cumsum(b_g0, 0)
    b_G1 = tl.cumsum(b_g1, 0) + tl.sum(b_g0, 0)
    b_G2 = tl.cumsum(b_g2, 0) + (tl.sum(b_g0, 0) + tl.sum(b_g1, 0))
    b_G3 = tl.cumsum(b_g3, 0) + (tl.sum(b_g0, 0) + tl.sum(b_g1, 0) + tl.sum(b_g2, 0))
    tl.store(p_G + o_t0 * H_V, b_G0, mask=m_t0)
    tl.store(p_G + o_t1 * H_V, b_G1, mask=m_t1)
    tl.store(p_G + o_t2 * H_V, b_G2, mask=m_t2)
    tl.store(p_G + o_t3 * H_V, b_G3, mask=m_t3)

    # A by blocks (fp32), the lower triangle of blocks only
    b_A00 = _a_block(b_k0, b_k0, b_G0, b_G0, b_b0, True, SUB, DOT_PRECISION)
    b_A11 = _a_block(b_k1, b_k1, b_G1, b_G1, b_b1, True, SUB, DOT_PRECISION)
    b_A22 = _a_block(b_k2, b_k2, b_G2, b_G2, b_b2, True, SUB, DOT_PRECISION)
    b_A33 = _a_block(b_k3, b_k3, b_G3, b_G3, b_b3, True, SUB, DOT_PRECISION)
    b_A10 = _a_block(b_k1, b_k0, b_G1, b_G0, b_b1, False, SUB, DOT_PRECISION)
    b_A21 = _a_block(b_k2, b_k1, b_G2, b_G1, b_b2, False, SUB, DOT_PRECISION)
    b_A32 = _a_block(b_k3, b_k2, b_G3, b_G2, b_b3, False, SUB, DOT_PRECISION)
    b_A20 = _a_block(b_k2, b_k0, b_G2, b_G0, b_b2, False, SUB, DOT_PRECISION)
    b_A31 = _a_block(b_k3, b_k1, b_G3, b_G1, b_b3, False, SUB, DOT_PRECISION)
    b_A30 = _a_block(b_k3, b_k0, b_G3, b_G0, b_b3, False, SUB, DOT_PRECISION)
    # causality: the inverse runs on finite blocks (non-finite entries zeroed), so a NaN or inf in a token
    # never reaches an earlier row of T through a product's zero (T's rows from there on are then finite
    # but meaningless: the scan's products make those outputs NaN, ``_state_pass_kernel``)
    b_A00, b_A11, b_A22, b_A33 = _finite(b_A00), _finite(b_A11), _finite(b_A22), _finite(b_A33)
    b_A10, b_A21, b_A32 = _finite(b_A10), _finite(b_A21), _finite(b_A32)
    b_A20, b_A31, b_A30 = _finite(b_A20), _finite(b_A31), _finite(b_A30)
    # T = (I + A)⁻¹: the diagonal blocks, then the off-diagonal ones a sub-diagonal at a time; each block
    # rounded to the operand dtype (as every chunked implementation does) and stored as soon as it is
    # final, the blocks above the diagonal as zeros so the next kernel loads T as one [C, C] tile
    ROW: tl.constexpr = H_V * 4 * SUB
    b_0 = tl.zeros([SUB, SUB], dtype=DT)
    _store_block(p_T, b_0, o_t0, m_t0, SUB, ROW, SUB)
    _store_block(p_T, b_0, o_t0, m_t0, 2 * SUB, ROW, SUB)
    _store_block(p_T, b_0, o_t0, m_t0, 3 * SUB, ROW, SUB)
    _store_block(p_T, b_0, o_t1, m_t1, 2 * SUB, ROW, SUB)
    _store_block(p_T, b_0, o_t1, m_t1, 3 * SUB, ROW, SUB)
    _store_block(p_T, b_0, o_t2, m_t2, 3 * SUB, ROW, SUB)
    if INV_PRODUCT:
        b_T00 = _inv_unit_lower_product(b_A00, INV_PRECISION)
        b_T11 = _inv_unit_lower_product(b_A11, INV_PRECISION)
        b_T22 = _inv_unit_lower_product(b_A22, INV_PRECISION)
        b_T33 = _inv_unit_lower_product(b_A33, INV_PRECISION)
    else:
        b_T00, b_T11, b_T22, b_T33 = _inv4_unit_lower(b_A00, b_A11, b_A22, b_A33, SUB)
    _store_block(p_T, b_T00.to(DT), o_t0, m_t0, 0, ROW, SUB)
    _store_block(p_T, b_T11.to(DT), o_t1, m_t1, SUB, ROW, SUB)
    _store_block(p_T, b_T22.to(DT), o_t2, m_t2, 2 * SUB, ROW, SUB)
    _store_block(p_T, b_T33.to(DT), o_t3, m_t3, 3 * SUB, ROW, SUB)
    P: tl.constexpr = INV_PRECISION
    b_T10 = -_dot32(b_T11, _dot32(b_A10, b_T00, P), P)
    _store_block(p_T, b_T10.to(DT), o_t1, m_t1, 0, ROW, SUB)
    b_T21 = -_dot32(b_T22, _dot32(b_A21, b_T11, P), P)
    _store_block(p_T, b_T21.to(DT), o_t2, m_t2, SUB, ROW, SUB)
    b_T32 = -_dot32(b_T33, _dot32(b_A32, b_T22, P), P)
    _store_block(p_T, b_T32.to(DT), o_t3, m_t3, 2 * SUB, ROW, SUB)
    b_T20 = -_dot32(b_T22, _dot32(b_A20, b_T00, P) + _dot32(b_A21, b_T10, P), P)
    _store_block(p_T, b_T20.to(DT), o_t2, m_t2, 0, ROW, SUB)
    b_T31 = -_dot32(b_T33, _dot32(b_A31, b_T11, P) + _dot32(b_A32, b_T21, P), P)
    _store_block(p_T, b_T31.to(DT), o_t3, m_t3, SUB, ROW, SUB)
    b_T30 = -_dot32(b_T33, _dot32(b_A30, b_T00, P) + _dot32(b_A31, b_T10, P) + _dot32(b_A32, b_T20, P), P)
    _store_block(p_T, b_T30.to(DT), o_t3, m_t3, 0, ROW, SUB)


@triton.jit
def _chunk_wy_kernel(
    p_k, p_v, p_beta, p_w, p_G, p_T, p_cs, p_ce, p_W, p_U,
    s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_bb, s_bt, s_bh, s_wb, s_wt, s_wh,
    T, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_W: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """``W = T (βγ ⊙ K)`` ``[C, K]`` and ``Ũ = T (w ⊙ V)`` ``[C, V]`` for one chunk and value head (T and G
    from :func:`_chunk_inverse_kernel`; two ``[C, C] × [C, ·]`` tensor-core products, fp32 accumulation,
    one rounding at the store). Grid and layouts as that kernel's; v ``[B, T, H_v, V]``, w ``[B, T, H_v]``;
    W ``[B, T, H_v, K]``, U ``[B, T, H_v, V]`` contiguous, in k's dtype."""
    _, i_b, i_h, i_hq, t0, n, row0 = _chunk_program(p_cs, p_ce, T, HV_PER_QK, H_V, CHUNK, IS_VARLEN)
    if n <= 0:  # a varlen slot past the last chunk
        return
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_v += i_b * s_vb + t0 * s_vt + i_h * s_vh
    p_beta += i_b * s_bb + t0 * s_bt + i_h * s_bh
    p_w += i_b * s_wb + t0 * s_wt + i_h * s_wh
    p_G += row0
    p_T += row0 * CHUNK
    p_W += row0 * K
    p_U += row0 * V

    o_t = tl.arange(0, CHUNK)
    m_t = o_t < n
    o_k = tl.arange(0, BLOCK_K)
    m_tk = m_t[:, None] & (o_k < K)[None, :]
    o_v = tl.arange(0, BLOCK_V)
    m_tv = m_t[:, None] & (o_v < V)[None, :]
    # rows past the sequence end: T, k, v, β, w load as 0, so W and Ũ rows of real tokens are exact
    b_T = tl.load(p_T + o_t[:, None] * (H_V * CHUNK) + o_t[None, :], mask=m_t[:, None], other=0.0)
    b_G = tl.load(p_G + o_t * H_V, mask=m_t, other=0.0)
    b_b = tl.load(p_beta + o_t * s_bt, mask=m_t, other=0.0).to(tl.float32)
    b_k = tl.load(p_k + o_t[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
    DT = b_k.dtype
    b_y = (b_k * (b_b * tl.exp2(b_G))[:, None]).to(DT)
    b_W = causal_dot(b_T, b_y, None, DOT_PRECISION)
    tl.store(p_W + o_t[:, None] * (H_V * K) + o_k[None, :], b_W.to(DT), mask=m_tk)
    b_w = tl.load(p_w + o_t * s_wt, mask=m_t, other=0.0).to(tl.float32) if HAS_W else b_b
    b_x = (tl.load(p_v + o_t[:, None] * s_vt + o_v[None, :], mask=m_tv, other=0.0) * b_w[:, None]).to(DT)
    b_U = causal_dot(b_T, b_x, None, DOT_PRECISION)
    tl.store(p_U + o_t[:, None] * (H_V * V) + o_v[None, :], b_U.to(DT), mask=m_tv)


# ----------------------------------------------------------------------------------------------- K2


@triton.jit
def _output_state_part(p_q_tile, m_tk, b_G, b_s_hi, b_s_lo, SPLIT_O: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """``(q, (2^G ⊙ Q) S₀ᵀ)``: the chunk's q tile and the state's share of its output (fp32 ``[C,
    BLOCK_V]``), the state as one 16-bit operand or (SPLIT_O) split hi + lo."""
    b_q = tl.load(p_q_tile, mask=m_tk, other=0.0)
    b_qg = (b_q * tl.exp2(b_G)[:, None]).to(b_q.dtype)
    b_o = tl.dot(b_qg, b_s_hi, input_precision=DOT_PRECISION)
    if SPLIT_O:
        b_o = tl.dot(b_qg, b_s_lo, b_o, input_precision=DOT_PRECISION)
    return b_q, b_o


@triton.jit
def _u_from_t(p_T, p_beta, p_w, p_v, b_k, b_G, b_s_hi, b_s_lo, o_t, o_c, o_v, m_t, m_tv, s_bt, s_wt, s_vt,
              H_V: tl.constexpr, CHUNK: tl.constexpr, HAS_W: tl.constexpr, SPLIT_STATE: tl.constexpr,
              DOT_PRECISION: tl.constexpr, CAUSAL: tl.constexpr, CHECKED: tl.constexpr = True):
    """``U = T [(w ⊙ V) − (2^G β ⊙ K) S₀ᵀ]`` fp32 ``[C, BLOCK_V]`` for one chunk (the scan's FUSE_WY form),
    T's product causal (``common.causal_dot``: CHECKED or exact) or plain. Rows past the sequence end: T,
    β, w, v load as 0."""
    DT = b_k.dtype
    b_T = tl.load(p_T + o_t[:, None] * (H_V * CHUNK) + o_c[None, :], mask=m_t[:, None], other=0.0)
    b_bt = tl.load(p_beta + o_t * s_bt, mask=m_t, other=0.0).to(tl.float32)
    b_ws = tl.load(p_w + o_t * s_wt, mask=m_t, other=0.0).to(tl.float32) if HAS_W else b_bt
    b_y = (b_k * (b_bt * tl.exp2(b_G))[:, None]).to(DT)
    b_x = tl.load(p_v + o_t[:, None] * s_vt + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
    b_d = b_x * b_ws[:, None] - tl.dot(b_y, b_s_hi, input_precision=DOT_PRECISION)
    if SPLIT_STATE:
        b_d -= tl.dot(b_y, b_s_lo, input_precision=DOT_PRECISION)
    return causal_dot(b_T, b_d, None, DOT_PRECISION, CAUSAL, CHECKED)


@triton.jit
def _intra_chunk_output(b_q, b_k, b_G, b_u, b_o, m_p, DOT_PRECISION: tl.constexpr, EXACT: tl.constexpr):
    """``b_o + (Q Kᵀ ⊙ 2^{G_t − G_s})_{m_p} U``: the chunk's own share of its output (exponents masked
    before exp2: above the diagonal and past the end they would be > 0), the product exactly causal or
    plain."""
    b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION)
    b_p = tl.where(m_p, b_qk * tl.exp2(tl.where(m_p, b_G[:, None] - b_G[None, :], 0.0)), 0.0).to(b_k.dtype)
    return causal_dot(b_p, b_u, b_o, DOT_PRECISION, EXACT, False)


@triton.jit
def _finite_rows(p, s_t, lo, hi, o_col, m_col, CHUNK: tl.constexpr):
    """Whether rows ``[lo, hi)`` (at most CHUNK of them, ``s_t`` apart) of ``p`` hold only finite values
    at columns ``o_col`` (``x · 0`` is NaN otherwise: one sum)."""
    o_t = lo + tl.arange(0, CHUNK)
    b_x = tl.load(p + o_t[:, None] * s_t + o_col[None, :], mask=(o_t < hi)[:, None] & m_col[None, :], other=0.0)
    return tl.sum(tl.sum(b_x.to(tl.float32) * 0.0, 1), 0) == 0.0


@triton.jit
def _state_pass_kernel(
    p_q, p_k, p_v, p_beta, p_w, p_G, p_T, p_W, p_U, p_h0, p_ht, p_cu, p_coff, p_hs, p_vn, p_o,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_bb, s_bt, s_bh, s_wb, s_wt, s_wh, s_ob, s_ot, s_oh,
    T, NT, scale, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr,
    STORE_HS: tl.constexpr, FUSE_O: tl.constexpr, FUSE_WY: tl.constexpr, HAS_W: tl.constexpr,
    SPLIT_STATE: tl.constexpr, SPLIT_O: tl.constexpr, DOT_PRECISION: tl.constexpr, LATE_O: tl.constexpr = False,
    STORE_VN: tl.constexpr = True, ZERO_O: tl.constexpr = False, CAUSAL: tl.constexpr = True,
    EXACT: tl.constexpr = False,
):
    """The sequential scan: per chunk ``U = Ũ − W S₀ᵀ`` ``[C, BLOCK_V]``, ``S_C = 2^{G_C} S₀ +
    (2^{G_C − G} ⊙ U)ᵀ K``; FUSE_O: ``O = scale [(2^G ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ 2^{G_t − G_s}) U]`` too;
    STORE_VN: U to ``vn`` (for K3 unfused, for the backward fused; off: a pass for the final state alone).
    STORE_HS: each chunk's ``S₀`` to ``hs[coff + j]``. FUSE_WY: U from K1a's T directly,
    ``U = T [(w ⊙ V) − (βγ ⊙ K) S₀ᵀ]`` (one more dot a chunk), instead of from K1b's W and Ũ — with FUSE_O,
    the forward is then K1a and this kernel, and only q, k, v, T, the gates and o cross DRAM (no W, Ũ, U or
    chunk state round trip).

    Grid ``(cdiv(V, BLOCK_V), H_v, N)``. q, k, v, o as the public layouts, beta/w ``[B, T, H_v]`` (any
    strides); G, T, W, U, vn the K1/K2 intermediates (contiguous ``[B, T, H_v, ·]``); h0/ht ``[N, H_v, V,
    K]``, hs ``[n_chunks, H_v, V, K]`` fp32 contiguous. The state, transposed (``Sᵀ [K, BLOCK_V]``), stays
    fp32 in registers; where it is a 16-bit dot operand it may be split hi + lo (two dots) so its products
    keep ~16 mantissa bits. ZERO_O (varlen): o's rows outside every sequence are written as zeros (by the
    first and last sequence's programs; K3 or this kernel write the rest).

    Causality (CAUSAL: wherever an output is made) — the products over a chunk's tokens, ``T (…)`` and
    ``P U``, must not carry a NaN or inf of token t to rows before t, which the plain ``tl.dot`` does
    (``0 · NaN = NaN``; ``common.causal_dot``). Without FUSE_O U's product is causal (a checked one: exact
    only in a tile with a non-finite entry). With FUSE_O (the public forward) the products stay plain (the
    scan sits at the register limit: a check inside it spills). Only a non-finite entry of some chunk's U
    can leak, and it leaves a NaN or inf in the state's column for good (``0 · NaN`` is NaN too), so in
    the output of the sequence's last chunk; a second launch with EXACT reads each program's last output
    chunk and, only where it is not finite, redoes the scan with every product exact, over the outputs
    (bit-equal where nothing was non-finite). Clean inputs cost that launch: each program reads one
    ``[C, BLOCK_V]`` tile of o and leaves.
    """
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK
    i_b, bos, L, coff = _sequence_span(p_cu, p_coff, i_n, T, NT, IS_VARLEN)
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
    if EXACT:  # noqa: SIM102  (compile-time, then a runtime branch: the first pass left nothing to redo)
        if _finite_rows(p_o + i_b * s_ob + i_h * s_oh, s_ot, tl.maximum(bos + L - CHUNK, bos), bos + L, o_v, m_v,
                        CHUNK):
            return
    if ZERO_O and not EXACT:
        zero_gaps(p_o + i_h * s_oh, s_ot, bos, bos + L, T, o_v, m_v, CHUNK)
    p_q += i_b * s_qb + bos * s_qt + i_hq * s_qh
    p_k += i_b * s_kb + bos * s_kt + i_hq * s_kh
    p_o += i_b * s_ob + bos * s_ot + i_h * s_oh
    row0 = (i_b * T + bos) * H_V + i_h
    p_G += row0
    if FUSE_WY:
        p_v += i_b * s_vb + bos * s_vt + i_h * s_vh
        p_beta += i_b * s_bb + bos * s_bt + i_h * s_bh
        p_w += i_b * s_wb + bos * s_wt + i_h * s_wh
        p_T += row0 * CHUNK
    else:
        p_W += row0 * K
        p_U += row0 * V
    p_vn += row0 * V

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_c = tl.arange(0, CHUNK)
    m_causal = o_c[:, None] >= o_c[None, :]
    # the state is held transposed, Sᵀ [BLOCK_K, BLOCK_V]: it is then the B operand of W S₀ᵀ and Q S₀ᵀ as
    # it stands, and its update Kᵀ (2^{G_C − G} ⊙ U) has K rows (M = 128: a wgmma tile; Uᵀ K would have
    # BLOCK_V = 32 rows, below wgmma's 64)
    m_hk = m_k[:, None] & m_v[None, :]
    o_hk = o_v[None, :] * K + o_k[:, None]
    if HAS_H0:
        b_st = tl.load(p_h0 + (i_n * H_V + i_h) * (V * K) + o_hk, mask=m_hk, other=0.0).to(tl.float32)
    else:
        b_st = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    p_hs += (coff * H_V + i_h) * (V * K)

    for c0 in range(0, L, CHUNK):
        if STORE_HS:
            # the pointer advances a chunk row per chunk (64-bit), not (c0 // C)·H_v·V·K in int32, which
            # passes 2^31 past ~8k chunks at H_v 16, K = V = 128
            tl.store(p_hs + o_hk, b_st.to(p_hs.dtype.element_ty), mask=m_hk)
            p_hs += H_V * V * K
        o_t = c0 + o_c
        m_t = o_t < L
        o_t = o_t.to(tl.int64)
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        b_k = tl.load(p_k + o_t[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
        DT = b_k.dtype
        b_G = tl.load(p_G + o_t * H_V, mask=m_t, other=0.0)
        if not FUSE_WY:
            b_wk = tl.load(p_W + o_t[:, None] * (H_V * K) + o_k[None, :], mask=m_tk, other=0.0)
            b_u = tl.load(p_U + o_t[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
        # G at the chunk's last token (a sequence's last chunk may be short)
        b_G_last = tl.sum(tl.where(o_c == tl.minimum(L - c0, CHUNK) - 1, b_G, 0.0), 0)

        b_s_hi = b_st.to(DT)
        b_s_lo = b_s_hi  # read only where split
        if SPLIT_STATE or SPLIT_O:
            b_s_lo = (b_st - b_s_hi.to(tl.float32)).to(DT)
        if FUSE_O and not LATE_O:
            # the state's share of the output first, so S₀'s operand halves die before U is formed
            b_q, b_o = _output_state_part(p_q + o_t[:, None] * s_qt + o_k[None, :], m_tk, b_G, b_s_hi, b_s_lo,
                                          SPLIT_O, DOT_PRECISION)
        if FUSE_WY:
            # U = T (w ⊙ V) − T (βγ ⊙ K) S₀ᵀ = T [(w ⊙ V) − (βγ ⊙ K) S₀ᵀ]: T applied after the state's share is
            # subtracted, so W = T (βγ ⊙ K) [C, K] is never formed (one [C, C] × [C, BLOCK_V] dot instead of
            # a [C, C] × [C, K] one and its fp32 [C, K] accumulator), the difference rounded once
            b_u = _u_from_t(p_T, p_beta, p_w, p_v, b_k, b_G, b_s_hi, b_s_lo, o_t, o_c, o_v, m_t, m_tv, s_bt, s_wt,
                            s_vt, H_V, CHUNK, HAS_W, SPLIT_STATE, DOT_PRECISION, EXACT or (CAUSAL and not FUSE_O),
                            not EXACT)
        else:
            b_u -= tl.dot(b_wk, b_s_hi, input_precision=DOT_PRECISION)
            if SPLIT_STATE:
                b_u -= tl.dot(b_wk, b_s_lo, input_precision=DOT_PRECISION)
        # the state update takes (2^{G_C − G} ⊙ U)ᵀ K: the decay folded into U before its one rounding to
        # the operand dtype, and k as loaded (exact), instead of rounding U and 2^{G_C − G} ⊙ K separately
        # (bf16 emulation of the spec case b1-t256-sat1: 215 instead of 572 final-state elements past the
        # default tolerance, rel. error 3.8e-3 instead of 4.6e-3)
        b_ud = (b_u * tl.exp2(tl.where(m_t, b_G_last - b_G, 0.0))[:, None]).to(DT)
        b_u = b_u.to(DT)  # U as the output's operand (and K3's input)

        if FUSE_O:
            if LATE_O:  # q loaded only now: fewer live registers across the U products (no spill)
                b_q, b_o = _output_state_part(p_q + o_t[:, None] * s_qt + o_k[None, :], m_tk, b_G, b_s_hi,
                                              b_s_lo, SPLIT_O, DOT_PRECISION)
            # rows past the end load G = 0: masked too (their G_t − G_s > 0 would overflow)
            m_p = m_causal & m_t[:, None]
            b_o = _intra_chunk_output(b_q, b_k, b_G, b_u, b_o, m_p, DOT_PRECISION, EXACT)
            tl.store(p_o + o_t[:, None] * s_ot + o_v[None, :], (b_o * scale).to(p_o.dtype.element_ty), mask=m_tv)
        if STORE_VN:
            tl.store(p_vn + o_t[:, None] * (H_V * V) + o_v[None, :], b_u, mask=m_tv)

        # S_Cᵀ = 2^{G_C} S₀ᵀ + Kᵀ (2^{G_C − G} ⊙ U) (rows past the end: U = 0, exponent zeroed: no inf · 0)
        b_st = tl.dot(tl.trans(b_k), b_ud, b_st * tl.exp2(b_G_last), input_precision=DOT_PRECISION)

    if STORE_HT:
        tl.store(p_ht + (i_n * H_V + i_h) * (V * K) + o_hk, b_st, mask=m_hk)


# ----------------------------------------------------------------------------------------------- K3


@triton.jit
def _chunk_output_kernel(
    p_q, p_k, p_G, p_hs, p_vn, p_cs, p_ce, p_o,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_ob, s_ot, s_oh,
    T, NT, scale, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, SPLIT_STATE: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """``O = scale [(2^G ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ 2^{G_t − G_s}) U]`` for one chunk, one V-block.

    Grid ``(cdiv(V, BLOCK_V), n_chunks, B·H_v)``; S₀ = ``hs[chunk row]`` fp32 (dense: row ``b·NT + i``,
    varlen: the slot), U = ``vn`` (K2's).
    """
    i_v = tl.program_id(0)
    i_c = tl.program_id(1)
    i_bh = tl.program_id(2).to(tl.int64)
    i_b = i_bh // H_V
    i_h = i_bh % H_V
    i_hq = i_h // HV_PER_QK
    t0, n = _chunk_span(p_cs, p_ce, i_c, T, CHUNK, IS_VARLEN)
    if n <= 0:  # a varlen slot past the last chunk
        return
    t0 = t0.to(tl.int64)  # int64 offsets: B·T·H·K passes 2^31 at long contexts
    row_hs = i_b * NT + i_c
    p_q += i_b * s_qb + t0 * s_qt + i_hq * s_qh
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_o += i_b * s_ob + t0 * s_ot + i_h * s_oh
    row0 = (i_b * T + t0) * H_V + i_h
    p_G += row0
    p_vn += row0 * V

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
    o_c = tl.arange(0, CHUNK)
    m_t = o_c < n
    m_causal = o_c[:, None] >= o_c[None, :]
    m_tk = m_t[:, None] & m_k[None, :]
    m_tv = m_t[:, None] & m_v[None, :]
    b_q = tl.load(p_q + o_c[:, None] * s_qt + o_k[None, :], mask=m_tk, other=0.0)
    b_k = tl.load(p_k + o_c[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
    DT = b_k.dtype
    b_G = tl.load(p_G + o_c * H_V, mask=m_t, other=0.0)
    b_u = tl.load(p_vn + o_c[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0)
    # S₀ᵀ [K, BLOCK_V] read transposed from the K-contiguous rows
    b_s_t = tl.load(p_hs + (row_hs * H_V + i_h) * (V * K) + o_v[None, :] * K + o_k[:, None],
                    mask=m_k[:, None] & m_v[None, :], other=0.0)
    b_s_hi = b_s_t.to(DT)

    b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION)
    # exponents masked before exp2: upper triangle and rows past the end (G = 0 there) would be > 0
    m_p = m_causal & m_t[:, None]
    b_p = tl.where(m_p, b_qk * tl.exp2(tl.where(m_p, b_G[:, None] - b_G[None, :], 0.0)), 0.0).to(DT)
    b_qg = (b_q * tl.exp2(b_G)[:, None]).to(DT)
    b_o = tl.dot(b_qg, b_s_hi, input_precision=DOT_PRECISION)
    if SPLIT_STATE:
        b_o = tl.dot(b_qg, (b_s_t - b_s_hi.to(tl.float32)).to(DT), b_o, input_precision=DOT_PRECISION)
    b_o = causal_dot(b_p, b_u, b_o, DOT_PRECISION)
    tl.store(p_o + o_c[:, None] * s_ot + o_v[None, :], (b_o * scale).to(p_o.dtype.element_ty), mask=m_tv)


# ------------------------------------------------------------------------------------------- launcher

GPU_CHUNK = 64
"""The chunk on the GPU (whatever is requested: the chunk is a blocking choice, every size computes the
same recurrence up to rounding): K1's four diagonal blocks are then 16 rows, the smallest tensor-core
tile, and K2/K3's products are 64-row tiles."""


def kernel_chunk(chunk_size: int) -> int:
    """The chunk the kernels run for a requested ``chunk_size`` (16-bit inputs): the interpreter takes the
    request, the GPU always :data:`GPU_CHUNK` — the last dim of the saved inverses ``T``."""
    return chunk_size if interpreter_active() else GPU_CHUNK


class _Plan(NamedTuple):
    CHUNK: int
    BLOCK_K: int
    BLOCK_V_ALL: int    # K1b: all of V in one tile (Ũ = T (w ⊙ V) once per chunk)
    BLOCK_V: int        # K2 V rows per program
    BLOCK_V_OUT: int    # K3 V rows per program
    warps_inv: int
    warps_wy: int
    warps_scan: int
    stages_scan: int
    warps_out: int
    DOT_PRECISION: str
    inv_product: bool = False  # K1a: diagonal blocks by the product form (no serial substitution)
    hs_16bit: bool = False     # K2 → K3: chunk-start states in the input dtype instead of fp32
    split_scan: bool = True    # K2: the fp32 state as a 16-bit dot operand split hi + lo (two dots)
    split_out: bool = True     # K2 fused: the output's Q S₀ᵀ with the state split hi + lo too
    fuse_wy: bool = False      # K2 fused: W and Ũ formed in the scan from T (no K1b launch)
    inv_precision: str = "ieee"  # K1a: the fp32 products of the inverse (ieee FMA, or tf32 / tf32x3 MMA)
    late_out: bool = False     # K2 fused: the output's Q S₀ᵀ after U (q loaded late) instead of first


def _planned_sms(device: torch.device) -> int:
    """Multiprocessors of the GPU the launches are planned for: ``device``'s, or the planned GPU's under
    ``kw inspect`` (``planning_active``) on a CPU tensor; 0 in the interpreter and on the CPU."""
    if interpreter_active() or not (device.type == "cuda" or planning_active()):
        return 0
    index = (device.index if device.index is not None else torch.cuda.current_device()) if device.type == "cuda" else 0
    return sm_count(index)


def scan_block_v(programs: int, V: int, device: torch.device) -> int:
    """V rows per state-scan program on the GPU for a scan of ``programs`` programs at 64 rows each
    (sequences × value heads × ``cdiv(V, 64)``): 32 where those fill at most half the SMs, else 64.

    The scan walks the chunks in series, so a batch too small to fill the GPU is bound by one program's
    per-chunk latency, and narrower programs both shorten it and double their number. H100, one sequence of
    16k–64k tokens, 32 value heads (64 programs of 64 rows): 1.13 against 1.40 ms at 16k, 4.46 against 5.46 at
    64k (forward; the backward's two scans gain too: forward + backward 4.50 against 5.02 ms at 16k); 16 heads
    1.04 against 1.31. At 256 programs (B 8, 16 heads) 64 rows win (0.56 against 0.76 ms). Between the two,
    128 programs keep 64 rows: two sequences of 32 heads would gain 5% at 32 rows, but the segmented forward's
    scans (128 programs of 64 rows for 4 segments of 16 heads) lose 13–15% at 32. 16 rows lose to 32 but for
    16 heads (0.99 against 1.04 ms). ``benchmarks/sweeps/gated_delta_long.py``;
    ``results/h100-80gb-hbm3/gaps/gated_delta-long-*``."""
    sms = _planned_sms(device)
    return 32 if V > 32 and 0 < 2 * programs <= sms else 64


@cached_plan
def _plan(chunk_size: int, K: int, V: int, fp32: bool, fused: bool, scan_rows: int = 64) -> _Plan:
    """Tiles and warps, from the prefill plan sweep (``benchmarks/sweeps/gated_delta_prefill_plan.py``;
    H200, B 8 T 4096 H 16 K = V = 128 bf16, per-kernel GPU times in ``benchmarks/results/h200/sweeps/``).
    Whole K in every tile (one dot per product; K ≤ 256).

    - K1a (T): 2 warps, diagonal blocks by the product form — 259 µs, against 486 µs by forward
      substitution at 4 warps and 1049 µs at 8 (a small kernel: several programs per SM, whose serial
      chains overlap). 1 warp spills (528 B/thread). Its fp32 block products as tf32 MMA (``inv_precision``,
      see :func:`_dot32`): 148 µs, the errors unchanged; tf32x3 spills (32 B).
    - K1b (W, Ũ): 4 warps, one warpgroup's ``[64, 64] × [64, 128]`` wgmma per product (148 µs; 8 warps
      no better).
    - K2 unfused (the backward's recompute): 64-row V blocks, 4 warps, 2 stages (the next chunk's loads in
      flight), the state a single 16-bit operand (``split_scan=False``, 206 registers): 294 µs on the H100
      against 358 with 32 rows and the hi + lo split (64 rows with the split spill 88–104 B/thread), the
      output's and final state's errors against the float64 recurrence unchanged (3.7e-3 / 2.9e-3: the 16-bit T, W, Ũ
      dominate); H200: 451 µs with 3 stages, 740 at 8 warps. It is bound by its stores, the chunk-start
      states above all, hence ``hs_16bit``.
    - K3: 64-row V blocks, 4 warps (427 µs against 564 with 32 rows and 729 at 8 warps).
    - ``hs_16bit``: the chunk-start states K3 multiplies by q are stored in the input dtype (fla keeps its
      chunk states in bf16 too): K2 310 µs and K3 290 µs instead of 300 and 427; the output's relative
      error against the float64 recurrence unchanged in the same sweep (3.7e-3, dominated by the 16-bit
      T, W, Ũ, U). The recurrent state itself stays fp32 in K2's registers, and the backward's recompute
      keeps fp32 states.
    - Fused (the public path): K1a then K2 with the output inside (FUSE_O) and U formed from T (``fuse_wy``):
      64-row V blocks, 4 warps, 2 stages, the state a single 16-bit operand in both the U and the output
      products, the output's ``Q S₀ᵀ`` after U (``late_out``: q loaded late; 255 registers, no spill at the
      bench shape, 40 B varlen + h0 + write; 56–120 B the other order). H100 (sweep, same run): K1a 148
      (tf32) + K2 396 = 544 µs against 1107 µs for the four-kernel form and fla's 1028; the varlen case
      814 µs; 32-row V blocks 741 µs (varlen 908: no help there either); 3 stages 748 and the other output
      order 656 (``sweeps/gated_delta_prefill_plan-fused-order.json``). A 1-stage fused plan (32-row V
      blocks) hit an illegal address on sm_90, and compute-sanitizer had flagged invalid shared reads in
      the earlier 1-stage fused kernel (triton 3.6 miscompiles, ``sweeps/gated_delta_fused_first.txt``):
      fused plans keep 2 stages, the default memcheck-clean at T 100 and 1000.
    - fp32 inputs: fp32 operands and ``ieee`` dots, 16-row V blocks; they spill heavily on sm_90: correct
      but slow, an accuracy path — route fp32 to ``prefill_fwd.py`` for speed.
    - ``scan_rows`` (:func:`scan_block_v`): the scan's V rows when the batch leaves SMs idle (32); K3 keeps 64.
    The interpreter takes the requested chunk and one warp, and the GPU's choices otherwise."""
    block_k = next_pow2(max(K, 16))
    block_v_all = next_pow2(max(V, 16))
    if interpreter_active():
        bv = min(block_v_all, 32)
        return _Plan(chunk_size, block_k, block_v_all, bv, bv, 1, 1, 1, 1, 1, "ieee", inv_product=True,
                     hs_16bit=not fp32, fuse_wy=fused)
    if fp32:
        bv = min(block_v_all, 16)
        return _Plan(GPU_CHUNK, block_k, block_v_all, bv, bv, 8, 8, 8, 2, 4, "ieee")
    bv, scan_bv = min(block_v_all, 64), min(block_v_all, scan_rows)
    if fused:
        return _Plan(GPU_CHUNK, block_k, block_v_all, scan_bv, bv, 2, 4, 4, 2, 4, "ieee", inv_product=True,
                     split_scan=False, split_out=False, fuse_wy=True, late_out=True, inv_precision="tf32")
    return _Plan(GPU_CHUNK, block_k, block_v_all, scan_bv, bv, 2, 4, 4, 2, 4, "ieee", inv_product=True,
                 hs_16bit=True, split_scan=False, inv_precision="tf32")


def chunk_slots(batch: int, T: int, chunk: int, cu_seqlens: torch.Tensor | None) -> int:
    """Rows of the chunk-start states: one a chunk, ``batch · cdiv(T, C)`` dense; packed sequences
    ``cdiv(T, C) + N``, which bounds any table's chunk count without reading the lengths
    (:func:`_varlen_chunks`)."""
    return batch * cdiv(T, chunk) if cu_seqlens is None else cdiv(T, chunk) + cu_seqlens.shape[0] - 1


def _varlen_chunks(cu_seqlens: torch.Tensor, chunk: int, T: int) -> tuple:
    """``(cu, coff [N], cs [n_slots], ce [n_slots], n_slots)`` on the device, with no host sync: ``cu`` the
    table the kernels read (:func:`~kernelworks.ops.gated_delta.common.sequence_offsets`: clamped into
    ``[0, T]``, non-decreasing, so the sequences are disjoint); sequence n's chunks are slots ``coff[n] …``
    (exclusive cumsum of ``cdiv(len, C)``); slot i covers tokens ``[cs[i], min(cs[i] + C, ce[i]))``.
    ``n_slots = cdiv(T, C) + N`` bounds the chunk count of any such table without reading the lengths; the
    slots past the last chunk get ``cs = ce = 0`` (no tokens: their programs store nothing)."""
    n_seq = cu_seqlens.shape[0] - 1
    cu_kernel = sequence_offsets(cu_seqlens, T)
    cu = cu_kernel.to(torch.int64)
    per = torch.div(cu[1:] - cu[:-1] + chunk - 1, chunk, rounding_mode="floor")
    cend = torch.cumsum(per, 0)
    coff = cend - per
    n_slots = chunk_slots(1, T, chunk, cu_seqlens)
    slot = torch.arange(n_slots, device=cu.device)
    seq = torch.searchsorted(cend, slot, right=True)
    live = seq < n_seq
    seq = seq.clamp(max=n_seq - 1)
    cs = torch.where(live, cu[seq] + (slot - coff[seq]) * chunk, 0).to(torch.int32)
    ce = torch.where(live, cu[seq + 1], 0).to(torch.int32)
    return cu_kernel, coff.to(torch.int32), cs, ce, n_slots


def check_inverses(inverses: tuple[torch.Tensor, torch.Tensor], B: int, T: int, H_v: int, chunk: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T, G)`` as a forward saved them (``saved["T"]``, ``saved["G"]``), checked against the call that takes
    them: contiguous T ``[B, T, H_v, chunk]`` in ``dtype`` and G ``[B, T, H_v]`` float32, else ValueError (the
    kernels index them by those shapes)."""
    Tm, G = inverses
    if (Tm.shape != (B, T, H_v, chunk) or G.shape != (B, T, H_v) or Tm.dtype != dtype
            or G.dtype != torch.float32 or not (Tm.is_contiguous() and G.is_contiguous())):
        raise ValueError(f"inverses: expected contiguous T {(B, T, H_v, chunk)} {dtype} and G {(B, T, H_v)} "
                         f"float32, got {tuple(Tm.shape)} {Tm.dtype} and {tuple(G.shape)} {G.dtype}")
    return Tm, G


def chunked_prefill_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        *, scale: float, initial_state: torch.Tensor | None, output_final_state: bool,
                        cu_seqlens: torch.Tensor | None, chunk_size: int = 64,
                        write_strength: torch.Tensor | None = None, fuse_output: bool = True,
                        store_states: bool = False, need_output: bool = True, wy_in_scan: bool = False,
                        states_dtype: torch.dtype | None = None,
                        inverses: tuple[torch.Tensor, torch.Tensor] | None = None, final_only: bool = False,
                        chunk_tables: tuple | None = None,
                        ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict]:
    """The chunk-parallel forward (inputs validated by the caller, as for ``gated_delta_prefill_fwd``).

    Args:
        q, k ``[B, T, H_qk, K]``, v ``[B, T, H_v, V]`` (unit last-dim stride), g, beta, write_strength
        ``[B, T, H_v]`` (any strides); initial_state ``[N, H_v, V, K]`` fp32 contiguous or None;
        cu_seqlens ``[N + 1]`` int32/int64 with ``B = 1``, or None; scale; chunk_size 16/32/64 (the GPU
        always runs 64, :data:`GPU_CHUNK`; the interpreter the requested one).
        fuse_output: compute o inside the state scan (K1 + K2: no chunk-state round trip) instead of in a
            third, fully parallel kernel (K1 + K2 + K3, the chunk-start states through memory in fp32).
        store_states: also keep the chunk-start states and U when fusing (the unfused path always has
            them): what a backward would otherwise recompute (``saved["h"]``, ``saved["v_new"]``).
        need_output: False skips the output (unfused only: K1 + K2, for a backward that recomputes the
            forward's intermediates); o is then None.
        wy_in_scan: unfused, form U from T inside the scan as the fused plan does (no K1b launch; ``W`` and
            ``U_tilde`` are then None).
        states_dtype: the dtype of the stored chunk-start states (``saved["h"]``); default fp32, or the
            input dtype where only K3 reads them (the plan's ``hs_16bit``).
        inverses: ``(T, G)`` as an earlier call on the same inputs saved them (``saved["T"]``,
            ``saved["G"]``): K1a is then skipped (a backward reusing its forward's chunk inverses).
        final_only: the scan alone, storing nothing but the final state (no o, U or chunk states; U formed
            from T; with ``output_final_state``): the segment transitions of :func:`segmented_prefill_fwd`.
        chunk_tables: varlen only, ``_varlen_chunks(cu_seqlens, C, T)`` as an earlier call made it (host
            time: calls on one packed batch share it).

    Returns:
        ``(o, final_state, saved)``: o ``[B, T, H_v, V]`` in v's dtype; final_state ``[N, H_v, V, K]``
        fp32 or None (without ``output_final_state``); ``saved`` a dict of what a backward may reuse:
        ``chunk`` (the chunk the kernels ran), ``G`` ``[B, T, H_v]`` fp32 (the chunk-local cumulative
        log-decay in LOG2 units, ``log2(e)·Σ g`` from the chunk start), ``W`` ``[B, T, H_v, K]`` and
        ``U_tilde`` ``[B, T, H_v, V]`` (input dtype: ``T (βγ ⊙ K)``, ``T (w ⊙ V)`` per chunk; None when the
        fused plan forms U in the scan), ``T`` ``[B, T, H_v, C]`` (the chunk inverses), ``h`` the
        chunk-start states ``[n_slots, H_v, V, K]`` (``states_dtype``; row ``coff[n] + j``; varlen slots past the last
        chunk unwritten) or None, ``v_new`` ``[B, T, H_v, V]`` (input dtype, ``U = Ũ − W S₀ᵀ``) or None
        when fused without ``store_states``, ``chunk_offsets`` ``coff [N]`` int32 (varlen) or None (dense:
        ``n · cdiv(T, C)``).
    """
    if final_only:
        if not output_final_state:
            raise ValueError("final_only=True requires output_final_state=True")
        fuse_output, need_output, wy_in_scan, store_states = False, False, True, False
    if fuse_output and not need_output:
        raise ValueError("need_output=False requires fuse_output=False (the fused scan computes o anyway)")
    B, T, H_qk, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    dev = v.device
    dt = v.dtype
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    fp32 = q.dtype == torch.float32
    plan = _plan(chunk_size, K, V, fp32, bool(fuse_output), scan_block_v(n_seq * H_v * cdiv(V, 64), V, dev))
    chunk, block_k, block_v, precision = plan.CHUNK, plan.BLOCK_K, plan.BLOCK_V, plan.DOT_PRECISION
    w = write_strength if write_strength is not None else beta
    if cu_seqlens is None:
        nt = cdiv(T, chunk)
        n_slots, coff = B * nt, None
        cs = ce = cu = coff_arg = g  # unused pointers (constexpr-disabled)
        slots_per_row = nt
    else:
        nt = 0
        cu, coff, cs, ce, n_slots = chunk_tables if chunk_tables is not None else _varlen_chunks(cu_seqlens, chunk, T)
        coff_arg = coff
        slots_per_row = n_slots

    if inverses is not None:
        Tm, G = check_inverses(inverses, B, T, H_v, chunk, dt)
    else:
        G = empty((B, T, H_v), dtype=torch.float32, device=dev)
        Tm = empty((B, T, H_v, chunk), dtype=dt, device=dev)
        launch(_chunk_inverse_kernel, (slots_per_row, H_v, B),
               k, g, beta, cs, ce, G, Tm,
               k.stride(0), k.stride(1), k.stride(2), g.stride(0), g.stride(1), g.stride(2),
               beta.stride(0), beta.stride(1), beta.stride(2),
               T, H_v // H_qk,
               num_warps=plan.warps_inv, H_V=H_v, K=K, SUB=chunk // 4, BLOCK_K=block_k,
               IS_VARLEN=cu_seqlens is not None, INV_PRODUCT=plan.inv_product, DOT_PRECISION=precision,
               INV_PRECISION=plan.inv_precision)
    fuse_wy = bool(fuse_output and plan.fuse_wy) or wy_in_scan
    if fuse_wy:
        W = U = G  # unused pointers: the scan forms W and Ũ from T
    else:
        W = empty((B, T, H_v, K), dtype=dt, device=dev)
        U = empty((B, T, H_v, V), dtype=dt, device=dev)
        launch(_chunk_wy_kernel, (slots_per_row, H_v, B),
               k, v, beta, w, G, Tm, cs, ce, W, U,
               k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
               beta.stride(0), beta.stride(1), beta.stride(2), w.stride(0), w.stride(1), w.stride(2),
               T, H_v // H_qk,
               num_warps=plan.warps_wy, H_V=H_v, K=K, V=V, CHUNK=chunk, BLOCK_K=block_k,
               BLOCK_V=plan.BLOCK_V_ALL, IS_VARLEN=cu_seqlens is not None, HAS_W=write_strength is not None,
               DOT_PRECISION=precision)

    o = empty((B, T, H_v, V), dtype=dt, device=dev)
    ht = empty((n_seq, H_v, V, K) if output_final_state else (0,), dtype=torch.float32, device=dev)
    keep_h = store_states or not (fuse_output or final_only)
    # the chunk-start states K3 reads: fp32, or (plan.hs_16bit, when only K3 needs them) rounded to the
    # input dtype — half the bytes of K2's stores and K3's loads, the output's Q S₀ᵀ term then as fla has it
    hs_16 = plan.hs_16bit and need_output and not store_states and not fuse_output
    if states_dtype is None:
        states_dtype = dt if hs_16 else torch.float32
    hs = empty((n_slots, H_v, V, K) if keep_h else (0,), dtype=states_dtype, device=dev)
    keep_vn = not final_only and (store_states or not fuse_output)
    vn = empty((B, T, H_v, V) if keep_vn else (0,), dtype=dt, device=dev)
    h0 = initial_state if initial_state is not None else ht
    n_v = cdiv(V, block_v)
    # fused: a second launch redoes, with exactly causal products, only the programs whose last output
    # chunk is not finite (the kernel's docstring): no NaN or inf reaches an earlier output
    for exact in (False, True) if fuse_output else (False,):
        launch(_state_pass_kernel, (n_v, H_v, n_seq),
               q, k, v, beta, w, G, Tm, W, U, h0, ht, cu, coff_arg, hs, vn if keep_vn else o, o,
               q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2), beta.stride(0), beta.stride(1), beta.stride(2),
               w.stride(0), w.stride(1), w.stride(2), o.stride(0), o.stride(1), o.stride(2),
               T, nt, scale, H_v // H_qk,
               num_warps=plan.warps_scan, num_stages=plan.stages_scan, H_V=H_v, K=K, V=V, CHUNK=chunk,
               BLOCK_K=block_k, BLOCK_V=block_v,
               IS_VARLEN=cu_seqlens is not None, HAS_H0=initial_state is not None,
               STORE_HT=output_final_state, STORE_HS=keep_h, FUSE_O=fuse_output, FUSE_WY=fuse_wy,
               HAS_W=write_strength is not None,
               SPLIT_STATE=plan.split_scan and not fp32, SPLIT_O=plan.split_out and not fp32,
               DOT_PRECISION=precision, LATE_O=plan.late_out, STORE_VN=keep_vn,
               ZERO_O=cu_seqlens is not None and need_output, CAUSAL=need_output, EXACT=exact)
    if not fuse_output and need_output:
        launch(_chunk_output_kernel, (cdiv(V, plan.BLOCK_V_OUT), slots_per_row, B * H_v),
               q, k, G, hs, vn, cs, ce, o,
               q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               o.stride(0), o.stride(1), o.stride(2),
               T, nt, scale, H_v // H_qk,
               num_warps=plan.warps_out, H_V=H_v, K=K, V=V, CHUNK=chunk, BLOCK_K=block_k, BLOCK_V=plan.BLOCK_V_OUT,
               IS_VARLEN=cu_seqlens is not None, SPLIT_STATE=not fp32 and hs.dtype == torch.float32,
               DOT_PRECISION=precision)
    saved = {"chunk": chunk, "G": G, "T": Tm, "W": None if fuse_wy else W, "U_tilde": None if fuse_wy else U,
             "h": hs if keep_h else None, "v_new": vn if keep_vn else None,
             "chunk_offsets": coff}
    return (o if need_output else None), (ht if output_final_state else None), saved


# ------------------------------------------------------------------------------ segment-parallel scan

SEGMENT_MIN_CHUNKS = 128
"""The shortest segment :func:`prefill_segments` makes (chunks; 8192 tokens). The segmented forward makes
~60 small launches and torch ops, 1.3–3.7 ms of host time a call on the H100's host, so it pays only where
the plain scan is longer. On the device alone segments win earlier (B 1, 16 value heads, T 16k: 0.80 ms in
8 segments against 1.04 for the narrow plain scan; ``gaps/gated_delta-long-variants.json``), but an eager
call would then wait on its host. (The first sweep, ``sweeps/gated_delta_segments.json``, timed with
``do_bench``, which charges a call whose host is slower than its kernels that host time: B 1 H 16, T 32k
2.55 → 1.79 ms in 4 segments.)"""
SEGMENT_MAX = 16
"""The most segments: the start states are combined one segment boundary (one launch) at a time."""
SEGMENT_MIN_IDLE = 8
"""Segments only for a batch whose scan programs (64 rows each) fill at most 1/8 of the slots. Where they
fill more, the narrow scan (:func:`scan_block_v`) fills the GPU for less: one sequence, 32 value heads
(64 programs, 1/4 of the H100's slots), T 32k 2.20 ms against 2.51 in 4 segments, T 64k 4.45 against 4.87
(device times, ``gaps/gated_delta-long-variants.json``)."""


def prefill_segments(batch: int, T: int, H_v: int, V: int, device: torch.device) -> int:
    """How many segments the dense 16-bit forward splits each sequence into on ``device`` (1: none). The
    scan runs one program per (sequence, value head, 64-row V block), two per SM (:func:`scan_slots`); a
    small batch leaves SMs idle while each program walks ``T / 64`` chunks in series (B 1, H 16, T 32k: 32
    programs for an H100's 264 slots). Segments fill the slots when the programs fill at most
    1/:data:`SEGMENT_MIN_IDLE` of them: as many as fit, each at least :data:`SEGMENT_MIN_CHUNKS` chunks, at
    most :data:`SEGMENT_MAX`, and only three or more. (An H100 PCIe's 114 SMs give that B 1 H 16 batch 7
    slots a program: no segments there, the narrow scan instead.)"""
    idle = scan_slots(device) // (batch * H_v * cdiv(V, 64))
    n = min(idle, cdiv(T, GPU_CHUNK) // SEGMENT_MIN_CHUNKS, SEGMENT_MAX)
    return n if n >= 3 and idle >= SEGMENT_MIN_IDLE else 1


def scan_slots(device: torch.device) -> int:
    """Scan programs the GPU holds at once: two per SM (4 warps at 255 registers); 0 in the interpreter and
    on the CPU (no segments there)."""
    return 2 * _planned_sms(device)


def segmented_prefill_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                          *, scale: float, initial_state: torch.Tensor | None, output_final_state: bool,
                          n_segments: int, chunk_size: int = 64, write_strength: torch.Tensor | None = None,
                          ) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """The dense forward with each sequence cut into ``n_segments`` chunk-aligned segments whose scans run
    in parallel (the fused forward's result up to rounding; for batches too small to fill the GPU).

    The state map of a segment is affine, ``S_end = S_start A + B`` (each row of S evolves on its own):
    B is the segment's final state from a zero state, A ``[K, K]`` its final state from the identity with
    v = 0. Three passes, every segment a sequence of one packed (varlen) batch: the transitions (two
    state-only scans: :func:`chunked_prefill_fwd` with ``final_only``), the starts ``S_{j+1} = S_j A_j +
    B_j`` (fp32 matmuls, segments in order), then the fused forward of every segment from its start. The
    chunk inverses are computed once (segments start on chunk boundaries, so they are the dense ones).

    Inputs as :func:`chunked_prefill_fwd` (dense: ``cu_seqlens`` None; 16-bit q/k/v). Returns ``(o,
    final_state, saved)`` with ``saved`` holding ``chunk``, ``T`` ``[B, T, H_v, C]`` and ``G`` ``[B, T,
    H_v]`` (what the backward reuses)."""
    B, T, _, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    dev = v.device
    chunk = kernel_chunk(chunk_size)
    seg_chunks = cdiv(cdiv(T, chunk), n_segments)
    n_seg = cdiv(cdiv(T, chunk), seg_chunks)
    seg_len = seg_chunks * chunk
    # segment i of the packed batch starts at (i // n_seg)·T + (i % n_seg)·seg_len (< its row's end: n_seg
    # segments of seg_len cover T with the last one short); i = B·n_seg gives B·T. Built on the device: a
    # host-to-device copy would wait for the stream.
    i = torch.arange(B * n_seg + 1, device=dev, dtype=torch.int32)
    cu = (i // n_seg) * T + (i % n_seg) * seg_len
    tables = _varlen_chunks(cu, chunk, B * T)

    def packed(x: torch.Tensor | None) -> torch.Tensor | None:  # [B, T, ...] → one packed row [1, B·T, ...]
        return None if x is None else x.reshape(1, B * T, *x.shape[2:])

    q1, k1, v1, g1, b1, w1 = (packed(x) for x in (q, k, v, g, beta, write_strength))
    # 1. transitions: B_j from a zero state (computes the chunk inverses), A_j from the identity with v = 0
    _, seg_b, saved = chunked_prefill_fwd(q1, k1, v1, g1, b1, scale=scale, initial_state=None,
                                          output_final_state=True, cu_seqlens=cu, chunk_size=chunk_size,
                                          write_strength=w1, final_only=True, chunk_tables=tables)
    inverses = (saved["T"], saved["G"])
    zero_v = torch.zeros((1, 1, 1, K), dtype=v.dtype, device=dev).expand(1, B * T, H_v, K)
    eye = torch.eye(K, device=dev).expand(B * n_seg, H_v, K, K).contiguous()
    _, seg_a, _ = chunked_prefill_fwd(q1, k1, zero_v, g1, b1, scale=scale, initial_state=eye,
                                      output_final_state=True, cu_seqlens=cu, chunk_size=chunk_size,
                                      final_only=True, inverses=inverses, chunk_tables=tables)
    # 2. every segment's start state, in order: one fp32 batched matmul-add per segment boundary
    seg_a = seg_a.view(B, n_seg, H_v, K, K).transpose(0, 1).reshape(n_seg, B * H_v, K, K)
    seg_b = seg_b.view(B, n_seg, H_v, V, K).transpose(0, 1).reshape(n_seg, B * H_v, V, K)
    start = torch.empty((n_seg, B * H_v, V, K), dtype=torch.float32, device=dev)
    if initial_state is not None:
        start[0] = initial_state.view(B * H_v, V, K)
    else:
        start[0].zero_()
    for j in range(n_seg - 1):
        torch.baddbmm(seg_b[j], start[j], seg_a[j], out=start[j + 1])
    start = start.view(n_seg, B, H_v, V, K).transpose(0, 1).reshape(B * n_seg, H_v, V, K)
    # 3. the fused forward of every segment
    o, final, _ = chunked_prefill_fwd(q1, k1, v1, g1, b1, scale=scale, initial_state=start,
                                      output_final_state=output_final_state, cu_seqlens=cu, chunk_size=chunk_size,
                                      write_strength=w1, inverses=inverses, chunk_tables=tables)
    if final is not None:
        final = final.view(B, n_seg, H_v, V, K)[:, -1].contiguous()
    saved = {"chunk": saved["chunk"], "T": saved["T"].view(B, T, H_v, -1), "G": saved["G"].view(B, T, H_v)}
    return o.view(B, T, H_v, V), final, saved
