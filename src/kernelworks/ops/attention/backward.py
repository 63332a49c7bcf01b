"""Flash attention backward: ``dq, dk, dv`` from ``do`` (and an optional ``dlse``), recomputing the
probabilities from the saved log-sum-exp; deterministic by construction (no atomics).

With ``P = exp(s − lse)`` (row-normalised), ``dP = dO Vᵀ``, ``Δ = rowsum(dO ∘ O) − dlse``:
``dS = P ∘ (dP − Δ)`` (the gradient of the logits; ``dlse`` enters only through Δ since
``∂lse/∂s = P``), ``dV = Pᵀ dO``, ``dK = scale · dS'ᵀ Q``, ``dQ = scale · dS' K`` with ``dS' = dS`` or, with
a softcap, ``dS ∘ (1 − tanh²)``.

Three kernels:

1. ``_attn_bwd_delta_kernel``: Δ, fp32 ``[B, Hq, Sq]`` like lse (one read of O and dO);
2. ``_attn_bwd_dkdv_kernel``: one program per (batch, query head, KV block) loops over the query blocks
   of the band, dK and dV summed in registers and written once; with grouped heads each query head writes
   its fp32 share and a fixed-order sum over the group gives dK, dV (deterministic: no atomics);
3. ``_attn_bwd_dq_kernel``: one program per (batch, query head, query block) loops over the key blocks.

The cost of determinism: QKᵀ and dO Vᵀ are computed twice (once per pass): 4 matmuls of ``Sq·Sk·D`` in
the dK/dV pass (Qᵀ-side scores, dV, dPᵀ, dK) + 3 in the dQ pass (scores, dP, dQ), against 5 for a single
pass accumulating dQ with atomics (flash-attn 2's default). So 7/5 of the matmul work of the atomic
variant, and no fp32 dQ scratch; grouped heads add fp32 dK/dV shares (``2 · Hq · Sk · D`` floats a batch
row) summed over the group in a fixed order.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, fields

import torch
import triton
import triton.language as tl

from kernelworks.hardware import smem_per_block
from kernelworks.ops._math import LOG2E
from kernelworks.ops.attention.forward import (
    ZERO_BLOCK_B,
    band,
    band_mask,
    dot_precision,
    scores,
    seq_bounds,
    tile_mask,
    tile_mask_t,
    zero_uncovered,
)
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import gpu_capability, interpreter_active, interpreter_dot_operand
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.plans import ForcedPlan


@triton.jit
def _load_lse2(p_l, o_m, m_m):
    """Saved lse → base 2, with ``+inf`` for rows out of range and rows that saw no key (lse = -inf), so
    their ``P = exp2(s − lse₂)`` is exactly 0."""
    b_lse = tl.load(p_l + o_m, mask=m_m, other=float("inf"))
    return tl.where(b_lse == float("-inf"), float("inf"), b_lse * LOG2E)


@triton.jit
def _delta_block(p_oh, p_doh, p_dlh, p_dh, stride_os, stride_dos, m0, len_q, head_dim, HAS_DLSE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """Δ of query rows ``[m0, m0 + BLOCK_M)`` of one (sequence, head); pointers at its first row."""
    o_m = m0 + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < len_q
    m_t = tile_mask(m_m, o_d < head_dim, EVEN_D)
    o_m64 = o_m[:, None].to(tl.int64)
    b_o = tl.load(p_oh + o_m64 * stride_os + o_d[None, :], mask=m_t, other=0.0)
    b_do = tl.load(p_doh + o_m64 * stride_dos + o_d[None, :], mask=m_t, other=0.0)
    b_delta = tl.sum(b_o.to(tl.float32) * b_do.to(tl.float32), axis=1)
    if HAS_DLSE:
        b_delta -= tl.load(p_dlh + o_m, mask=m_m, other=0.0)
    tl.store(p_dh + o_m, b_delta, mask=m_m)


@triton.jit
def _attn_bwd_delta_kernel(p_o, p_do, p_dlse, p_delta, p_cuq, stride_ob, stride_os, stride_oh,
                           stride_dob, stride_dos, stride_doh, stride_lb, stride_lh, stride_cuq, total_q, seqlen_q,
                           n_heads, head_dim, IS_VARLEN: tl.constexpr, HAS_DLSE: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """``Δ[b, h, i] = Σ_d dO[b, i, h, d] · O[b, i, h, d] − dlse[b, h, i]`` in fp32; o, do ``[B, Sq, Hq, D]``
    (varlen ``[Tq, Hq, D]``), dlse, Δ laid out like lse. Grid ``(cdiv(max_seqlen_q, BLOCK_M), B · Hq)``
    (varlen: programs loop over the blocks past the grid, as in the forward)."""
    i_p = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // n_heads
    i_h = i_bh % n_heads
    len_q, o_off, row0 = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_ob, stride_os, IS_VARLEN)
    _, do_off, _ = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_dob, stride_dos, IS_VARLEN)
    p_oh = p_o + o_off + i_h.to(tl.int64) * stride_oh
    p_doh = p_do + do_off + i_h.to(tl.int64) * stride_doh
    o_l = i_b.to(tl.int64) * stride_lb + i_h.to(tl.int64) * stride_lh + row0
    if i_p * BLOCK_M >= len_q:  # varlen: a sequence shorter than the grid
        return
    if IS_VARLEN:
        for i_m in range(i_p, tl.cdiv(len_q, BLOCK_M), tl.num_programs(0)):
            _delta_block(p_oh, p_doh, p_dlse + o_l, p_delta + o_l, stride_os, stride_dos, i_m * BLOCK_M, len_q,
                         head_dim, HAS_DLSE, BLOCK_M, BLOCK_D, EVEN_D)
    else:
        _delta_block(p_oh, p_doh, p_dlse + o_l, p_delta + o_l, stride_os, stride_dos, i_p * BLOCK_M, len_q,
                     head_dim, HAS_DLSE, BLOCK_M, BLOCK_D, EVEN_D)


@triton.jit
def _dkdv_inner(b_dk, b_dv, b_k, b_v, p_q, p_do, p_l, p_delta, stride_qs, stride_dos, o_n, o_d, m_d,
                lo, hi, len_q, off, left, right, qk_scale, softcap_log2,
                MASK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                EVEN_D: tl.constexpr, BLOCK_M: tl.constexpr, DOT_PREC: tl.constexpr):
    """Accumulate one query head's contribution over query blocks ``[lo, hi)`` into ``dK`` (unscaled) and
    ``dV``, both ``[BLOCK_N, BLOCK_D]`` fp32. Works on transposed scores ``sᵀ [BLOCK_N, BLOCK_M]`` so
    every product has the KV block (a multiple of 64 rows on Hopper) as its M dimension. Query rows past
    ``len_q`` load as 0 with lse₂ = +inf (P = 0): only the band needs a mask (MASK)."""
    o_mb = tl.arange(0, BLOCK_M)
    for m in range(lo, hi, BLOCK_M):
        o_m = m + o_mb
        m_m = o_m < len_q
        m_t = tile_mask(m_m, m_d, EVEN_D)
        o_m64 = o_m[:, None].to(tl.int64)
        b_q = tl.load(p_q + o_m64 * stride_qs + o_d[None, :], mask=m_t, other=0.0)
        b_do = tl.load(p_do + o_m64 * stride_dos + o_d[None, :], mask=m_t, other=0.0)
        b_lse2 = _load_lse2(p_l, o_m, m_m)
        b_delta = tl.load(p_delta + o_m, mask=m_m, other=0.0)
        b_st, b_t = scores(tl.dot(b_k, tl.trans(b_q), input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        b_pt = tl.exp2(b_st - b_lse2[None, :])
        if MASK:
            # visibility of key n to query m, transposed: the band rule of forward.band_mask with the
            # roles swapped (query i at key position i + off sees keys [i + off − left, i + off + right])
            m_s = band_mask(o_n, o_m, -off, len_q, right, left, HAS_RIGHT, HAS_LEFT, False)
            b_pt = tl.where(m_s, b_pt, 0.0)
        b_dv += tl.dot(b_pt.to(b_do.dtype), b_do, input_precision=DOT_PREC)
        b_dpt = tl.dot(b_v, tl.trans(b_do), input_precision=DOT_PREC)
        b_dst = b_pt * (b_dpt - b_delta[None, :])
        if SOFTCAP:
            b_dst = b_dst * (1.0 - b_t * b_t)
        b_dk += tl.dot(b_dst.to(b_q.dtype), b_q, input_precision=DOT_PREC)
    return b_dk, b_dv


@triton.jit
def _dkdv_block(p_q, p_k, p_v, p_do, p_lse, p_delta, p_dk, p_dv, q_off, k_off, v_off, do_off, dk_off, o_l, i_h, i_hk,
                stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_dos, stride_doh,
                stride_dks, stride_dkh, n0, len_q, len_k, head_dim, sm_scale, qk_scale, softcap_log2, left, right,
                HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """dK/dV shares of keys ``[n0, n0 + BLOCK_N)`` of one (sequence, query head ``i_h``): ``*_off`` locate
    the sequence's first row in each tensor, ``o_l`` in lse and Δ. The head pointers are formed here, in
    this order, on purpose: formed by the caller and held across the loops, they doubled the sm_90 spill
    of this 255-register kernel."""
    off = len_k - len_q
    o_n = n0 + tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    m_t = tile_mask(o_n < len_k, m_d, EVEN_D)
    o_n64 = o_n[:, None].to(tl.int64)
    b_k = tl.load(p_k + k_off + i_hk.to(tl.int64) * stride_kh + o_n64 * stride_ks + o_d[None, :], mask=m_t,
                  other=0.0)
    b_v = tl.load(p_v + v_off + i_hk.to(tl.int64) * stride_vh + o_n64 * stride_vs + o_d[None, :], mask=m_t,
                  other=0.0)
    b_dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    b_dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    # query i sees key j iff i + off − left ≤ j ≤ i + off + right, i.e. j − off − right ≤ i ≤ j − off + left
    lo, a, b, hi = band(n0, BLOCK_N, BLOCK_M, -off, len_q, right, left, HAS_RIGHT, HAS_LEFT, False)
    p_qh = p_q + q_off + i_h.to(tl.int64) * stride_qh
    p_doh = p_do + do_off + i_h.to(tl.int64) * stride_doh
    p_lh = p_lse + o_l
    p_dh = p_delta + o_l
    b_dk, b_dv = _dkdv_inner(b_dk, b_dv, b_k, b_v, p_qh, p_doh, p_lh, p_dh, stride_qs, stride_dos, o_n, o_d,
                             m_d, lo, a, len_q, off, left, right, qk_scale, softcap_log2,
                             True, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_M, DOT_PREC)
    b_dk, b_dv = _dkdv_inner(b_dk, b_dv, b_k, b_v, p_qh, p_doh, p_lh, p_dh, stride_qs, stride_dos, o_n, o_d,
                             m_d, a, b, len_q, off, left, right, qk_scale, softcap_log2,
                             False, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_M, DOT_PREC)
    b_dk, b_dv = _dkdv_inner(b_dk, b_dv, b_k, b_v, p_qh, p_doh, p_lh, p_dh, stride_qs, stride_dos, o_n, o_d,
                             m_d, b, hi, len_q, off, left, right, qk_scale, softcap_log2,
                             True, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_M, DOT_PREC)
    o_out = dk_off + i_h.to(tl.int64) * stride_dkh + o_n64 * stride_dks + o_d[None, :]
    tl.store(p_dk + o_out, (b_dk * sm_scale).to(p_dk.dtype.element_ty), mask=m_t)
    tl.store(p_dv + o_out, b_dv.to(p_dv.dtype.element_ty), mask=m_t)


@triton.jit
def _attn_bwd_dkdv_kernel(p_q, p_k, p_v, p_do, p_lse, p_delta, p_dk, p_dv, p_cuq, p_cuk,
                          stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                          stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                          stride_dkb, stride_dks, stride_dkh, stride_lb, stride_lh,
                          stride_cuq, stride_cuk, total_q, total_k,
                          seqlen_q, seqlen_k, n_heads, group, head_dim, sm_scale, qk_scale, softcap_log2,
                          left, right, IS_VARLEN: tl.constexpr, HAS_LEFT: tl.constexpr,
                          HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr,
                          DOT_PREC: tl.constexpr):
    """Query head h's share of the KV gradients: ``dV_h[b, j] = Σ_i P[b,h,i,j] dO[b,i,h]``, ``dK_h[b, j] =
    scale · Σ_i dS'[b,h,i,j] Q[b,i,h]`` for KV head ``h // group``. Shapes as the forward's; dk, dv ``[B,
    Sk, Hq, D]`` (the fp32 shares, summed over each group by the launcher; with group 1 they are the
    gradients, in k's dtype), both with dk's strides. Grid ``(cdiv(max_seqlen_k, BLOCK_N), B · Hq)``
    (varlen: programs loop over the blocks past the grid; key rows no sequence covers get zero dk, dv).

    One query head per program rather than a loop over the group inside: that loop around the band loops
    spilled at 64-row query steps on sm_90 and forced 16-row steps, 0.82× SDPA-flash on GQA 4:1."""
    i_p = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // n_heads
    i_h = i_bh % n_heads
    i_hk = i_h // group
    len_k, k_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_kb, stride_ks, IS_VARLEN)
    if IS_VARLEN:
        zero_uncovered(p_cuk, stride_cuk, tl.num_programs(1) // n_heads, total_k, p_dk, p_dv, stride_dks, stride_dkh,
                       n_heads, head_dim, p_lse, stride_lh, True, False, BLOCK_N, BLOCK_D, EVEN_D, ZERO_BLOCK_B)
    # a sequence shorter than the grid (varlen); the dense grid never gets here, yet the dense kernel spills
    # twice as much on sm_90 without this return here (16 B against 8)
    if i_p * BLOCK_N >= len_k:
        return
    len_q, q_off, q_row0 = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_qb, stride_qs, IS_VARLEN)
    _, v_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_vb, stride_vs, IS_VARLEN)
    _, do_off, _ = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_dob, stride_dos, IS_VARLEN)
    _, dk_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_dkb, stride_dks, IS_VARLEN)
    o_l = i_b.to(tl.int64) * stride_lb + i_h.to(tl.int64) * stride_lh + q_row0
    if IS_VARLEN:
        for i_n in range(i_p, tl.cdiv(len_k, BLOCK_N), tl.num_programs(0)):
            _dkdv_block(p_q, p_k, p_v, p_do, p_lse, p_delta, p_dk, p_dv, q_off, k_off, v_off, do_off, dk_off, o_l, i_h,
                        i_hk, stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_dos, stride_doh,
                        stride_dks, stride_dkh, i_n * BLOCK_N, len_q, len_k, head_dim, sm_scale, qk_scale,
                        softcap_log2, left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
                        DOT_PREC)
    else:
        _dkdv_block(p_q, p_k, p_v, p_do, p_lse, p_delta, p_dk, p_dv, q_off, k_off, v_off, do_off, dk_off, o_l, i_h,
                    i_hk, stride_qs, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_dos, stride_doh,
                    stride_dks, stride_dkh, i_p * BLOCK_N, len_q, len_k, head_dim, sm_scale, qk_scale, softcap_log2,
                    left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, DOT_PREC)


@triton.jit
def _dq_inner(b_dq, b_q, b_do, b_lse2, b_delta, p_k, p_v, stride_ks, stride_vs, o_i, o_d, m_d, lo, hi, len_k,
              off, left, right, qk_scale, softcap_log2,
              MASK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
              EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr):
    """Accumulate ``dS' K`` (unscaled) over key blocks ``[lo, hi)`` into ``dQ [BLOCK_M, BLOCK_D]`` fp32.
    MASK: the band and the ``len_k`` bound (keys past it would add ``P·Δ`` terms)."""
    o_nb = tl.arange(0, BLOCK_N)
    for n in range(lo, hi, BLOCK_N):
        o_n = n + o_nb
        m_t = tile_mask_t(o_n < len_k, m_d, EVEN_D)
        o_n64 = o_n[None, :].to(tl.int64)
        b_kt = tl.load(p_k + o_n64 * stride_ks + o_d[:, None], mask=m_t, other=0.0)
        b_vt = tl.load(p_v + o_n64 * stride_vs + o_d[:, None], mask=m_t, other=0.0)
        b_s, b_t = scores(tl.dot(b_q, b_kt, input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        b_p = tl.exp2(b_s - b_lse2[:, None])
        if MASK:
            m_s = band_mask(o_i, o_n, off, len_k, left, right, HAS_LEFT, HAS_RIGHT, True)
            b_p = tl.where(m_s, b_p, 0.0)
        b_dp = tl.dot(b_do, b_vt, input_precision=DOT_PREC)
        b_ds = b_p * (b_dp - b_delta[:, None])
        if SOFTCAP:
            b_ds = b_ds * (1.0 - b_t * b_t)
        b_dq += tl.dot(b_ds.to(b_kt.dtype), tl.trans(b_kt), input_precision=DOT_PREC)
    return b_dq


@triton.jit
def _dq_block(p_qh, p_kh, p_vh, p_doh, p_lh, p_dh, p_dqh, stride_qs, stride_ks, stride_vs, stride_dos, stride_dqs,
              m0, len_q, len_k, head_dim, sm_scale, qk_scale, softcap_log2, left, right, HAS_LEFT: tl.constexpr,
              HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """dQ of query rows ``[m0, m0 + BLOCK_M)`` of one (sequence, query head); pointers at the sequence's
    first row."""
    off = len_k - len_q
    o_m = m0 + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < len_q
    m_d = o_d < head_dim
    m_t = tile_mask(m_m, m_d, EVEN_D)
    o_m64 = o_m[:, None].to(tl.int64)
    b_q = tl.load(p_qh + o_m64 * stride_qs + o_d[None, :], mask=m_t, other=0.0)
    b_do = tl.load(p_doh + o_m64 * stride_dos + o_d[None, :], mask=m_t, other=0.0)
    b_lse2 = _load_lse2(p_lh, o_m, m_m)
    b_delta = tl.load(p_dh + o_m, mask=m_m, other=0.0)
    b_dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    lo, a, b, hi = band(m0, BLOCK_M, BLOCK_N, off, len_k, left, right, HAS_LEFT, HAS_RIGHT, True)
    b_dq = _dq_inner(b_dq, b_q, b_do, b_lse2, b_delta, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d, lo, a,
                     len_k, off, left, right, qk_scale, softcap_log2, True, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                     EVEN_D, BLOCK_N, DOT_PREC)
    b_dq = _dq_inner(b_dq, b_q, b_do, b_lse2, b_delta, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d, a, b,
                     len_k, off, left, right, qk_scale, softcap_log2, False, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                     EVEN_D, BLOCK_N, DOT_PREC)
    b_dq = _dq_inner(b_dq, b_q, b_do, b_lse2, b_delta, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d, b, hi,
                     len_k, off, left, right, qk_scale, softcap_log2, True, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                     EVEN_D, BLOCK_N, DOT_PREC)
    tl.store(p_dqh + o_m64 * stride_dqs + o_d[None, :], (b_dq * sm_scale).to(p_dqh.dtype.element_ty), mask=m_t)


@triton.jit
def _attn_bwd_dq_kernel(p_q, p_k, p_v, p_do, p_lse, p_delta, p_dq, p_cuq, p_cuk,
                        stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                        stride_vb, stride_vs, stride_vh, stride_dob, stride_dos, stride_doh,
                        stride_dqb, stride_dqs, stride_dqh, stride_lb, stride_lh,
                        stride_cuq, stride_cuk, total_q, total_k,
                        seqlen_q, seqlen_k, n_heads, group, head_dim, sm_scale, qk_scale, softcap_log2,
                        left, right, IS_VARLEN: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                        SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """``dQ[b, i, h] = scale · Σ_j dS'[b,h,i,j] K[b, j, h // group]``; dq ``[B, Sq, Hq, D]``. Grid
    ``(cdiv(max_seqlen_q, BLOCK_M), B · Hq)``, blocks last-first (the longest causal rows first); varlen:
    programs loop over the blocks past the grid, and query rows no sequence covers get zero dq."""
    i_p = tl.program_id(0)
    n_m = tl.num_programs(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // n_heads
    i_h = i_bh % n_heads
    i_hk = i_h // group
    len_q, q_off, q_row0 = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_qb, stride_qs, IS_VARLEN)
    len_k, k_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_kb, stride_ks, IS_VARLEN)
    _, v_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_vb, stride_vs, IS_VARLEN)
    _, do_off, _ = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_dob, stride_dos, IS_VARLEN)
    _, dq_off, _ = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_dqb, stride_dqs, IS_VARLEN)
    p_qh = p_q + q_off + i_h.to(tl.int64) * stride_qh
    p_kh = p_k + k_off + i_hk.to(tl.int64) * stride_kh
    p_vh = p_v + v_off + i_hk.to(tl.int64) * stride_vh
    p_doh = p_do + do_off + i_h.to(tl.int64) * stride_doh
    p_dqh = p_dq + dq_off + i_h.to(tl.int64) * stride_dqh
    o_l = i_b.to(tl.int64) * stride_lb + i_h.to(tl.int64) * stride_lh + q_row0
    if IS_VARLEN:
        zero_uncovered(p_cuq, stride_cuq, tl.num_programs(1) // n_heads, total_q, p_dq, p_dq, stride_dqs, stride_dqh,
                       n_heads, head_dim, p_lse, stride_lh, False, False, BLOCK_M, BLOCK_D, EVEN_D, ZERO_BLOCK_B)
    if (n_m - 1 - i_p) * BLOCK_M >= len_q:  # varlen: a sequence shorter than the grid
        return
    if IS_VARLEN:
        for i_m in range(n_m - 1 - i_p, tl.cdiv(len_q, BLOCK_M), n_m):
            _dq_block(p_qh, p_kh, p_vh, p_doh, p_lse + o_l, p_delta + o_l, p_dqh, stride_qs, stride_ks, stride_vs,
                      stride_dos, stride_dqs, i_m * BLOCK_M, len_q, len_k, head_dim, sm_scale, qk_scale,
                      softcap_log2, left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
                      DOT_PREC)
    else:
        _dq_block(p_qh, p_kh, p_vh, p_doh, p_lse + o_l, p_delta + o_l, p_dqh, stride_qs, stride_ks, stride_vs,
                  stride_dos, stride_dqs, (n_m - 1 - i_p) * BLOCK_M, len_q, len_k, head_dim, sm_scale, qk_scale,
                  softcap_log2, left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D,
                  DOT_PREC)


# ------------------------------------------------------------------------------------------------ launcher


@dataclass(frozen=True)
class BwdPlan:
    """Tiles of the backward: the dK/dV pass takes ``KV_N`` keys per program and ``KV_M`` query rows per
    step; the dQ pass ``Q_M`` query rows per program and ``Q_N`` keys per step."""

    KV_M: int
    KV_N: int
    Q_M: int
    Q_N: int
    BLOCK_D: int
    kv_warps: int
    q_warps: int
    kv_stages: int
    q_stages: int


@cached_plan
def bwd_plan(head_dim: int, fp32: bool, capability: tuple[int, int] | None) -> BwdPlan:
    """Interpreter: 16-wide tiles. GPU, from the backward plan sweep (H100, B4 H32 S4096, d 64 / 128,
    causal and not, per-kernel times in ``benchmarks/results/h100-80gb-hbm3/sweeps/flash_attention_bwd_plan.json``):

    - dK/dV: 64 keys × 64 query rows a step, 4 warps, 2 stages (255 / 205 registers at d 128 / 64, no
      spill) — 4230 µs against 4706 for 128 keys at 8 warps at d 128, 2784 against 3221 at d 64; causal
      d 128 a tie (2713 / 2688). Grouped heads take the same tiles (one query head per program).
    - dQ: 128 query rows × 64 keys, 8 warps, 3 stages (211 registers at d 128) — 2426 µs against 3084 with
      2 stages at d 128, 765 against 1432 causal at d 64.
    - d > 128 (``sweeps/flash_attention_bwd_plan-d256.json``, B2 H8 S4096 d 256): dK/dV 32 keys × 32 query rows,
      4 warps, 2 stages (255 registers, 0 spill; mma.sync, as M 32 is below wgmma's 64) — 1362 µs causal against
      3067 for the 64 × 16 steps at 8 warps before, 1874 for 64 × 32; dQ 128 × 32 at 8 warps, 2 stages — 606 µs
      causal against 1288 for 64 × 32. On the GQA 8:4 causal case the backward went 4411 → 2074 µs (SDPA flash
      1654; ``gaps/flash_attention-d256-bwd-plan.json``). Every variant with 64-row dK/dV steps asked for 256–320
      KiB of shared memory (the H100 has 227). ``kw tune flash_attention --mode bwd`` on that case (35 configs,
      ``tune/flash_attention-bwd-d256``) then gave the dQ pass 3 stages: 2013 µs against 2096 with 2, the
      runner-up 4% behind (on Hopper: 224 KiB of shared memory); the split of dK/dV over the head dim lost
      (``docs/notes/attention.md``).
    - fp32 inputs (FMA dots): dK/dV 32 keys × 16 rows, dQ 32 × 16, 4 warps, 1 stage (230 / 128 registers,
      0 spill at d 128).
    - GPUs with less shared memory a block (A100 163 KiB, Ada 99 KiB): smaller dQ tiles, chosen from the sm_80 /
      sm_89 compiles alone (no such GPU measured)."""
    block_d = max(16, next_pow2(head_dim))
    if capability is None and interpreter_active():
        return BwdPlan(16, 16, 16, 16, block_d, 1, 1, 1, 1)
    if fp32:
        return BwdPlan(16, 32, 32, 16, block_d, 4, 4, 1, 1)
    # The dQ tile is what fits each GPU's shared memory per block (sm_80 / sm_89 AOT, kw inspect, d 128 / 256:
    # 128 × 64 at 3 stages 116 KiB; past d 128, 128 × 32 at 3 stages 224 KiB, at 2 stages 164 KiB, 64 × 32 at 2
    # stages 100 KiB, 64 × 16 at 2 stages 84 KiB; each without spills). The dK/dV tiles fit everywhere (66–73 KiB).
    smem = smem_per_block(capability) if capability is not None else smem_per_block((9, 0))
    if block_d <= 128:
        return BwdPlan(64, 64, 128 if smem >= 120 * 1024 else 64, 64, block_d, 4, 8, 2, 3)
    if smem >= 225 * 1024:  # Hopper, Blackwell: the third stage (measured on the H100 above)
        return BwdPlan(32, 32, 128, 32, block_d, 4, 8, 2, 3)
    return BwdPlan(32, 32, 64, 32 if smem >= 120 * 1024 else 16, block_d, 4, 8, 2, 2)


# every BwdPlan field but BLOCK_D, which follows the head dim
_FORCED_BWD: ForcedPlan[dict] = ForcedPlan(
    "forced_bwd_plan", knobs=tuple(f.name for f in fields(BwdPlan) if f.name != "BLOCK_D"))


def forced_bwd_plan(**knobs: int) -> AbstractContextManager[None]:
    """Within the block, backward launches take these :class:`BwdPlan` knobs (``KV_M``, ``KV_N``, ``Q_M``,
    ``Q_N``, ``kv_warps``, ``q_warps``, ``kv_stages``, ``q_stages``) over :func:`bwd_plan`'s choice
    (``kw tune flash_attention --mode bwd``, sweeps, tests); another knob raises ``ValueError``."""
    return _FORCED_BWD.forced(dict(knobs))


BWD_CONFIGS: list[dict[str, int]] = [
    {"KV_N": kv_n, "KV_M": kv_m, "kv_warps": kv_w, "kv_stages": kv_st,
     "Q_M": q_m, "Q_N": q_n, "q_warps": q_w, "q_stages": q_st}
    for kv_n in (32, 64, 128) for kv_m in (16, 32, 64) for kv_w in (4, 8) for kv_st in (1, 2)
    for q_m in (64, 128) for q_n in (32, 64) for q_w in (4, 8) for q_st in (1, 2, 3)
]
"""``kw tune flash_attention --mode bwd``'s space: the dK/dV pass's tiles (keys per program × query rows a
step), warps and stages, times the dQ pass's (query rows per program × keys a step) — 864 configs, which the
pattern search walks one knob at a time (the two passes' knobs are independent, so it converges on each pass's
best as the session-14 sweep did by hand). Tiles past the GPU's shared memory or spilling are turned away by
the compile gate."""


def _strides4(t: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    return (0, *t.stride()[:2]) if varlen else t.stride()[:3]


def attention_bwd(do: torch.Tensor, dlse: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, cu_q: torch.Tensor | None,
                  cu_k: torch.Tensor | None, max_q: int, max_k: int, scale: float, left: int, right: int,
                  softcap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` for the forward of :func:`~kernelworks.ops.attention.forward.attention_fwd` (same
    arguments); ``do`` like ``o`` (unit stride on D, any others), ``dlse`` like ``lse`` or None. Gradients
    in q's, k's and v's dtypes."""
    varlen = cu_q is not None
    q_dtype, kv_dtype = q.dtype, k.dtype
    do, q, k, v = (interpreter_dot_operand(t) for t in (do, q, k, v))
    if varlen:
        batch, hq, d, hkv = cu_q.shape[0] - 1, q.shape[1], q.shape[2], k.shape[1]
        sq, sk = max_q, max_k
        ls = (0, lse.stride(0))
        cus = (cu_q.stride(0), cu_k.stride(0), q.shape[0], k.shape[0])
    else:
        batch, sq, hq, d = q.shape
        sk, hkv = k.shape[1], k.shape[2]
        ls = (lse.stride(0), lse.stride(1))
        cus = (1, 1, 1, 1)  # unused; Triton folds 1s into constants: the dense kernels keep their signature
    if dlse is not None:
        dlse = dlse.contiguous()  # laid out like lse (its strides are the kernels' lse strides)
    plan = _FORCED_BWD.apply(bwd_plan(d, q.dtype == torch.float32, gpu_capability()))
    group = hq // hkv
    dq = empty(q.shape, dtype=q_dtype, device=q.device)
    # grouped heads: each query head's fp32 share of dK / dV ([..., Hq, D], 2·group× the bytes of dk),
    # summed over the group below
    kv_shape = (*k.shape[:-2], hq, k.shape[-1])
    dk = empty(kv_shape if group > 1 else k.shape, dtype=torch.float32 if group > 1 else kv_dtype, device=k.device)
    dv = empty(kv_shape if group > 1 else v.shape, dtype=torch.float32 if group > 1 else kv_dtype, device=v.device)
    delta = empty(lse.shape, dtype=torch.float32, device=q.device)
    if softcap > 0:
        qk_scale, softcap_log2 = scale / softcap, softcap * 1.4426950408889634
    else:
        qk_scale, softcap_log2 = scale * 1.4426950408889634, 0.0
    dummy = cu_q if varlen else lse
    cuq, cuk = (cu_q, cu_k) if varlen else (dummy, dummy)
    qs, ks, vs = _strides4(q, varlen), _strides4(k, varlen), _strides4(v, varlen)
    os_, dos, dqs, dks = _strides4(o, varlen), _strides4(do, varlen), _strides4(dq, varlen), _strides4(dk, varlen)
    common = {"IS_VARLEN": varlen, "HAS_LEFT": left >= 0, "HAS_RIGHT": right >= 0, "SOFTCAP": softcap > 0,
              "BLOCK_D": plan.BLOCK_D, "EVEN_D": d == plan.BLOCK_D, "DOT_PREC": dot_precision(q.dtype)}
    if not varlen and (sq == 0 or sk == 0):
        return torch.zeros_like(dq), torch.zeros_like(k, dtype=kv_dtype), torch.zeros_like(v, dtype=kv_dtype)
    # varlen: max_seqlen_* size the grids only; at least one block per sequence, programs loop over the rest
    n_q, n_k = int(varlen), int(varlen)
    delta_m = 64 if plan.Q_M >= 64 else 16
    launch(_attn_bwd_delta_kernel, (max(cdiv(sq, delta_m), n_q), batch * hq), o, do,
           dlse if dlse is not None else delta, delta, cuq, *os_, *dos, *ls, cus[0], cus[2], sq, hq, d,
           num_warps=4 if plan.q_warps > 1 else 1, IS_VARLEN=varlen, HAS_DLSE=dlse is not None,
           BLOCK_M=delta_m, BLOCK_D=plan.BLOCK_D, EVEN_D=d == plan.BLOCK_D)
    launch(_attn_bwd_dkdv_kernel, (max(cdiv(sk, plan.KV_N), n_k), batch * hq), q, k, v, do, lse, delta, dk, dv,
           cuq, cuk, *qs, *ks, *vs, *dos, *dks, *ls, *cus, sq, sk, hq, group, d, scale, qk_scale, softcap_log2,
           left, right, num_warps=plan.kv_warps, num_stages=plan.kv_stages, BLOCK_M=plan.KV_M, BLOCK_N=plan.KV_N,
           **common)
    launch(_attn_bwd_dq_kernel, (max(cdiv(sq, plan.Q_M), n_q), batch * hq), q, k, v, do, lse, delta, dq, cuq, cuk,
           *qs, *ks, *vs, *dos, *dqs, *ls, *cus, sq, sk, hq, group, d, scale, qk_scale, softcap_log2, left, right,
           num_warps=plan.q_warps, num_stages=plan.q_stages, BLOCK_M=plan.Q_M, BLOCK_N=plan.Q_N, **common)
    if group > 1:  # the group's shares in a fixed order (a deterministic reduction, then one rounding)
        dk = dk.unflatten(-2, (hkv, group)).sum(-2).to(kv_dtype)
        dv = dv.unflatten(-2, (hkv, group)).sum(-2).to(kv_dtype)
    return dq, dk, dv
