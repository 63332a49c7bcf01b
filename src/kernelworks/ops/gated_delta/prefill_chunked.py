"""Chunk-parallel prefill, forward: the intra-chunk work of every chunk in parallel, only the state scan
sequential (the alternative to ``prefill_fwd.py``'s one-program-per-sequence design, which is
latency-bound: its per-chunk forward substitution and small tiles sit on the scan's critical path).

Notation as in ``prefill_fwd.py`` (derivation in docs/notes/gated_delta.md): per chunk of C tokens, ``G``
the chunk-local cumulative log-decay (here in log2 units, ``G = log2(e)·cumsum(g)``), ``γ = 2^G``,
``A = strictly-lower(β_s (k_s·k_r) 2^{G_s−G_r})``, ``T = (I + A)⁻¹``. Three kernels:

K1 ``_chunk_prep_kernel`` — grid (chunks, H_v, B), all chunks in parallel:
    G;  T by blocks (four C/4-row diagonal blocks inverted by forward substitution, merged with dots);
    ``W = T (βγ ⊙ K)`` ``[C, K]`` and ``Ũ = T (w ⊙ V)`` ``[C, V]``, stored in the input dtype (as fla
    does), G in fp32.
K2 ``_state_pass_kernel`` — grid (V-blocks, H_v, sequences), chunks in order, the state fp32 in registers:
    ``U = Ũ − W S₀ᵀ`` (the fp32 state split hi + lo for 16-bit dots);
    ``S_C = γ_C S₀ + (2^{G_C−G} ⊙ U)ᵀ K``.
    FUSE_O: also the output here, ``O = scale [(γ ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ 2^{G_t−G_s}) U]`` (no state
    round trip, the output work serialised with the scan). Otherwise it stores U and every chunk-start
    state ``S₀`` (fp32) for
K3 ``_chunk_output_kernel`` — grid (V-blocks, chunks, B·H_v), all chunks in parallel: the output formula.

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

from kernelworks.ops._math import LOG2E
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

# --------------------------------------------------------------------------------------------- helpers


@triton.jit
def _chunk_span(p_cs, p_ce, i_c, T, CHUNK: tl.constexpr, IS_VARLEN: tl.constexpr):
    """``(t0, n)``: the chunk's first token (in its batch row) and how many tokens its sequence has from
    there on (≥ CHUNK for all but a sequence's last chunk; 0 for a varlen slot past the last chunk)."""
    if IS_VARLEN:
        t0 = tl.load(p_cs + i_c).to(tl.int64)
        n = (tl.load(p_ce + i_c).to(tl.int64) - t0).to(tl.int32)
    else:
        t0 = i_c.to(tl.int64) * CHUNK
        n = (T - t0).to(tl.int32)
    return t0, n


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
def _dot32(a, b):
    """An fp32 product of two small T/A blocks: FMA (``ieee``) everywhere — tf32 would cost T its accuracy,
    and these are 16×16×16, a negligible share of the work."""
    return tl.dot(a, b, input_precision="ieee")


# ----------------------------------------------------------------------------------------------- K1


@triton.jit
def _chunk_prep_kernel(
    p_k, p_v, p_g, p_beta, p_w, p_cs, p_ce, p_G, p_W, p_U,
    s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_gb, s_gt, s_gh, s_bb, s_bt, s_bh, s_wb, s_wt, s_wh,
    T, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, SUB: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_W: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Per chunk (C = 4·SUB tokens) and value head: ``G = log2(e) cumsum(g)`` ``[C]`` fp32,
    ``T = (I + A)⁻¹``, ``W = T (βγ ⊙ K)`` ``[C, K]``, ``Ũ = T (w ⊙ V)`` ``[C, V]`` (input dtype).

    Grid ``(n_chunks, H_v, B)``; dense: chunk i starts at token i·C of batch row program_id(2); varlen
    (B = 1): chunk slot i covers tokens ``[cs[i], min(cs[i] + C, ce[i]))``. k ``[B, T, H_qk, K]``, v
    ``[B, T, H_v, V]``, g/beta/w ``[B, T, H_v]`` (any strides, unit last-dim stride for k, v); G ``[B, T,
    H_v]``, W ``[B, T, H_v, K]``, U ``[B, T, H_v, V]`` contiguous.

    T by blocks: with ``L = I + A`` split in 4×4 blocks of SUB rows, ``T_ii = L_ii⁻¹`` (forward
    substitution, 4 chains at once) and ``T_ij = −T_ii Σ_{j≤m<i} A_im T_mj`` (dots), so the serial part
    is SUB steps on SUB×SUB tiles instead of C steps on C×C.
    """
    i_c = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_b = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK
    t0, n = _chunk_span(p_cs, p_ce, i_c, T, 4 * SUB, IS_VARLEN)
    if n <= 0:  # a varlen slot past the last chunk
        return
    t0 = t0.to(tl.int64)  # int64 offsets: B·T·H·K passes 2^31 at long contexts
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_v += i_b * s_vb + t0 * s_vt + i_h * s_vh
    p_g += i_b * s_gb + t0 * s_gt + i_h * s_gh
    p_beta += i_b * s_bb + t0 * s_bt + i_h * s_bh
    p_w += i_b * s_wb + t0 * s_wt + i_h * s_wh
    row0 = (i_b * T + t0) * H_V + i_h  # the intermediates' row of the chunk's first token (int64)
    p_G += row0
    p_W += row0 * K
    p_U += row0 * V

    o_s = tl.arange(0, SUB)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_v = tl.arange(0, BLOCK_V)
    m_v = o_v < V
    # the four SUB-row blocks of the chunk; rows past the sequence end load k = v = g = β = w = 0
    o_t0, o_t1, o_t2, o_t3 = o_s, o_s + SUB, o_s + 2 * SUB, o_s + 3 * SUB
    m_t0, m_t1, m_t2, m_t3 = o_t0 < n, o_t1 < n, o_t2 < n, o_t3 < n
    b_k0 = tl.load(p_k + o_t0[:, None] * s_kt + o_k[None, :], mask=m_t0[:, None] & m_k[None, :], other=0.0)
    b_k1 = tl.load(p_k + o_t1[:, None] * s_kt + o_k[None, :], mask=m_t1[:, None] & m_k[None, :], other=0.0)
    b_k2 = tl.load(p_k + o_t2[:, None] * s_kt + o_k[None, :], mask=m_t2[:, None] & m_k[None, :], other=0.0)
    b_k3 = tl.load(p_k + o_t3[:, None] * s_kt + o_k[None, :], mask=m_t3[:, None] & m_k[None, :], other=0.0)
    DT = b_k0.dtype
    b_g0 = tl.load(p_g + o_t0 * s_gt, mask=m_t0, other=0.0).to(tl.float32) * LOG2E
    b_g1 = tl.load(p_g + o_t1 * s_gt, mask=m_t1, other=0.0).to(tl.float32) * LOG2E
    b_g2 = tl.load(p_g + o_t2 * s_gt, mask=m_t2, other=0.0).to(tl.float32) * LOG2E
    b_g3 = tl.load(p_g + o_t3 * s_gt, mask=m_t3, other=0.0).to(tl.float32) * LOG2E
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
    # T = (I + A)⁻¹: the diagonal blocks, then the off-diagonal ones a sub-diagonal at a time
    b_T00, b_T11, b_T22, b_T33 = _inv4_unit_lower(b_A00, b_A11, b_A22, b_A33, SUB)
    b_T10 = -_dot32(b_T11, _dot32(b_A10, b_T00))
    b_T21 = -_dot32(b_T22, _dot32(b_A21, b_T11))
    b_T32 = -_dot32(b_T33, _dot32(b_A32, b_T22))
    b_T20 = -_dot32(b_T22, _dot32(b_A20, b_T00) + _dot32(b_A21, b_T10))
    b_T31 = -_dot32(b_T33, _dot32(b_A31, b_T11) + _dot32(b_A32, b_T21))
    b_T30 = -_dot32(b_T33, _dot32(b_A30, b_T00) + _dot32(b_A31, b_T10) + _dot32(b_A32, b_T20))

    # W = T (βγ ⊙ K): block row i = Σ_{j≤i} T_ij Y_j, T rounded to the operand dtype (as every chunked
    # implementation does); fp32 accumulation, one rounding at the store
    b_y0 = (b_k0 * (b_b0 * tl.exp2(b_G0))[:, None]).to(DT)
    b_y1 = (b_k1 * (b_b1 * tl.exp2(b_G1))[:, None]).to(DT)
    b_y2 = (b_k2 * (b_b2 * tl.exp2(b_G2))[:, None]).to(DT)
    b_y3 = (b_k3 * (b_b3 * tl.exp2(b_G3))[:, None]).to(DT)
    b_t00, b_t11, b_t22, b_t33 = b_T00.to(DT), b_T11.to(DT), b_T22.to(DT), b_T33.to(DT)
    b_t10, b_t21, b_t32 = b_T10.to(DT), b_T21.to(DT), b_T32.to(DT)
    b_t20, b_t31, b_t30 = b_T20.to(DT), b_T31.to(DT), b_T30.to(DT)
    m_k0, m_k1 = m_t0[:, None] & m_k[None, :], m_t1[:, None] & m_k[None, :]
    m_k2, m_k3 = m_t2[:, None] & m_k[None, :], m_t3[:, None] & m_k[None, :]
    o_wk = o_k[None, :]
    b_o = tl.dot(b_t00, b_y0, input_precision=DOT_PRECISION)
    tl.store(p_W + o_t0[:, None] * (H_V * K) + o_wk, b_o.to(DT), mask=m_k0)
    b_o = tl.dot(b_t10, b_y0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t11, b_y1, b_o, input_precision=DOT_PRECISION)
    tl.store(p_W + o_t1[:, None] * (H_V * K) + o_wk, b_o.to(DT), mask=m_k1)
    b_o = tl.dot(b_t20, b_y0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t21, b_y1, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t22, b_y2, b_o, input_precision=DOT_PRECISION)
    tl.store(p_W + o_t2[:, None] * (H_V * K) + o_wk, b_o.to(DT), mask=m_k2)
    b_o = tl.dot(b_t30, b_y0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t31, b_y1, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t32, b_y2, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t33, b_y3, b_o, input_precision=DOT_PRECISION)
    tl.store(p_W + o_t3[:, None] * (H_V * K) + o_wk, b_o.to(DT), mask=m_k3)

    # Ũ = T (w ⊙ V), the same block sums (v loaded here, after W, to keep fewer tiles live)
    if HAS_W:
        b_w0 = tl.load(p_w + o_t0 * s_wt, mask=m_t0, other=0.0).to(tl.float32)
        b_w1 = tl.load(p_w + o_t1 * s_wt, mask=m_t1, other=0.0).to(tl.float32)
        b_w2 = tl.load(p_w + o_t2 * s_wt, mask=m_t2, other=0.0).to(tl.float32)
        b_w3 = tl.load(p_w + o_t3 * s_wt, mask=m_t3, other=0.0).to(tl.float32)
    else:
        b_w0, b_w1, b_w2, b_w3 = b_b0, b_b1, b_b2, b_b3
    m_v0, m_v1 = m_t0[:, None] & m_v[None, :], m_t1[:, None] & m_v[None, :]
    m_v2, m_v3 = m_t2[:, None] & m_v[None, :], m_t3[:, None] & m_v[None, :]
    b_x0 = (tl.load(p_v + o_t0[:, None] * s_vt + o_v[None, :], mask=m_v0, other=0.0) * b_w0[:, None]).to(DT)
    b_x1 = (tl.load(p_v + o_t1[:, None] * s_vt + o_v[None, :], mask=m_v1, other=0.0) * b_w1[:, None]).to(DT)
    b_x2 = (tl.load(p_v + o_t2[:, None] * s_vt + o_v[None, :], mask=m_v2, other=0.0) * b_w2[:, None]).to(DT)
    b_x3 = (tl.load(p_v + o_t3[:, None] * s_vt + o_v[None, :], mask=m_v3, other=0.0) * b_w3[:, None]).to(DT)
    o_uv = o_v[None, :]
    b_o = tl.dot(b_t00, b_x0, input_precision=DOT_PRECISION)
    tl.store(p_U + o_t0[:, None] * (H_V * V) + o_uv, b_o.to(DT), mask=m_v0)
    b_o = tl.dot(b_t10, b_x0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t11, b_x1, b_o, input_precision=DOT_PRECISION)
    tl.store(p_U + o_t1[:, None] * (H_V * V) + o_uv, b_o.to(DT), mask=m_v1)
    b_o = tl.dot(b_t20, b_x0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t21, b_x1, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t22, b_x2, b_o, input_precision=DOT_PRECISION)
    tl.store(p_U + o_t2[:, None] * (H_V * V) + o_uv, b_o.to(DT), mask=m_v2)
    b_o = tl.dot(b_t30, b_x0, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t31, b_x1, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t32, b_x2, b_o, input_precision=DOT_PRECISION)
    b_o = tl.dot(b_t33, b_x3, b_o, input_precision=DOT_PRECISION)
    tl.store(p_U + o_t3[:, None] * (H_V * V) + o_uv, b_o.to(DT), mask=m_v3)


# ----------------------------------------------------------------------------------------------- K2


@triton.jit
def _state_pass_kernel(
    p_q, p_k, p_G, p_W, p_U, p_h0, p_ht, p_cu, p_coff, p_hs, p_vn, p_o,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_ob, s_ot, s_oh,
    T, NT, scale, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr,
    STORE_HS: tl.constexpr, FUSE_O: tl.constexpr, SPLIT_STATE: tl.constexpr, SPLIT_O: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """The sequential scan: per chunk ``U = Ũ − W S₀ᵀ`` ``[C, BLOCK_V]``, ``S_C = 2^{G_C} S₀ +
    (2^{G_C − G} ⊙ U)ᵀ K``; FUSE_O: ``O = scale [(2^G ⊙ Q) S₀ᵀ + causal(Q Kᵀ ⊙ 2^{G_t − G_s}) U]`` too;
    otherwise U goes to ``vn`` for K3. STORE_HS: each chunk's ``S₀`` to ``hs[coff + j]``.

    Grid ``(cdiv(V, BLOCK_V), H_v, N)``. q, k, o as the public layouts; G, W, U, vn the K1/K2
    intermediates (contiguous ``[B, T, H_v, ·]``); h0/ht ``[N, H_v, V, K]``, hs ``[n_chunks, H_v, V, K]``
    fp32 contiguous. The state, transposed (``Sᵀ [K, BLOCK_V]``), stays fp32 in registers; where it is a
    16-bit dot operand it is split hi + lo (two dots) so its products keep ~16 mantissa bits.
    """
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK
    if IS_VARLEN:
        i_b = i_n * 0
        bos = tl.load(p_cu + i_n).to(tl.int64)
        L = (tl.load(p_cu + i_n + 1).to(tl.int64) - bos).to(tl.int32)
        coff = tl.load(p_coff + i_n).to(tl.int64)
    else:
        i_b = i_n
        bos = i_n * 0
        L = T
        coff = i_n * NT
    i_b = i_b.to(tl.int64)  # int64 offsets: B·T·H·K passes 2^31 at long contexts
    bos = bos.to(tl.int64)
    p_q += i_b * s_qb + bos * s_qt + i_hq * s_qh
    p_k += i_b * s_kb + bos * s_kt + i_hq * s_kh
    p_o += i_b * s_ob + bos * s_ot + i_h * s_oh
    row0 = (i_b * T + bos) * H_V + i_h
    p_G += row0
    p_W += row0 * K
    p_U += row0 * V
    p_vn += row0 * V

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
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
            tl.store(p_hs + (c0 // CHUNK) * (H_V * V * K) + o_hk, b_st, mask=m_hk)
        o_t = c0 + o_c
        m_t = o_t < L
        o_t = o_t.to(tl.int64)
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        b_k = tl.load(p_k + o_t[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
        DT = b_k.dtype
        b_wk = tl.load(p_W + o_t[:, None] * (H_V * K) + o_k[None, :], mask=m_tk, other=0.0)
        b_u = tl.load(p_U + o_t[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
        b_G = tl.load(p_G + o_t * H_V, mask=m_t, other=0.0)
        # G at the chunk's last token (a sequence's last chunk may be short)
        b_G_last = tl.sum(tl.where(o_c == tl.minimum(L - c0, CHUNK) - 1, b_G, 0.0), 0)

        b_s_hi = b_st.to(DT)
        if SPLIT_STATE:
            b_s_lo = (b_st - b_s_hi.to(tl.float32)).to(DT)
        if FUSE_O:
            # the state's share of the output first, so S₀'s operand halves die before U is formed
            b_q = tl.load(p_q + o_t[:, None] * s_qt + o_k[None, :], mask=m_tk, other=0.0)
            b_qg = (b_q * tl.exp2(b_G)[:, None]).to(DT)
            b_o = tl.dot(b_qg, b_s_hi, input_precision=DOT_PRECISION)
            if SPLIT_O:
                b_o = tl.dot(b_qg, b_s_lo, b_o, input_precision=DOT_PRECISION)
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
            b_qk = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION)
            # rows past the end load G = 0: masked too (their G_t − G_s > 0 would overflow)
            m_p = m_causal & m_t[:, None]
            b_p = tl.where(m_p, b_qk * tl.exp2(tl.where(m_p, b_G[:, None] - b_G[None, :], 0.0)), 0.0).to(DT)
            b_o = tl.dot(b_p, b_u, b_o, input_precision=DOT_PRECISION)
            tl.store(p_o + o_t[:, None] * s_ot + o_v[None, :], (b_o * scale).to(p_o.dtype.element_ty), mask=m_tv)
        else:
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
    b_o = tl.dot(b_p, b_u, b_o, input_precision=DOT_PRECISION)
    tl.store(p_o + o_c[:, None] * s_ot + o_v[None, :], (b_o * scale).to(p_o.dtype.element_ty), mask=m_tv)


# ------------------------------------------------------------------------------------------- launcher

GPU_CHUNK = 64
"""The chunk on the GPU (whatever is requested: the chunk is a blocking choice, every size computes the
same recurrence up to rounding): K1's four diagonal blocks are then 16 rows, the smallest tensor-core
tile, and K2/K3's products are 64-row tiles."""


class _Plan(NamedTuple):
    CHUNK: int
    BLOCK_K: int
    BLOCK_V_ALL: int    # K1: all of V in one tile (Ũ = T (w ⊙ V) once per chunk)
    BLOCK_V: int        # K2 (and K3) V rows per program
    warps_prep: int
    warps_scan: int
    stages_scan: int
    warps_out: int
    DOT_PRECISION: str


@cached_plan
def _plan(chunk_size: int, K: int, V: int, fp32: bool, fused: bool) -> _Plan:
    """Tiles and warps, from AOT compiles for sm_90 (B 8 T 4096 H 16 and T 300 with varlen, h0, final
    state, write strength; K = V = 128; docs/notes/gated_delta.md, "Chunk-parallel forward"). Whole K in
    every tile (one dot per product; K ≤ 256).

    - K1: 8 warps (177–179 registers, no spills; at 4 warps it sat at 255 and spilled 16–24 B/thread in
      the varlen / odd-T specialisations).
    - K2: 32-row V blocks, 8 warps (4 programs per (sequence, head): 512 at B 8 H 16). Fused: no software
      pipelining (``num_stages=1``): 205–248 registers, no spills, every product a wgmma (the state held
      transposed makes its update a 128-row tile). Candidates for the tuner, not defaults: 2 stages (the
      next chunk's loads in flight; 255 registers: no spill at the bench shape, 24–64 B/thread with an odd
      T or an initial state) and 64-row blocks (8 B at 1 stage, 280 B at 2). Unfused: 2 stages, 173–183
      registers.
    - K3: 32 rows, 4 warps, 196–204 registers.
    - fp32 inputs: fp32 operands and ``ieee`` dots, 16-row V blocks; they spill heavily on sm_90 (K1
      ~4.8 KB/thread): correct but slow, an accuracy path — route fp32 to ``prefill_fwd.py`` for speed.
    The interpreter takes the requested chunk and one warp."""
    block_k = next_pow2(max(K, 16))
    block_v_all = next_pow2(max(V, 16))
    if interpreter_active():
        return _Plan(chunk_size, block_k, block_v_all, min(block_v_all, 32), 1, 1, 1, 1, "ieee")
    block_v = min(block_v_all, 16 if fp32 else 32)
    return _Plan(GPU_CHUNK, block_k, block_v_all, block_v, 8, 8, 1 if fused else 2, 4, "ieee")


def _varlen_chunks(cu_seqlens: torch.Tensor, chunk: int, T: int) -> tuple[torch.Tensor, ...]:
    """``(coff [N], cs [n_slots], ce [n_slots], n_slots)`` on the device, with no host sync: sequence n's
    chunks are slots ``coff[n] …`` (exclusive cumsum of ``cdiv(len, C)``); slot i covers tokens ``[cs[i],
    min(cs[i] + C, ce[i]))``. ``n_slots = cdiv(T, C) + N`` bounds the chunk count without reading the
    lengths; the slots past the last chunk get ``cs = ce = 0`` (no tokens: their programs store nothing)."""
    n_seq = cu_seqlens.shape[0] - 1
    cu = cu_seqlens.to(torch.int64)
    per = torch.div(cu[1:] - cu[:-1] + chunk - 1, chunk, rounding_mode="floor")
    cend = torch.cumsum(per, 0)
    coff = cend - per
    n_slots = cdiv(T, chunk) + n_seq
    slot = torch.arange(n_slots, device=cu.device)
    seq = torch.searchsorted(cend, slot, right=True)
    live = seq < n_seq
    seq = seq.clamp(max=n_seq - 1)
    cs = torch.where(live, cu[seq] + (slot - coff[seq]) * chunk, 0).to(torch.int32)
    ce = torch.where(live, cu[seq + 1], 0).to(torch.int32)
    return coff.to(torch.int32), cs, ce, n_slots


def chunked_prefill_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        *, scale: float, initial_state: torch.Tensor | None, output_final_state: bool,
                        cu_seqlens: torch.Tensor | None, chunk_size: int = 64,
                        write_strength: torch.Tensor | None = None, fuse_output: bool = True,
                        store_states: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """The chunk-parallel forward (inputs validated by the caller, as for ``gated_delta_prefill_fwd``).

    Args:
        q, k ``[B, T, H_qk, K]``, v ``[B, T, H_v, V]`` (unit last-dim stride), g, beta, write_strength
        ``[B, T, H_v]`` (any strides); initial_state ``[N, H_v, V, K]`` fp32 contiguous or None;
        cu_seqlens ``[N + 1]`` int32/int64 with ``B = 1``, or None; scale; chunk_size 16/32/64 (the GPU
        always runs 64, :data:`GPU_CHUNK`; the interpreter the requested one).
        fuse_output: compute o inside the state scan (K1 + K2: no chunk-state round trip) instead of in a
            third, fully parallel kernel (K1 + K2 + K3, the chunk-start states through memory in fp32).
        store_states: also keep the chunk-start states when fusing (the unfused path always has them).

    Returns:
        ``(o, final_state, saved)``: o ``[B, T, H_v, V]`` in v's dtype; final_state ``[N, H_v, V, K]``
        fp32 or None (without ``output_final_state``); ``saved`` a dict of what a backward may reuse:
        ``chunk`` (the chunk the kernels ran), ``G`` ``[B, T, H_v]`` fp32 (the chunk-local cumulative
        log-decay in LOG2 units, ``log2(e)·Σ g`` from the chunk start), ``W`` ``[B, T, H_v, K]`` and
        ``U_tilde`` ``[B, T, H_v, V]`` (input dtype: ``T (βγ ⊙ K)``, ``T (w ⊙ V)`` per chunk), ``h`` the
        chunk-start states ``[n_slots, H_v, V, K]`` fp32 (row ``coff[n] + j``; varlen slots past the last
        chunk unwritten) or None, ``v_new`` ``[B, T, H_v, V]`` (input dtype, ``U = Ũ − W S₀ᵀ``) or None
        when fused, ``chunk_offsets`` ``coff [N]`` int32 (varlen) or None (dense: ``n · cdiv(T, C)``).
    """
    B, T, H_qk, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    dev = v.device
    dt = v.dtype
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    fp32 = q.dtype == torch.float32
    plan = _plan(chunk_size, K, V, fp32, bool(fuse_output))
    chunk, block_k, block_v, precision = plan.CHUNK, plan.BLOCK_K, plan.BLOCK_V, plan.DOT_PRECISION
    w = write_strength if write_strength is not None else beta
    if cu_seqlens is None:
        nt = cdiv(T, chunk)
        n_slots, coff = B * nt, None
        cs = ce = cu = coff_arg = g  # unused pointers (constexpr-disabled)
        slots_per_row = nt
    else:
        nt = 0
        coff, cs, ce, n_slots = _varlen_chunks(cu_seqlens, chunk, T)
        cu, coff_arg = cu_seqlens, coff
        slots_per_row = n_slots

    G = empty((B, T, H_v), dtype=torch.float32, device=dev)
    W = empty((B, T, H_v, K), dtype=dt, device=dev)
    U = empty((B, T, H_v, V), dtype=dt, device=dev)
    launch(_chunk_prep_kernel, (slots_per_row, H_v, B),
           k, v, g, beta, w, cs, ce, G, W, U,
           k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
           g.stride(0), g.stride(1), g.stride(2), beta.stride(0), beta.stride(1), beta.stride(2),
           w.stride(0), w.stride(1), w.stride(2),
           T, H_v // H_qk,
           num_warps=plan.warps_prep, H_V=H_v, K=K, V=V, SUB=chunk // 4, BLOCK_K=block_k,
           BLOCK_V=plan.BLOCK_V_ALL,
           IS_VARLEN=cu_seqlens is not None, HAS_W=write_strength is not None, DOT_PRECISION=precision)

    o = empty((B, T, H_v, V), dtype=dt, device=dev)
    ht = empty((n_seq, H_v, V, K) if output_final_state else (0,), dtype=torch.float32, device=dev)
    keep_h = store_states or not fuse_output
    hs = empty((n_slots, H_v, V, K) if keep_h else (0,), dtype=torch.float32, device=dev)
    vn = empty((B, T, H_v, V) if not fuse_output else (0,), dtype=dt, device=dev)
    h0 = initial_state if initial_state is not None else ht
    n_v = cdiv(V, block_v)
    launch(_state_pass_kernel, (n_v, H_v, n_seq),
           q, k, G, W, U, h0, ht, cu, coff_arg, hs, vn if not fuse_output else o, o,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           o.stride(0), o.stride(1), o.stride(2),
           T, nt, scale, H_v // H_qk,
           num_warps=plan.warps_scan, num_stages=plan.stages_scan, H_V=H_v, K=K, V=V, CHUNK=chunk,
           BLOCK_K=block_k, BLOCK_V=block_v,
           IS_VARLEN=cu_seqlens is not None, HAS_H0=initial_state is not None, STORE_HT=output_final_state,
           STORE_HS=keep_h, FUSE_O=fuse_output, SPLIT_STATE=not fp32, SPLIT_O=not fp32,
           DOT_PRECISION=precision)
    if not fuse_output:
        launch(_chunk_output_kernel, (n_v, slots_per_row, B * H_v),
               q, k, G, hs, vn, cs, ce, o,
               q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               o.stride(0), o.stride(1), o.stride(2),
               T, nt, scale, H_v // H_qk,
               num_warps=plan.warps_out, H_V=H_v, K=K, V=V, CHUNK=chunk, BLOCK_K=block_k, BLOCK_V=block_v,
               IS_VARLEN=cu_seqlens is not None, SPLIT_STATE=not fp32, DOT_PRECISION=precision)
    saved = {"chunk": chunk, "G": G, "W": W, "U_tilde": U, "h": hs if keep_h else None,
             "v_new": vn if not fuse_output else None, "chunk_offsets": coff}
    return o, (ht if output_final_state else None), saved
