"""Chunk-parallel prefill backward (16-bit inputs): two short sequential scans, everything else parallel
over chunks (the structure of fla's chunked backward; the math is ``prefill_bwd.py``'s, derived in
docs/notes/gated_delta.md, "Backward").

Notation per chunk of C tokens: ``G`` the chunk-local cumulative log-decay in LOG2 units (``γ = 2^G``,
``γ_C = 2^{G_C}``), ``A = strictly-lower(β_s (k_s·k_r) 2^{G_s−G_r})``, ``T = (I + A)⁻¹``, ``X = w ⊙ V``,
``Y = βγ ⊙ K``, ``W = T Y``, ``U = T X − W S₀ᵀ``, ``K̂ = 2^{G_C−G} ⊙ K``, ``P = Q Kᵀ ⊙ M`` (M the causal
decay mask ``2^{G_t−G_s}``, t ≥ s), ``O = scale (γ ⊙ Q S₀ᵀ + P U)``, ``S_C = γ_C S₀ + Uᵀ K̂``.

0. The forward's own kernels recompute the chunk-start states ``S₀`` and U (``v_new``), both in the input
   dtype (``chunked_prefill_fwd(need_output=False, wy_in_scan=True)``: U formed from T in the scan, no W);
   T and G are the forward's own when the caller passes them (``inverses``; the public op does), else
   recomputed too.
1. ``_dh_scan_kernel`` — grid (V-blocks, H_v, sequences), chunks last → first, ``dS`` (the gradient of
   the state at the current chunk's END) fp32 in registers, held transposed ``[K, BLOCK_V]`` like the
   forward's state. Per chunk it stores ``dS_C`` (input dtype) and
       ``dU = scale Pᵀ dO + K̂ dS_Cᵀ``   (stored in the input dtype: every later use is a 16-bit operand)
       ``dS₀ = γ_C dS_C + scale dOᵀ (γ ⊙ Q) − dUᵀ W``, with ``Wᵀ dU = Kᵀ (βγ ⊙ Tᵀ dU)`` (no W).
   No S₀ is read: the scan is 6 dots per chunk, 3 of them on the dependent chain.
2. ``_dqkwg_kernel`` — grid (chunks × K/64 column blocks, H_v, B), V looped inside (``[C, 64]`` fp32 accumulators):
       ``dP = scale dO Uᵀ``, ``dQ = (dP ⊙ M) K + scale γ ⊙ (dO S₀)``, ``dK̂ = U dS_C``, ``dW = −dU S₀``,
       the direct dK part ``(dP ⊙ M)ᵀ Q + 2^{G_C−G} ⊙ dK̂`` and the per-token dG shares of P, γ (output),
       K̂ and ``γ_C S₀`` (the last two to the chunk's last token), each column block's part of dG apart.
3. ``_wy_bwd_kernel`` — grid (chunks, H_v, B): T as the forward stored it (``saved["T"]``; when absent,
   recomputed from A: 16-row diagonal blocks by the product form, merged with fp32 dots, assembled into
   one ``[C, C]`` tile — that variant spills on sm_90), then over V ``dT = dU Xᵀ``, ``dX = Tᵀ dU``
   (→ dv = w ⊙ dX, dw = Σ dX ⊙ v), and over K ``dT += dW Yᵀ``, ``dY = Tᵀ dW``; ``dA = −Tᵀ dT Tᵀ``
   (strictly lower), and through A, Y: dk (plus step 2's part), dβ, dG (plus step 2's parts); finally
   ``dg = reverse-cumsum(dG)`` within the chunk.

H100, B8 T4096 H16 K = V = 128 bf16: 2.03 ms with the forward's T (recompute 0.29, scan 0.46–0.51, dq/dk
0.77, WY 0.46 ms), 4.0× the forward; ``_plan`` has the sweep behind each choice.

Deterministic (no atomics). Gradients of the q/k heads shared by several value heads are kept in fp32 per
value head, then summed in a fixed order and rounded once (``common.sum_head_groups``, one kernel).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernelworks.ops.gated_delta.common import sum_head_groups, zero_gaps
from kernelworks.ops.gated_delta.prefill_chunked import (
    _chunk_program,
    _dot32,
    _inv_unit_lower_product,
    _sequence_span,
    _varlen_chunks,
    check_inverses,
    chunk_slots,
    chunked_prefill_fwd,
    kernel_chunk,
    scan_block_v,
)
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

# --------------------------------------------------------------------------------------------- helpers


@triton.jit
def _chunk_gates(p_G, o_c, m_t, n_valid, H_V: tl.constexpr):
    """G (log2 units, fp32) of one chunk from the forward's saved G, and ``G_C`` (G at the chunk's last
    token). Rows past the sequence end take ``G_C`` (not 0), so every exponent ``G_t − G_s`` with t ≥ s
    stays ≤ 0 and nothing overflows where those rows meet zero operands."""
    b_G = tl.load(p_G + o_c * H_V, mask=m_t, other=0.0)
    b_GC = tl.sum(tl.where(o_c == n_valid - 1, b_G, 0.0), 0)
    return tl.where(m_t, b_G, b_GC), b_GC


@triton.jit
def _decay_lower(b_G, m_lower):
    """``2^{G_s − G_r}`` on the strictly-lower triangle, 0 elsewhere (exponent masked before exp2)."""
    return tl.where(m_lower, tl.exp2(tl.where(m_lower, b_G[:, None] - b_G[None, :], 0.0)), 0.0)


@triton.jit
def _dot_split(a, b, acc, SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """``acc + a @ b`` with ``a`` a 16-bit operand and ``b`` an fp32 tile (a state or a state gradient):
    ``b`` is split hi + lo (~16 mantissa bits together) and both halves are multiplied, so the fp32 tile is
    not rounded to the 16-bit dtype (as the forward does with the state)."""
    b_hi = b.to(a.dtype)
    acc = tl.dot(a, b_hi, acc, input_precision=DOT_PRECISION)
    if SPLIT:
        acc = tl.dot(a, (b - b_hi.to(tl.float32)).to(a.dtype), acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def _split_rows(x, R: tl.constexpr, N: tl.constexpr):
    """``[R, N]`` → its top and bottom ``[R/2, N]`` halves (register tiles cannot be sliced)."""
    return tl.split(tl.permute(tl.reshape(x, (2, R // 2, N)), (1, 2, 0)))


@triton.jit
def _split_cols(x, R: tl.constexpr, N: tl.constexpr):
    """``[R, N]`` → its left and right ``[R, N/2]`` halves."""
    return tl.split(tl.permute(tl.reshape(x, (R, 2, N // 2)), (0, 2, 1)))


@triton.jit
def _cat_cols(a, b, R: tl.constexpr, N: tl.constexpr):
    """``[a | b]`` for two ``[R, N]`` tiles → ``[R, 2N]``."""
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), (R, 2 * N))


@triton.jit
def _cat_rows(a, b, R: tl.constexpr, N: tl.constexpr):
    """``[a; b]`` for two ``[R, N]`` tiles → ``[2R, N]``."""
    return tl.reshape(tl.permute(tl.join(a, b), (2, 0, 1)), (2 * R, N))


@triton.jit
def _inv_merge(b_T0, b_T1, b_A10, R: tl.constexpr):
    """The ``[2R, 2R]`` inverse of ``I + [[A00, 0], [A10, A11]]`` from ``T0 = (I + A00)⁻¹``,
    ``T1 = (I + A11)⁻¹``: the off-diagonal block is ``−T1 A10 T0``."""
    b_T10 = -_dot32(b_T1, _dot32(b_A10, b_T0))
    b_top = _cat_cols(b_T0, tl.zeros([R, R], dtype=tl.float32), R, R)
    return _cat_rows(b_top, _cat_cols(b_T10, b_T1, R, R), R, 2 * R)


@triton.jit
def _ut_inverse_blocked(b_A, C: tl.constexpr):
    """``T = (I + A)⁻¹`` for a strictly-lower ``[C, C]`` fp32 tile (C = 4·SUB, SUB ≤ 16): the four SUB-row
    diagonal blocks by the product form, merged two levels up with fp32 dots. The serial depth is ~10
    small dots instead of C row steps."""
    H: tl.constexpr = C // 2
    Q: tl.constexpr = C // 4
    b_top, b_bot = _split_rows(b_A, C, C)
    b_TL, _ = _split_cols(b_top, H, C)
    b_BL, b_BR = _split_cols(b_bot, H, C)
    # quadrants → SUB blocks: top-left (00, 10, 11), bottom-right (22, 32, 33)
    b_a, b_b = _split_rows(b_TL, H, H)
    b_A00, _ = _split_cols(b_a, Q, H)
    b_A10, b_A11 = _split_cols(b_b, Q, H)
    b_a, b_b = _split_rows(b_BR, H, H)
    b_A22, _ = _split_cols(b_a, Q, H)
    b_A32, b_A33 = _split_cols(b_b, Q, H)
    b_T01 = _inv_merge(_inv_unit_lower_product(b_A00), _inv_unit_lower_product(b_A11), b_A10, Q)
    b_T23 = _inv_merge(_inv_unit_lower_product(b_A22), _inv_unit_lower_product(b_A33), b_A32, Q)
    return _inv_merge(b_T01, b_T23, b_BL, H)


# ----------------------------------------------------------------------------------- 1. dS scan


@triton.jit
def _dh_scan_kernel(
    p_q, p_k, p_G, p_W, p_T, p_beta, p_do, p_dht, p_cu, p_coff, p_dh, p_du, p_dh0,
    p_dq, p_dk, p_dv, p_dg, p_dbeta, p_dw,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_bb, s_bt, s_bh, s_ob, s_ot, s_oh,
    T, NT, scale, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_DHT: tl.constexpr, STORE_DH0: tl.constexpr,
    SPLIT_STATE: tl.constexpr, W_FROM_T: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ZERO_GAPS: tl.constexpr = False, HAS_W: tl.constexpr = False,
):
    """Reverse scan of the state gradient. Per chunk (last first), with ``dS`` the gradient of the state
    at the chunk's end: store ``dS`` to ``dh[coff + j]``; ``dU = scale Pᵀ dO + K̂ dSᵀ`` → du;
    ``dS ← γ_C dS + scale dOᵀ (γ ⊙ Q) − dUᵀ W``. After the first chunk ``dS`` is d initial_state.

    Grid ``(cdiv(V, BLOCK_V), H_v, N)``. q, k ``[B, T, H_qk, K]``, do ``[B, T, H_v, V]`` (strides given,
    unit last); G ``[B, T, H_v]`` fp32, W ``[B, T, H_v, K]`` (the forward's K1 outputs, contiguous);
    W_FROM_T: no W, ``Wᵀ dU = Kᵀ (βγ ⊙ Tᵀ dU)`` from T ``[B, T, H_v, C]`` and beta ``[B, T, H_v]`` (strides
    given) instead — one more small dot a chunk, no W to form and store in the recompute;
    dht/dh0 ``[N, H_v, V, K]`` fp32; dh ``[n_slots, H_v, V, K]`` fp32 or the input dtype (the layout of
    the forward's chunk-start states); du ``[B, T, H_v, V]`` in the input dtype. ``dS`` is held transposed (``[K,
    BLOCK_V]``): the B operand of ``K̂ dSᵀ`` as it stands, and its update ``(γ⊙Q)ᵀ dO − Wᵀ dU`` has K = 128
    rows (a wgmma tile).

    ZERO_GAPS (varlen): the final gradients dq, dk, dv ``[B, T, H_v, K or V]`` and dg, dbeta, dw (HAS_W)
    ``[B, T, H_v]`` (contiguous) get zeros in the rows no sequence covers (before ``cu[0]``, past ``cu[N]``:
    their tokens reach no output), written by the first and last sequence's programs; the chunk kernels
    write every covered row.
    """
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2).to(tl.int64)
    i_hq = i_h // HV_PER_QK
    i_b, bos, L, coff = _sequence_span(p_cu, p_coff, i_n, T, NT, IS_VARLEN)
    p_q += i_b * s_qb + bos * s_qt + i_hq * s_qh
    p_k += i_b * s_kb + bos * s_kt + i_hq * s_kh
    p_do += i_b * s_ob + bos * s_ot + i_h * s_oh
    row0 = (i_b * T + bos) * H_V + i_h  # the intermediates' row of the sequence's first token (int64)
    p_G += row0
    if W_FROM_T:
        p_T += row0 * CHUNK
        p_beta += i_b * s_bb + bos * s_bt + i_h * s_bh
    else:
        p_W += row0 * K
    p_du += row0 * V

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < V
    o_c = tl.arange(0, CHUNK)
    m_upper = o_c[None, :] >= o_c[:, None]   # Pᵀ[s, t] lives at t ≥ s
    m_hk = m_k[:, None] & m_v[None, :]
    o_hk = o_v[None, :] * K + o_k[:, None]   # dSᵀ [K, BLOCK_V] over K-contiguous [V, K] rows
    if ZERO_GAPS:
        eos = bos + L
        zero_gaps(p_dv + i_h * V, H_V * V, bos, eos, T, o_v, m_v, CHUNK)
        if i_v == 0:
            zero_gaps(p_dq + i_h * K, H_V * K, bos, eos, T, o_k, m_k, CHUNK)
            zero_gaps(p_dk + i_h * K, H_V * K, bos, eos, T, o_k, m_k, CHUNK)
            o_1 = tl.arange(0, 1)
            zero_gaps(p_dg + i_h, H_V, bos, eos, T, o_1, o_1 < 1, CHUNK)
            zero_gaps(p_dbeta + i_h, H_V, bos, eos, T, o_1, o_1 < 1, CHUNK)
            if HAS_W:
                zero_gaps(p_dw + i_h, H_V, bos, eos, T, o_1, o_1 < 1, CHUNK)
    if HAS_DHT:
        b_dst = tl.load(p_dht + (i_n * H_V + i_h) * (V * K) + o_hk, mask=m_hk, other=0.0)
    else:
        b_dst = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    p_dh += (coff * H_V + i_h) * (V * K)

    n_chunks = tl.cdiv(L, CHUNK)
    for j in range(0, n_chunks):
        i_c = n_chunks - 1 - j                       # reverse: the last chunk first
        c0 = i_c * CHUNK
        tl.store(p_dh + i_c.to(tl.int64) * (H_V * V * K) + o_hk, b_dst.to(p_dh.dtype.element_ty), mask=m_hk)
        o_t = c0 + o_c
        m_t = o_t < L
        o_t = o_t.to(tl.int64)
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        b_k = tl.load(p_k + o_t[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
        DT = b_k.dtype
        b_q = tl.load(p_q + o_t[:, None] * s_qt + o_k[None, :], mask=m_tk, other=0.0)
        b_do = tl.load(p_do + o_t[:, None] * s_ot + o_v[None, :], mask=m_tv, other=0.0)
        b_G, b_GC = _chunk_gates(p_G + c0 * H_V, o_c, m_t, tl.minimum(L - c0, CHUNK), H_V)

        # Pᵀ = (K Qᵀ) ⊙ 2^{G_t − G_s} at t ≥ s (exponent masked before exp2: it is > 0 elsewhere)
        b_kq = tl.dot(b_k, tl.trans(b_q), input_precision=DOT_PRECISION)
        b_pt = tl.where(m_upper, b_kq * tl.exp2(tl.where(m_upper, b_G[None, :] - b_G[:, None], 0.0)), 0.0)
        # the [C, K] tiles (q, k, W) enter only as raw dot operands; every per-token factor is applied to
        # the narrow [C, BLOCK_V] side instead (K̂ dSᵀ = 2^{G_C−G} ⊙ (K dSᵀ), (γ⊙Q)ᵀ dO = Qᵀ (γ ⊙ dO)):
        # no [C, K] tile is rewritten in registers (at 8 warps that kept the kernel from spilling)
        b_kds = _dot_split(b_k, b_dst, tl.zeros([CHUNK, BLOCK_V], dtype=tl.float32), SPLIT_STATE, DOT_PRECISION)
        b_du = tl.dot(b_pt.to(DT), b_do.to(DT), input_precision=DOT_PRECISION) * scale
        b_du += b_kds * tl.exp2(b_GC - b_G)[:, None]
        b_dud = b_du.to(DT)   # its every use (here and in the chunk kernels) is a 16-bit operand
        tl.store(p_du + o_t[:, None] * (H_V * V) + o_v[None, :], b_dud, mask=m_tv)

        # dS₀ᵀ = γ_C dS_Cᵀ + scale (γ ⊙ Q)ᵀ dO − Wᵀ dU
        b_dog = (b_do * (scale * tl.exp2(b_G))[:, None]).to(DT)
        b_dst = tl.dot(tl.trans(b_q), b_dog, b_dst * tl.exp2(b_GC), input_precision=DOT_PRECISION)
        if W_FROM_T:
            # W = T (βγ ⊙ K): Wᵀ dU = Kᵀ (βγ ⊙ (Tᵀ dU)), the per-token factor again on the narrow side
            b_T = tl.load(p_T + o_t[:, None] * (H_V * CHUNK) + o_c[None, :], mask=m_t[:, None], other=0.0)
            b_bt = tl.load(p_beta + o_t * s_bt, mask=m_t, other=0.0).to(tl.float32)
            b_tdu = tl.dot(tl.trans(b_T), b_dud, input_precision=DOT_PRECISION)
            b_tdu = (b_tdu * -(b_bt * tl.exp2(b_G))[:, None]).to(DT)
            b_dst = tl.dot(tl.trans(b_k), b_tdu, b_dst, input_precision=DOT_PRECISION)
        else:
            b_w = tl.load(p_W + o_t[:, None] * (H_V * K) + o_k[None, :], mask=m_tk, other=0.0)
            b_dst = tl.dot(tl.trans(b_w), -b_dud, b_dst, input_precision=DOT_PRECISION)

    if STORE_DH0:
        tl.store(p_dh0 + (i_n * H_V + i_h) * (V * K) + o_hk, b_dst, mask=m_hk)


# -------------------------------------------------------------------------- 2. dq, dk (direct), dW, dG


@triton.jit
def _dqkwg_kernel(
    p_q, p_k, p_G, p_vn, p_do, p_du, p_hs, p_dh, p_cs, p_ce,
    p_dq, p_dk, p_dW, p_dG,
    s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_ob, s_ot, s_oh, s_dg_part,
    T, NT, scale, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, SPLIT_STATE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    K_SPLIT: tl.constexpr = 1,
):
    """One chunk, one value head, all of V (looped in BLOCK_V blocks):

        dP = scale dO Uᵀ        dQ = (dP ⊙ M) K + scale γ ⊙ (dO S₀)       dW = −dU S₀
        dK̂ = U dS_C             dk_direct = (dP ⊙ M)ᵀ Q + 2^{G_C − G} ⊙ dK̂

    and dG (natural-log units, before the reverse cumsum): ``rowsum(F) − colsum(F)`` for ``F = dP ⊙ P``,
    ``Σ_k dQ₁ ⊙ Q`` (γ in the output), ``−dK̂ ⊙ K̂`` per token and ``Σ dK̂ ⊙ K̂ + γ_C ⟨dS_C, S₀⟩`` at the
    chunk's last token (G_C in K̂ and in ``γ_C S₀``).

    K_SPLIT: the K columns are shared among K_SPLIT programs per chunk (BLOCK_K each): every output but dG
    is column-wise, and each of dG's shares is a sum over K (P too, ``Q Kᵀ`` summed by column blocks), so
    program j writes the part of dG from its columns to ``dG + j·s_dg_part`` and the WY kernel adds the
    parts; only ``dP`` (a reduction over V) is computed by each of them. Smaller accumulators: 4 warps
    and several programs per SM instead of 8 warps and one.

    Grid ``(n_chunks · K_SPLIT, H_v, B)``; dense: chunk i at token i·C of batch row program_id(2), its
    states at hs/dh row ``b·NT + i``; varlen (B = 1): slot i covers ``[cs[i], min(cs[i] + C, ce[i]))``,
    states at row i. vn = U and du ``[B, T, H_v, V]`` (input dtype), hs/dh ``[n_slots, H_v, V, K]`` fp32
    or the input dtype (then one 16-bit operand each, no split). Outputs ``[B, T, H_v, ·]`` contiguous:
    dq and dk (their pointers' dtypes), dW (input dtype), dG fp32 ``[K_SPLIT, B, T, H_v]``.
    """
    i_c, i_b, i_h, i_hq, t0, n, row0 = _chunk_program(p_cs, p_ce, T, HV_PER_QK, H_V, CHUNK, IS_VARLEN, K_SPLIT)
    if n <= 0:  # a varlen slot past the last chunk
        return
    row_hs = i_b * NT + i_c
    p_q += i_b * s_qb + t0 * s_qt + i_hq * s_qh
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_do += i_b * s_ob + t0 * s_ot + i_h * s_oh
    p_G += row0
    p_vn += row0 * V
    p_du += row0 * V
    p_dq += row0 * K
    p_dk += row0 * K
    p_dW += row0 * K
    p_dG += row0 + (tl.program_id(0) % K_SPLIT) * s_dg_part
    p_hs += (row_hs * H_V + i_h) * (V * K)
    p_dh += (row_hs * H_V + i_h) * (V * K)

    o_k = (tl.program_id(0) % K_SPLIT) * BLOCK_K + tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_c = tl.arange(0, CHUNK)
    m_t = o_c < n
    m_tk = m_t[:, None] & m_k[None, :]
    DT = p_vn.dtype.element_ty

    b_dp = tl.zeros([CHUNK, CHUNK], dtype=tl.float32)
    b_dq1 = tl.zeros([CHUNK, BLOCK_K], dtype=tl.float32)
    b_dkh = tl.zeros([CHUNK, BLOCK_K], dtype=tl.float32)
    b_dw = tl.zeros([CHUNK, BLOCK_K], dtype=tl.float32)
    b_ss = tl.zeros([BLOCK_K], dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        o_v = v0 + tl.arange(0, BLOCK_V)
        m_v = o_v < V
        m_tv = m_t[:, None] & m_v[None, :]
        m_hk = m_v[:, None] & m_k[None, :]
        b_do = tl.load(p_do + o_c[:, None] * s_ot + o_v[None, :], mask=m_tv, other=0.0).to(DT)
        b_u = tl.load(p_vn + o_c[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0)
        b_du = tl.load(p_du + o_c[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0)
        b_s0 = tl.load(p_hs + o_v[:, None] * K + o_k[None, :], mask=m_hk, other=0.0)
        b_dsc = tl.load(p_dh + o_v[:, None] * K + o_k[None, :], mask=m_hk, other=0.0)
        b_dp = tl.dot(b_do, tl.trans(b_u), b_dp, input_precision=DOT_PRECISION)
        b_dq1 = _dot_split(b_do, b_s0, b_dq1, SPLIT_STATE, DOT_PRECISION)
        b_dw = _dot_split(b_du, b_s0, b_dw, SPLIT_STATE, DOT_PRECISION)
        b_dkh = _dot_split(b_u, b_dsc, b_dkh, SPLIT_STATE, DOT_PRECISION)
        b_ss += tl.sum(b_dsc.to(tl.float32) * b_s0.to(tl.float32), 0)

    tl.store(p_dW + o_c[:, None] * (H_V * K) + o_k[None, :], (-b_dw).to(DT), mask=m_tk)
    b_q = tl.load(p_q + o_c[:, None] * s_qt + o_k[None, :], mask=m_tk, other=0.0)
    b_k = tl.load(p_k + o_c[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
    b_G, b_GC = _chunk_gates(p_G, o_c, m_t, tl.minimum(n, CHUNK), H_V)
    m_causal = o_c[:, None] >= o_c[None, :]
    b_M = tl.where(m_causal, tl.exp2(tl.where(m_causal, b_G[:, None] - b_G[None, :], 0.0)), 0.0)
    b_dp = b_dp * scale
    b_dpm = (b_dp * b_M).to(DT)
    b_dq1 = b_dq1 * (scale * tl.exp2(b_G))[:, None]
    b_dq = tl.dot(b_dpm, b_k, b_dq1, input_precision=DOT_PRECISION)
    tl.store(p_dq + o_c[:, None] * (H_V * K) + o_k[None, :], b_dq.to(p_dq.dtype.element_ty), mask=m_tk)
    b_e = tl.exp2(b_GC - b_G)
    b_dk = tl.dot(tl.trans(b_dpm), b_q, b_dkh * b_e[:, None], input_precision=DOT_PRECISION)
    tl.store(p_dk + o_c[:, None] * (H_V * K) + o_k[None, :], b_dk.to(p_dk.dtype.element_ty), mask=m_tk)

    # dG: P = Q Kᵀ ⊙ M recomputed (fp32; with K_SPLIT, this program's columns' part of it) for dP ⊙ P
    b_P = tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION) * b_M
    b_F = b_dp * b_P
    b_dG = tl.sum(b_F, 1) - tl.sum(b_F, 0) + tl.sum(b_dq1 * b_q.to(tl.float32), 1)
    b_khk = tl.sum(b_dkh * (b_k.to(tl.float32) * b_e[:, None]), 1)
    b_last = tl.sum(b_khk, 0) + tl.exp2(b_GC) * tl.sum(b_ss, 0)
    # G_C is G of the last VALID token: its share goes there (the reverse cumsum carries it to every token)
    b_dG = b_dG - b_khk + tl.where(o_c == tl.minimum(n, CHUNK) - 1, b_last, 0.0)
    tl.store(p_dG + o_c * H_V, b_dG, mask=m_t)


# ---------------------------------------------------------------------------------------- 3. WY backward


@triton.jit
def _wy_bwd_kernel(
    p_k, p_v, p_beta, p_w, p_G, p_T, p_du, p_dW, p_dk1, p_dG1, p_cs, p_ce,
    p_dk, p_dv, p_dg, p_dbeta, p_dw,
    s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_bb, s_bt, s_bh, s_wb, s_wt, s_wh, s_dg_part,
    T, HV_PER_QK,
    H_V: tl.constexpr, K: tl.constexpr, V: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_W: tl.constexpr, LOAD_T: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DG_PARTS: tl.constexpr = 1,
):
    """One chunk, one value head: back through the UT transform ``W = T Y``, ``Ũ = T X``:

        dT = dU Xᵀ + dW Yᵀ     dA = strictly-lower(−Tᵀ dT Tᵀ)     dX = Tᵀ dU     dY = Tᵀ dW
        dv = w ⊙ dX    dw_s = dX_s·v_s    Z = dA ⊙ β ⊙ 2^{G_s − G_r}    dk = dk_direct + Z K + Zᵀ K + βγ ⊙ dY
        dβ_s = Σ_r dA_sr (k_s·k_r) 2^{G_s−G_r} + γ_s (dY_s·k_s)  [+ dw_s when w = β]
        dG += rowsum(dA ⊙ A) − colsum(dA ⊙ A) + βγ (dY·k);   dg = reverse-cumsum(dG) within the chunk.

    LOAD_T: T = (I + A)⁻¹ as the forward stored it (``T [B, T, H_v, C]``, row t of its chunk's T, input
    dtype); otherwise recomputed from A (``_ut_inverse_blocked``) and rounded to the operand dtype as the
    forward rounds it. Grid ``(n_chunks, H_v, B)``, chunks addressed as in ``_dqkwg_kernel``. k ``[B, T,
    H_qk, K]``, v ``[B, T, H_v, V]``, beta/w ``[B, T, H_v]`` (strides given); G, du, dW, dk1 (fp32 or 16-bit), dG1
    (fp32: DG_PARTS parts, ``s_dg_part`` apart, summed here) the earlier kernels' ``[B, T, H_v, ·]``;
    outputs contiguous ``[B, T, H_v, ·]`` in their pointers' dtypes (dk may alias dk1: each tile is read
    before it is written, by the same program).
    """
    _, i_b, i_h, i_hq, t0, n, row0 = _chunk_program(p_cs, p_ce, T, HV_PER_QK, H_V, CHUNK, IS_VARLEN)
    if n <= 0:  # a varlen slot past the last chunk
        return
    p_k += i_b * s_kb + t0 * s_kt + i_hq * s_kh
    p_v += i_b * s_vb + t0 * s_vt + i_h * s_vh
    p_beta += i_b * s_bb + t0 * s_bt + i_h * s_bh
    p_w += i_b * s_wb + t0 * s_wt + i_h * s_wh
    p_G += row0
    p_T += row0 * CHUNK
    p_du += row0 * V
    p_dv += row0 * V
    p_dW += row0 * K
    p_dk1 += row0 * K
    p_dk += row0 * K
    p_dG1 += row0
    p_dg += row0
    p_dbeta += row0
    p_dw += row0

    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < K
    o_c = tl.arange(0, CHUNK)
    m_t = o_c < n
    m_tk = m_t[:, None] & m_k[None, :]
    m_lower = o_c[:, None] > o_c[None, :]
    b_k = tl.load(p_k + o_c[:, None] * s_kt + o_k[None, :], mask=m_tk, other=0.0)
    DT = b_k.dtype
    b_beta = tl.load(p_beta + o_c * s_bt, mask=m_t, other=0.0).to(tl.float32)
    b_wt = tl.load(p_w + o_c * s_wt, mask=m_t, other=0.0).to(tl.float32) if HAS_W else b_beta
    b_G, _ = _chunk_gates(p_G, o_c, m_t, tl.minimum(n, CHUNK), H_V)
    b_gam = tl.exp2(b_G)

    # T = (I + A)⁻¹ (operand dtype)
    if LOAD_T:
        b_T = tl.load(p_T + o_c[:, None] * (H_V * CHUNK) + o_c[None, :], mask=m_t[:, None], other=0.0)
    else:
        b_A = tl.dot(b_k, tl.trans(b_k), input_precision=DOT_PRECISION) * _decay_lower(b_G, m_lower)
        b_T = _ut_inverse_blocked(b_A * b_beta[:, None], CHUNK).to(DT)
    b_Tt = tl.trans(b_T)

    # V side: dT = dU Xᵀ = (dU Vᵀ) diag(w), dX = Tᵀ dU → dv, dw (w applied to the [C, C] result, not
    # to v: no rewritten operand tile)
    b_dT = tl.zeros([CHUNK, CHUNK], dtype=tl.float32)
    b_xv = tl.zeros([CHUNK], dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        o_v = v0 + tl.arange(0, BLOCK_V)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        b_du = tl.load(p_du + o_c[:, None] * (H_V * V) + o_v[None, :], mask=m_tv, other=0.0)
        b_v = tl.load(p_v + o_c[:, None] * s_vt + o_v[None, :], mask=m_tv, other=0.0)
        b_dT = tl.dot(b_du, tl.trans(b_v), b_dT, input_precision=DOT_PRECISION)
        b_dX = tl.dot(b_Tt, b_du, input_precision=DOT_PRECISION)
        tl.store(p_dv + o_c[:, None] * (H_V * V) + o_v[None, :], (b_dX * b_wt[:, None]).to(p_dv.dtype.element_ty),
                 mask=m_tv)
        b_xv += tl.sum(b_dX * b_v.to(tl.float32), 1)

    # K side: dT += dW Yᵀ = (dW Kᵀ) diag(βγ), dY = Tᵀ dW
    b_dW = tl.load(p_dW + o_c[:, None] * (H_V * K) + o_k[None, :], mask=m_tk, other=0.0)
    b_bg = b_beta * b_gam
    b_dT = b_dT * b_wt[None, :] + tl.dot(b_dW, tl.trans(b_k), input_precision=DOT_PRECISION) * b_bg[None, :]
    b_dA = tl.dot(tl.dot(b_Tt, b_dT.to(DT), input_precision=DOT_PRECISION).to(DT), b_Tt,
                  input_precision=DOT_PRECISION)
    b_dA = tl.where(m_lower, -b_dA, 0.0)
    # A_sr = β_s (k_s·k_r) 2^{G_s−G_r}: d(k_s·k_r) = dA_sr β_s 2^{G_s−G_r} =: Z_sr → dK += Z K + Zᵀ K
    # (the phases are ordered so that at most one [C, K] fp32 tile is live besides dk)
    b_Z = (b_dA * _decay_lower(b_G, m_lower) * b_beta[:, None]).to(DT)
    b_dk = tl.load(p_dk1 + o_c[:, None] * (H_V * K) + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    b_dk = tl.dot(b_Z, b_k, b_dk, input_precision=DOT_PRECISION)
    b_dk = tl.dot(tl.trans(b_Z), b_k, b_dk, input_precision=DOT_PRECISION)
    b_dY = tl.dot(b_Tt, b_dW, input_precision=DOT_PRECISION)
    b_dYk = tl.sum(b_dY * b_k.to(tl.float32), 1)    # dY_s · k_s
    b_dk += b_dY * b_bg[:, None]
    tl.store(p_dk + o_c[:, None] * (H_V * K) + o_k[None, :], b_dk.to(p_dk.dtype.element_ty), mask=m_tk)

    # ∂A_sr/∂β_s = (k_s·k_r) 2^{G_s−G_r}, recomputed here (one small dot) rather than kept live
    b_Anb = tl.dot(b_k, tl.trans(b_k), input_precision=DOT_PRECISION) * _decay_lower(b_G, m_lower)
    b_dbeta = tl.sum(b_dA * b_Anb, 1) + b_gam * b_dYk
    if HAS_W:
        tl.store(p_dw + o_c * H_V, b_xv.to(p_dw.dtype.element_ty), mask=m_t)
    else:
        b_dbeta += b_xv
    tl.store(p_dbeta + o_c * H_V, b_dbeta.to(p_dbeta.dtype.element_ty), mask=m_t)
    b_F = b_dA * b_Anb * b_beta[:, None]             # dA ⊙ A
    b_dG = tl.load(p_dG1 + o_c * H_V, mask=m_t, other=0.0)
    for j in tl.static_range(1, DG_PARTS):
        b_dG += tl.load(p_dG1 + j * s_dg_part + o_c * H_V, mask=m_t, other=0.0)
    b_dG += tl.sum(b_F, 1) - tl.sum(b_F, 0) + b_bg * b_dYk
    b_dG = tl.where(m_t, b_dG, 0.0)
    # g_t enters G_s for every s ≥ t of the chunk: dg = reverse cumsum of dG (the state decay across
    # chunks reaches dg through dS, already inside dG's γ_C share)
    b_dg = tl.sum(b_dG, 0) - tl.cumsum(b_dG, 0) + b_dG
    tl.store(p_dg + o_c * H_V, b_dg.to(p_dg.dtype.element_ty), mask=m_t)


# ------------------------------------------------------------------------------------------- launcher


class _Plan(NamedTuple):
    BLOCK_K: int
    BLOCK_V_SCAN: int   # V rows per scan program
    BLOCK_V_CHUNK: int  # V block looped over inside the chunk kernels
    warps_scan: int
    stages_scan: int
    warps_dqkwg: int
    stages_dqkwg: int
    warps_wy: int
    stages_wy: int
    DOT_PRECISION: str
    K_SPLIT: int = 1            # dq/dk/dW/dG kernel: programs per chunk, each over K / K_SPLIT columns
    BLOCK_V_DQ: int = 0         # its V block (0: BLOCK_V_CHUNK)
    states_16bit: bool = False  # chunk-start states and dS_C stored in the input dtype (no hi + lo split)
    split_state: bool = True    # the scan's fp32 dS (in registers) as a 16-bit operand split hi + lo
    w_from_t: bool = False      # recompute without W (U formed from T in the scan), Wᵀ dU from T
    dk_16bit: bool = False      # the dq/dk kernel's part of dk stored in the input dtype, not fp32


@cached_plan
def _plan(K: int, V: int, scan_rows: int = 64) -> _Plan:
    """Tiles, warps, stages (16-bit inputs; the chunk is the forward's: 64 on the GPU). From the backward
    sweep on the H100 (``benchmarks/sweeps/gated_delta_backward.py``, ``results/h100-80gb-hbm3/sweeps/
    gated_delta_backward*.json``; B8 T4096 H16 K = V = 128 bf16, per-kernel times, every variant checked
    against the float64 recurrence) and AOT compiles for sm_90:

    - chunk-start states and dS_C in the input dtype (``states_16bit``, as fla keeps h and dh): half the
      bytes of the recompute's stores, the scan's stores and the dq/dk kernel's loads, and one dot per
      product instead of a hi + lo pair — the whole backward 4.75 → 3.50 ms, gradients' worst relative L2
      against float64 3.7e-3 → 3.8e-3 (bar 2e-2).
    - no W (``w_from_t``): the recompute forms U from T in its scan (no W/Ũ kernel: −209 µs) and the dS scan
      takes ``Wᵀ dU = Kᵀ(βγ ⊙ Tᵀ dU)`` (+37 µs there).
    - scan: 64-row V blocks at 4 warps (256 programs fit one wave at 2 per SM): 494 µs against 883 µs at 8
      warps; 2 stages 455 µs against 506 at 1 (same run), although its build spills ~100 B/thread (the 1-stage one
      none at the bench shape, 176–192 B when d initial_state is stored); 32-row blocks 561–569 µs.
    - dq/dk kernel: 64 K columns per program (``K_SPLIT`` = K / 64 programs a chunk; 4 warps) — 770 µs
      against 1091 µs for whole K at 8 warps; 64-row V blocks, 1 stage (855 µs at 32 rows, 2 stages).
    - WY kernel: 4 warps, 64-row V blocks, 1 stage: 463 µs against 1003 µs at 8 warps (2 stages 484).
    - dk's part from the dq/dk kernel stored 16-bit (``dk_16bit``): −100 µs (its final value is rounded
      to the input dtype anyway; worst gradient error 3.7e-3 → 4.0e-3).
    Together 2.18 ms (2.03 ms with the forward's T passed in, the public path) against 4.77 ms for the
    previous plan (fp32 states, 8 warps, W) in the same run.
    - ``scan_rows``: the dS scan's V rows, 32 for a batch that leaves SMs idle (``prefill_chunked.scan_block_v``,
      as the recompute's scan takes them).
    - Measured and dropped: the dq/dk and WY kernels as ONE program per chunk (commit ecd6517,
      ``_chunk_bwd_kernel``: no dW, dk part or dG parts through DRAM, 19.5 → 13.2 bytes-of-v per chunk). It
      is latency-bound: 1.81 ms at 4 warps (it spills ~300 B) and 1.98 ms at 8 (no spill) against 1.23 ms
      for the two kernels; its 4-warp 32-row V blocks were miscompiled (wrong dq…dβ, then an illegal
      address). ``sweeps/gated_delta_backward-merged*.json``.
    The interpreter takes one warp, and the GPU plan's structure (16-bit states, K split in two, no W)."""
    block_k = next_pow2(max(K, 16))
    block_v = min(next_pow2(max(V, 16)), 32)
    if interpreter_active():
        return _Plan(block_k, block_v, block_v, 1, 1, 1, 1, 1, 1, "ieee", K_SPLIT=2 if block_k >= 32 else 1,
                     states_16bit=True, split_state=False, w_from_t=True, dk_16bit=True)
    bv = min(next_pow2(max(V, 16)), 64)
    # 64 K columns per dq/dk program, never fewer: at 4 warps, 16- and 32-column programs (K = 32, 64 split
    # in two) return wrong dk and dG on the H100 (triton 3.6; right at 8 warps, unsplit, and in the
    # interpreter: a miscompile; sweeps/gdn_bwd_diag.txt)
    return _Plan(block_k, min(bv, scan_rows), bv, 4, 2, 4, 1, 4, 1, "ieee", K_SPLIT=max(1, block_k // 64),
                 BLOCK_V_DQ=bv, states_16bit=True, split_state=False, w_from_t=True, dk_16bit=True)


def states_dtype(dtype: torch.dtype, K: int, V: int) -> torch.dtype:
    """The dtype this backward keeps the chunk-start states in, for 16-bit inputs of ``dtype`` and head sizes
    K, V: what a forward that stores them for it (``chunked_prefill_fwd(store_states=True)``) must write."""
    return dtype if _plan(int(K), int(V)).states_16bit else torch.float32  # int(): symbolic sizes do not hash


def gated_delta_prefill_bwd_chunked(do: torch.Tensor, dht: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                                    v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                                    write_strength: torch.Tensor | None, initial_state: torch.Tensor | None,
                                    cu_seqlens: torch.Tensor | None, scale: float, chunk_size: int,
                                    need_dh0: bool, reuse_T: bool = True,
                                    inverses: tuple[torch.Tensor, torch.Tensor] | None = None,
                                    states: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The chunk-parallel backward (16-bit q/k/v; inputs as the forward's, validated by the caller; ``do``
    the gradient of o, ``dht`` that of the final state or None). Returns ``[dq, dk, dv, dg, dbeta]`` +
    ``[dw]`` when ``write_strength`` is given + ``[dh0]`` (fp32) when ``need_dh0`` — the contract of
    ``prefill_bwd.gated_delta_prefill_bwd``. ``reuse_T``: take ``T = (I + A)⁻¹`` from the forward's
    intermediates when it provides them (else, or with False, the WY kernel recomputes T from A).
    ``inverses``: the forward's ``(T, G)`` (``saved["T"]``, ``saved["G"]`` of ``chunked_prefill_fwd`` on the
    same inputs), which spares the recompute its chunk-inverse kernel. ``states``: with ``inverses``, the
    forward's chunk-start states and U (``saved["h"]``, ``saved["v_new"]`` of a fused ``chunked_prefill_fwd``
    with ``store_states`` and ``states_dtype`` = :func:`states_dtype`), which spare the recompute altogether:
    the backward is then its reverse scan and two chunk-parallel kernels."""
    B, T, H_qk, K = q.shape
    H_v, V = v.shape[2], v.shape[3]
    ratio = H_v // H_qk
    dev, dt = v.device, v.dtype
    n_seq = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    plan = _plan(K, V, scan_block_v(n_seq * H_v * cdiv(V, 64), V, dev))
    is_16bit = q.dtype != torch.float32  # fp32 tiles as 16-bit dot operands are split hi + lo (where planned)
    states_dt = dt if plan.states_16bit else torch.float32
    # the varlen chunk tables once (the recompute takes them too): cu as the kernels read it, clamped
    tables = _varlen_chunks(cu_seqlens, kernel_chunk(chunk_size), T) if cu_seqlens is not None else None
    if states is not None:
        # 0. the forward kept its intermediates: T, G, the chunk-start states and U
        if inverses is None or not plan.w_from_t:
            raise ValueError("states: the chunk-start states need the forward's inverses too, and a plan that "
                             "forms U from T")
        chunk, (hs, vn), W = kernel_chunk(chunk_size), states, None
        Tm, G = check_inverses(inverses, B, T, H_v, chunk, dt)
        n_h = chunk_slots(B, T, chunk, cu_seqlens)
        if (hs.shape != (n_h, H_v, V, K) or hs.dtype != states_dt or vn.shape != v.shape or vn.dtype != dt
                or not (hs.is_contiguous() and vn.is_contiguous())):
            raise ValueError(f"states: expected contiguous chunk-start states {(n_h, H_v, V, K)} {states_dt} and "
                             f"U {tuple(v.shape)} {dt}, got {tuple(hs.shape)} {hs.dtype} and {tuple(vn.shape)} "
                             f"{vn.dtype}")
    else:
        # 0. the forward's intermediates: G, T, chunk-start states, U (and W, unless the scan forms U from T)
        _, _, saved = chunked_prefill_fwd(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                                          output_final_state=False, cu_seqlens=cu_seqlens, chunk_size=chunk_size,
                                          write_strength=write_strength, fuse_output=False, need_output=False,
                                          wy_in_scan=plan.w_from_t, states_dtype=states_dt, inverses=inverses,
                                          chunk_tables=tables)
        chunk, G, W, Tm, hs, vn = saved["chunk"], saved["G"], saved["W"], saved["T"], saved["h"], saved["v_new"]
    if cu_seqlens is None:
        nt = cdiv(T, chunk)
        n_slots, slots_per_row = B * nt, nt
        cs = ce = cu = coff = G  # unused pointers (constexpr-disabled)
    else:
        nt = 0
        cu, coff, cs, ce, n_slots = tables
        slots_per_row = n_slots
    if do.stride(-1) != 1:
        do = do.contiguous()
    is_varlen = cu_seqlens is not None

    # 1. the reverse scan: dS_C per chunk, dU, d initial_state
    dh = empty((max(n_slots, 1), H_v, V, K), dtype=states_dt, device=dev)
    du = empty((B, T, H_v, V), dtype=dt, device=dev)
    dh0 = empty((n_seq, H_v, V, K) if need_dh0 else (0,), dtype=torch.float32, device=dev)
    if dht is not None:
        dht = dht.contiguous()
    # the gradients (the scan zeroes their rows outside every sequence; the chunk kernels write the rest)
    dq = empty((B, T, H_v, K), dtype=q.dtype if ratio == 1 else torch.float32, device=dev)
    dk = empty((B, T, H_v, K), dtype=dt if plan.dk_16bit else torch.float32, device=dev)
    # dk: fp32 per value head when grouped heads are summed after; the WY kernel may write over its input
    dk_dt = torch.float32 if ratio > 1 else k.dtype
    dk_out = dk if dk.dtype == dk_dt else empty((B, T, H_v, K), dtype=dk_dt, device=dev)
    dv = empty((B, T, H_v, V), dtype=dt, device=dev)
    dg = empty((B, T, H_v), dtype=g.dtype, device=dev)
    dbeta = empty((B, T, H_v), dtype=beta.dtype, device=dev)
    dw = empty((B, T, H_v), dtype=write_strength.dtype, device=dev) if write_strength is not None else dg
    launch(_dh_scan_kernel, (cdiv(V, plan.BLOCK_V_SCAN), H_v, n_seq),
           q, k, G, W if W is not None else G, Tm, beta, do, dht if dht is not None else dh0, cu, coff, dh, du, dh0,
           dq, dk_out, dv, dg, dbeta, dw,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           beta.stride(0), beta.stride(1), beta.stride(2), do.stride(0), do.stride(1), do.stride(2),
           T, nt, scale, ratio,
           num_warps=plan.warps_scan, num_stages=plan.stages_scan, H_V=H_v, K=K, V=V, CHUNK=chunk,
           BLOCK_K=plan.BLOCK_K, BLOCK_V=plan.BLOCK_V_SCAN, IS_VARLEN=is_varlen, HAS_DHT=dht is not None,
           STORE_DH0=need_dh0, SPLIT_STATE=is_16bit and plan.split_state, W_FROM_T=W is None,
           DOT_PRECISION=plan.DOT_PRECISION, ZERO_GAPS=is_varlen, HAS_W=write_strength is not None)

    # 2. dq, the direct part of dk, dW, the P/γ/K̂/γ_C shares of dG (in K_SPLIT parts)
    grid = (slots_per_row, H_v, B)
    n_split = plan.K_SPLIT
    dW = empty((B, T, H_v, K), dtype=dt, device=dev)
    dG = empty((n_split, B, T, H_v), dtype=torch.float32, device=dev)
    launch(_dqkwg_kernel, (slots_per_row * n_split, H_v, B),
           q, k, G, vn, do, du, hs, dh, cs, ce, dq, dk, dW, dG,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           do.stride(0), do.stride(1), do.stride(2), B * T * H_v,
           T, nt, scale, ratio,
           num_warps=plan.warps_dqkwg, num_stages=plan.stages_dqkwg, H_V=H_v, K=K, V=V, CHUNK=chunk,
           BLOCK_K=plan.BLOCK_K // n_split, BLOCK_V=plan.BLOCK_V_DQ or plan.BLOCK_V_CHUNK, IS_VARLEN=is_varlen,
           SPLIT_STATE=is_16bit and not plan.states_16bit, DOT_PRECISION=plan.DOT_PRECISION, K_SPLIT=n_split)

    # 3. the WY backward: dv, dw, dβ, the rest of dk, dg
    w = write_strength if write_strength is not None else beta
    launch(_wy_bwd_kernel, grid,
           k, v, beta, w, G, Tm, du, dW, dk, dG, cs, ce, dk_out, dv, dg, dbeta, dw,
           k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
           beta.stride(0), beta.stride(1), beta.stride(2), w.stride(0), w.stride(1), w.stride(2), B * T * H_v,
           T, ratio,
           num_warps=plan.warps_wy, num_stages=plan.stages_wy, H_V=H_v, K=K, V=V, CHUNK=chunk, BLOCK_K=plan.BLOCK_K,
           BLOCK_V=plan.BLOCK_V_CHUNK, IS_VARLEN=is_varlen, HAS_W=write_strength is not None,
           LOAD_T=reuse_T, DOT_PRECISION=plan.DOT_PRECISION, DG_PARTS=n_split)

    if ratio > 1:  # the deterministic sum over the value heads that share a q/k head
        dq = sum_head_groups(dq, ratio, q.dtype)
        dk_out = sum_head_groups(dk_out, ratio, k.dtype)
    out = [dq, dk_out, dv, dg, dbeta]
    if write_strength is not None:
        out.append(dw)
    if need_dh0:
        out.append(dh0)
    return out
