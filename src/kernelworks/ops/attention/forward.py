"""Flash attention forward: ``o = softmax(s) v`` with ``s = scale · q kᵀ`` (or its soft-capped form),
online over key blocks, never materialising ``s``; the fp32 log-sum-exp of each row is saved for the
backward.

Per program: one block of ``BLOCK_M`` query rows of one (batch, query head). Scores live in the base-2
domain: ``s₂ = s · log2(e)`` costs one multiply per score (``qk_scale = scale · log2 e`` folded), the running
max ``m`` and the exponentials are base 2 (one ``MUFU.EX2`` each), and ``lse = (m + log2 l) · ln 2`` is
stored in natural-log units. The key blocks a query block visits are split into three ranges
(:func:`band`): the blocks left of the band's full part (a sliding window's edge: masked), the blocks every
row sees in full (no mask work at all) and the blocks to the right (the causal diagonal, a window's right
edge, the sequence's last partial block: masked). Blocks outside the band are never visited.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from kernelworks.hardware import smem_per_block
from kernelworks.ops._math import tanh
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import gpu_capability, interpreter_active, interpreter_dot_operand
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.plans import ForcedPlan
from kernelworks.runtime.tma import ensure_tma_allocator, tma_available

LN2 = tl.constexpr(0.6931471805599453)
"""ln 2: ``log(x) == log2(x) · LN2``."""

MAX_HEAD_DIM = 256
"""Largest head dimension the kernels take (padded to a power of two ≥ 16 inside)."""


# ------------------------------------------------------------------------------------------ device helpers
# Shared with backward.py.


@triton.jit
def band(start, ROWS: tl.constexpr, COLS: tl.constexpr, shift, n_cols, lo_w, hi_w,
         HAS_LO: tl.constexpr, HAS_HI: tl.constexpr, ALIGN_END: tl.constexpr):
    """Column ranges ``(lo, a, b, hi)`` a block of rows ``[start, start + ROWS)`` visits, in steps of COLS.

    Row ``r`` sees columns ``c`` with ``r + shift − lo_w ≤ c ≤ r + shift + hi_w`` (a bound absent when its
    HAS_ flag is off) and ``c < n_cols``. ``[lo, a)`` and ``[b, hi)`` need masks; every row sees every
    column of ``[a, b)`` (``b`` aligned down to COLS unless the bound is ``n_cols`` and not ALIGN_END: the
    caller masks the tail by other means). ``lo``, ``a``, ``b`` are multiples of COLS unless clamped to
    ``hi``. Integer division only of non-negative values (Triton's ``//`` truncates toward 0).
    """
    first = start + shift
    last = start + ROWS - 1 + shift
    lo = 0
    full_lo = 0
    hi = n_cols
    if HAS_LO:
        lo = tl.maximum(first - lo_w, 0) // COLS * COLS
        full_lo = (tl.maximum(last - lo_w, 0) + COLS - 1) // COLS * COLS
    if HAS_HI:
        hi = tl.minimum(n_cols, tl.maximum(last + hi_w + 1, 0))
    full_hi = n_cols // COLS * COLS if ALIGN_END else n_cols
    if HAS_HI:
        full_hi = tl.minimum(full_hi, tl.maximum(first + hi_w + 1, 0) // COLS * COLS)
    a = tl.maximum(lo, tl.minimum(full_lo, hi))
    b = tl.maximum(a, tl.minimum(full_hi, hi))
    return lo, a, b, hi


@triton.jit
def band_mask(o_r, o_c, shift, n_cols, lo_w, hi_w, HAS_LO: tl.constexpr, HAS_HI: tl.constexpr,
              CHECK_END: tl.constexpr):
    """``[R, C]`` boolean: column ``o_c[j]`` is visible to row ``o_r[i]`` (the rule of :func:`band`)."""
    m = o_c[None, :] >= 0
    if CHECK_END:
        m = m & (o_c[None, :] < n_cols)
    if HAS_LO:
        m = m & (o_c[None, :] >= o_r[:, None] + shift - lo_w)
    if HAS_HI:
        m = m & (o_c[None, :] <= o_r[:, None] + shift + hi_w)
    return m


@triton.jit
def tile_mask(m_rows, m_d, EVEN_D: tl.constexpr):
    """``[R, D]`` load/store mask from a row mask and a head-dim mask. With EVEN_D (head_dim is the block's
    width) the mask is ``[R, 1]``: constant along the contiguous head dim, so accesses stay 16-byte
    vectors (a runtime bound on D would split them into 4-byte ones)."""
    # a constexpr condition: one side is compiled, so the two shapes never meet
    return m_rows[:, None] if EVEN_D else m_rows[:, None] & m_d[None, :]


@triton.jit
def tile_mask_t(m_cols, m_d, EVEN_D: tl.constexpr):
    """:func:`tile_mask` for a transposed ``[D, C]`` tile (``kᵀ``): ``[1, C]`` with EVEN_D."""
    return m_cols[None, :] if EVEN_D else m_d[:, None] & m_cols[None, :]


@triton.jit
def scores(b_s, qk_scale, softcap_log2, SOFTCAP: tl.constexpr):
    """Raw ``q·k`` → base-2 logits ``s₂``: ``qk · scale·log2 e``, or with a softcap
    ``softcap·log2 e · tanh(qk · scale / softcap)`` (``qk_scale`` is then ``scale / softcap``). Also returns
    the tanh (the backward's derivative ``1 − t²``; 0 without a softcap)."""
    if SOFTCAP:
        b_t = tanh(b_s * qk_scale)
        return b_t * softcap_log2, b_t
    return b_s * qk_scale, b_s * 0.0


@triton.jit
def seq_span(p_cu, i_b, stride_cu, total, mask=None):
    """Token range ``[start, end)`` of packed sequence ``i_b`` (a scalar, or a vector with ``mask``: masked
    lanes give an empty range), read from ``cu_seqlens`` and bounded whatever it holds: both ends clamped
    into ``[0, total]`` (the packed length), a decreasing pair an empty sequence at its start. No row
    outside the tensors can be addressed from it; host-side checks of the table are opt-in (validation)."""
    if mask is None:
        b_lo = tl.load(p_cu + i_b * stride_cu)
        b_hi = tl.load(p_cu + (i_b + 1) * stride_cu)
    else:
        b_lo = tl.load(p_cu + i_b * stride_cu, mask=mask, other=0)
        b_hi = tl.load(p_cu + (i_b + 1) * stride_cu, mask=mask, other=0)
    start = tl.minimum(tl.maximum(b_lo, 0), total)
    end = tl.minimum(tl.maximum(b_hi, start), total)
    return start, end


@triton.jit
def seq_bounds(p_cu, i_b, stride_cu, total, seqlen, stride_b, stride_s, IS_VARLEN: tl.constexpr):
    """``(length, int64 element offset of the sequence's first token, its first row index)`` of batch
    entry ``i_b``: from ``cu_seqlens`` (varlen, packed tokens; bounded by :func:`seq_span`) or the fixed
    length and the batch stride."""
    if IS_VARLEN:
        start, end = seq_span(p_cu, i_b, stride_cu, total)
        return end - start, start.to(tl.int64) * stride_s, start
    return seqlen + 0 * i_b, i_b.to(tl.int64) * stride_b, 0 * i_b


@triton.jit
def zero_uncovered(p_cu, stride_cu, n_seq, total, p_x, p_y, stride_xs, stride_xh, n_heads, head_dim, p_l, stride_lh,
                   HAS_Y: tl.constexpr, HAS_L: tl.constexpr, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                   EVEN_D: tl.constexpr, BLOCK_B: tl.constexpr):
    """Varlen outputs: token rows in ``[0, total)`` that no sequence covers (past ``cu_seqlens[-1]``, before
    ``cu_seqlens[0]``, holes a bad table leaves) get zeros in ``x`` (and ``y``) ``[total, n_heads, D]`` and
    ``-inf`` in ``l`` ``[n_heads, total]`` (an lse: rows that see no key), never stale memory. Tiles of
    ROWS rows are spread over every program of the launch (grid axes 0 and 1); each tests its rows against
    every sequence's :func:`seq_span` (BLOCK_B at a time) and stores only when a row is uncovered, so a
    valid table costs one scan of ``cu_seqlens`` per tile and no stores. Covered rows are never written
    here: no race with the programs that compute them."""
    i_p = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    n_p = tl.num_programs(0) * tl.num_programs(1)
    o_bb = tl.arange(0, BLOCK_B)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    for i_t in range(i_p, tl.cdiv(total, ROWS), n_p):
        o_t = i_t * ROWS + tl.arange(0, ROWS)
        b_hit = tl.zeros([ROWS], dtype=tl.int32)
        for b0 in range(0, n_seq, BLOCK_B):
            o_b = b0 + o_bb
            b_s, b_e = seq_span(p_cu, o_b, stride_cu, total, o_b < n_seq)
            m_in = (o_t[:, None] >= b_s[None, :]) & (o_t[:, None] < b_e[None, :])
            b_hit = tl.maximum(b_hit, tl.max(m_in.to(tl.int32), axis=1))
        m_t = (b_hit == 0) & (o_t < total)
        if tl.max(m_t.to(tl.int32), axis=0) > 0:
            m_x = tile_mask(m_t, m_d, EVEN_D)
            o_x = o_t[:, None].to(tl.int64) * stride_xs + o_d[None, :]
            b_zero = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
            p_xh, p_yh, p_lh = p_x + o_x, p_y + o_x, p_l + o_t
            for _ in range(n_heads):  # pointers stepped per head (int64 arithmetic, no casts of the counter)
                tl.store(p_xh, b_zero.to(p_x.dtype.element_ty), mask=m_x)
                if HAS_Y:
                    tl.store(p_yh, b_zero.to(p_y.dtype.element_ty), mask=m_x)
                if HAS_L:
                    tl.store(p_lh, tl.full([ROWS], float("-inf"), tl.float32), mask=m_t)
                p_xh += stride_xh
                p_yh += stride_xh
                p_lh += stride_lh


ZERO_BLOCK_B = tl.constexpr(32)
"""Sequences :func:`zero_uncovered` tests a tile's rows against per step."""


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _fwd_inner(b_acc, b_m, b_l, b_q, p_k, p_v, stride_ks, stride_vs, o_i, o_d, m_d, lo, hi, len_k, off,
               left, right, qk_scale, softcap_log2,
               MASK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
               EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr):
    """Online softmax over key blocks ``[lo, hi)``: ``m`` running max (base 2), ``l`` running sum,
    ``acc`` unnormalised output. MASK: apply the band and the ``len_k`` bound (the ranges :func:`band`
    marks), else no mask work at all (the loads skip the row bound too: those blocks are in range)."""
    o_nb = tl.arange(0, BLOCK_N)
    for n in range(lo, hi, BLOCK_N):
        o_n = n + o_nb
        p_kt = p_k + o_n[None, :].to(tl.int64) * stride_ks + o_d[:, None]
        p_vn = p_v + o_n[:, None].to(tl.int64) * stride_vs + o_d[None, :]
        if MASK:
            m_n = o_n < len_k
            b_kt = tl.load(p_kt, mask=tile_mask_t(m_n, m_d, EVEN_D), other=0.0)
            b_v = tl.load(p_vn, mask=tile_mask(m_n, m_d, EVEN_D), other=0.0)
        elif EVEN_D:
            b_kt = tl.load(p_kt)  # noqa: KW001 - an unmasked block: every key < len_k, every d < head_dim
            b_v = tl.load(p_vn)  # noqa: KW001 - as above
        else:
            b_kt = tl.load(p_kt, mask=m_d[:, None], other=0.0)
            b_v = tl.load(p_vn, mask=m_d[None, :], other=0.0)
        b_s, _ = scores(tl.dot(b_q, b_kt, input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        if MASK:
            m_s = band_mask(o_i, o_n, off, len_k, left, right, HAS_LEFT, HAS_RIGHT, True)
            b_s = tl.where(m_s, b_s, float("-inf"))
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        # masked blocks: a row that has seen no key yet keeps max -inf, and exp2(-inf - -inf) would be NaN
        b_m_use = tl.where(b_m_new == float("-inf"), 0.0, b_m_new) if MASK else b_m_new
        b_p = tl.exp2(b_s - b_m_use[:, None])
        b_alpha = tl.exp2(b_m - b_m_use)
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PREC)
        b_m = b_m_new
    return b_acc, b_m, b_l



@triton.jit
def _fwd_inner_tma(b_acc, b_m, b_l, b_q, d_k, d_v, o_i, lo, hi, len_k, off, left, right, qk_scale, softcap_log2,
                   MASK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                   BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr, WARP_SPEC: tl.constexpr):
    """:func:`_fwd_inner` with K/V read through tensor descriptors (TMA, Hopper): ``d_k``/``d_v`` cover
    the sequence's ``[len_k, head_dim]`` rows of one KV head with ``[BLOCK_N, BLOCK_D]`` boxes; rows past
    ``len_k`` and columns past ``head_dim`` arrive as zeros, so no load needs a mask (scores still do).
    WARP_SPEC: Triton's warp-specialised loop (a producer warp issues the TMA loads)."""
    o_nb = tl.arange(0, BLOCK_N)
    for n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        o_n = n + o_nb
        b_k = d_k.load([n, 0])
        b_s, _ = scores(tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        if MASK:
            m_s = band_mask(o_i, o_n, off, len_k, left, right, HAS_LEFT, HAS_RIGHT, True)
            b_s = tl.where(m_s, b_s, float("-inf"))
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        b_m_use = tl.where(b_m_new == float("-inf"), 0.0, b_m_new) if MASK else b_m_new
        b_p = tl.exp2(b_s - b_m_use[:, None])
        b_alpha = tl.exp2(b_m - b_m_use)
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        b_v = d_v.load([n, 0])
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PREC)
        b_m = b_m_new
    return b_acc, b_m, b_l


@triton.jit
def _fwd_block(p_qh, p_kh, p_vh, p_oh, p_lh, stride_qs, stride_ks, stride_vs, stride_os, m0, len_q, len_k,
               head_dim, qk_scale, softcap_log2, left, right, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
               SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
               EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr, TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Query rows ``[m0, m0 + BLOCK_M)`` of one (sequence, head): ``p_qh``/``p_oh`` point at its first
    query row, ``p_kh``/``p_vh`` at its first key row (KV head), ``p_lh`` at its first lse entry."""
    off = len_k - len_q  # bottom-right alignment: query i sits at key position i + off
    o_m = m0 + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BLOCK_D)
    m_m = o_m < len_q
    m_d = o_d < head_dim
    b_q = tl.load(p_qh + o_m[:, None].to(tl.int64) * stride_qs + o_d[None, :], mask=tile_mask(m_m, m_d, EVEN_D),
                  other=0.0)

    b_m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([BLOCK_M], dtype=tl.float32)
    b_acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    lo, a, b, hi = band(m0, BLOCK_M, BLOCK_N, off, len_k, left, right, HAS_LEFT, HAS_RIGHT, True)
    if TMA:
        d_k = tl.make_tensor_descriptor(p_kh, shape=[len_k, head_dim], strides=[stride_ks, 1],
                                        block_shape=[BLOCK_N, BLOCK_D])
        d_v = tl.make_tensor_descriptor(p_vh, shape=[len_k, head_dim], strides=[stride_vs, 1],
                                        block_shape=[BLOCK_N, BLOCK_D])
        b_acc, b_m, b_l = _fwd_inner_tma(b_acc, b_m, b_l, b_q, d_k, d_v, o_m, lo, a, len_k, off, left, right,
                                         qk_scale, softcap_log2, True, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_N,
                                         DOT_PREC, False)
        b_acc, b_m, b_l = _fwd_inner_tma(b_acc, b_m, b_l, b_q, d_k, d_v, o_m, a, b, len_k, off, left, right,
                                         qk_scale, softcap_log2, False, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_N,
                                         DOT_PREC, WARP_SPEC)
        b_acc, b_m, b_l = _fwd_inner_tma(b_acc, b_m, b_l, b_q, d_k, d_v, o_m, b, hi, len_k, off, left, right,
                                         qk_scale, softcap_log2, True, HAS_LEFT, HAS_RIGHT, SOFTCAP, BLOCK_N,
                                         DOT_PREC, False)
    else:
        b_acc, b_m, b_l = _fwd_inner(b_acc, b_m, b_l, b_q, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d,
                                     lo, a, len_k, off, left, right, qk_scale, softcap_log2,
                                     True, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_N, DOT_PREC)
        b_acc, b_m, b_l = _fwd_inner(b_acc, b_m, b_l, b_q, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d,
                                     a, b, len_k, off, left, right, qk_scale, softcap_log2,
                                     False, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_N, DOT_PREC)
        b_acc, b_m, b_l = _fwd_inner(b_acc, b_m, b_l, b_q, p_kh, p_vh, stride_ks, stride_vs, o_m, o_d, m_d,
                                     b, hi, len_k, off, left, right, qk_scale, softcap_log2,
                                     True, HAS_LEFT, HAS_RIGHT, SOFTCAP, EVEN_D, BLOCK_N, DOT_PREC)

    # rows that saw no key (a window or causal mask with Sq > Sk): o = 0, lse = -inf
    m_seen = b_l > 0.0
    b_o = b_acc / tl.where(m_seen, b_l, 1.0)[:, None]
    b_lse = tl.where(m_seen, (b_m + tl.log2(tl.where(m_seen, b_l, 1.0))) * LN2, float("-inf"))
    tl.store(p_oh + o_m[:, None].to(tl.int64) * stride_os + o_d[None, :], b_o.to(p_oh.dtype.element_ty),
             mask=tile_mask(m_m, m_d, EVEN_D))
    tl.store(p_lh + o_m, b_lse, mask=m_m)


@triton.jit
def _attn_fwd_kernel(p_q, p_k, p_v, p_o, p_lse, p_cuq, p_cuk,
                     stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                     stride_vb, stride_vs, stride_vh, stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
                     stride_cuq, stride_cuk, total_q, total_k,
                     seqlen_q, seqlen_k, n_heads, group, head_dim, qk_scale, softcap_log2, left, right,
                     IS_VARLEN: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                     SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr,
                     TMA: tl.constexpr = False, WARP_SPEC: tl.constexpr = False):
    """``o[b, i, h] = Σ_j softmax_j(s[b, h, i, j]) · v[b, j, h // group]``, ``lse[b, h, i] = log Σ_j e^s``.

    q, o ``[B, Sq, Hq, D]``, k, v ``[B, Sk, Hkv, D]`` (unit stride on D, any other strides), lse fp32
    ``[B, Hq, Sq]``. Varlen: B = 1, q/o ``[total_q, Hq, D]`` and k/v ``[total_k, Hkv, D]`` with rows located
    through ``cu_seqlens`` (any stride; bounded by :func:`seq_span`), lse ``[Hq, total_q]`` (``stride_lb``
    0); rows no sequence covers come back zero (:func:`zero_uncovered`). Grid ``(cdiv(max_seqlen_q,
    BLOCK_M), B · Hq)``; blocks taken last-first so the longest causal rows start first. Varlen: a program
    takes every ``num_programs(0)``-th block of its sequence, so a ``max_seqlen_q`` below the longest
    sequence (the grid) is a hint and no row goes uncomputed. TMA (a plan option, Hopper only): K/V through
    tensor descriptors (:func:`_fwd_inner_tma`; WARP_SPEC its warp-specialised loop).
    """
    i_p = tl.program_id(0)
    n_m = tl.num_programs(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // n_heads
    i_h = i_bh % n_heads
    i_hk = i_h // group
    len_q, q_off, q_row0 = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_qb, stride_qs, IS_VARLEN)
    len_k, k_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_kb, stride_ks, IS_VARLEN)
    _, v_off, _ = seq_bounds(p_cuk, i_b, stride_cuk, total_k, seqlen_k, stride_vb, stride_vs, IS_VARLEN)
    _, o_off, _ = seq_bounds(p_cuq, i_b, stride_cuq, total_q, seqlen_q, stride_ob, stride_os, IS_VARLEN)
    p_qh = p_q + q_off + i_h.to(tl.int64) * stride_qh
    p_kh = p_k + k_off + i_hk.to(tl.int64) * stride_kh
    p_vh = p_v + v_off + i_hk.to(tl.int64) * stride_vh
    p_oh = p_o + o_off + i_h.to(tl.int64) * stride_oh
    p_lh = p_lse + i_b.to(tl.int64) * stride_lb + i_h.to(tl.int64) * stride_lh + q_row0
    if IS_VARLEN:
        zero_uncovered(p_cuq, stride_cuq, tl.num_programs(1) // n_heads, total_q, p_o, p_o, stride_os, stride_oh,
                       n_heads, head_dim, p_lse, stride_lh, False, True, BLOCK_M, BLOCK_D, EVEN_D, ZERO_BLOCK_B)
    if (n_m - 1 - i_p) * BLOCK_M >= len_q:  # varlen: a sequence shorter than the grid
        return
    if IS_VARLEN:
        for i_m in range(n_m - 1 - i_p, tl.cdiv(len_q, BLOCK_M), n_m):
            _fwd_block(p_qh, p_kh, p_vh, p_oh, p_lh, stride_qs, stride_ks, stride_vs, stride_os, i_m * BLOCK_M,
                       len_q, len_k, head_dim, qk_scale, softcap_log2, left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                       BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, DOT_PREC, TMA, WARP_SPEC)
    else:  # the grid covers Sq exactly: one block per program
        _fwd_block(p_qh, p_kh, p_vh, p_oh, p_lh, stride_qs, stride_ks, stride_vs, stride_os, (n_m - 1 - i_p) * BLOCK_M,
                   len_q, len_k, head_dim, qk_scale, softcap_log2, left, right, HAS_LEFT, HAS_RIGHT, SOFTCAP,
                   BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D, DOT_PREC, TMA, WARP_SPEC)


# ------------------------------------------------------------------------------------------------ launcher


@dataclass(frozen=True)
class FwdPlan:
    """Tiles of the forward: BLOCK_M query rows × BLOCK_N keys per step, BLOCK_D the padded head dim."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_D: int
    num_warps: int
    num_stages: int
    TMA: bool = False
    """K/V through tensor descriptors (Hopper; :func:`_fwd_inner_tma`). Off by default until measured."""
    WARP_SPEC: bool = False
    """With TMA: the unmasked key loop warp-specialised (``tl.range(..., warp_specialize=True)``)."""


_FORCED_FWD: ForcedPlan[dict] = ForcedPlan(
    "forced_fwd_plan", knobs=("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "TMA", "WARP_SPEC"))


def forced_fwd_plan(**knobs: object) -> AbstractContextManager[None]:
    """Within the block, forward launches take these knobs (``BLOCK_M``, ``BLOCK_N``, ``num_warps``,
    ``num_stages``, ``TMA``, ``WARP_SPEC``) over :func:`fwd_plan`'s choice (``kw tune flash_attention``,
    sweeps, tests); another knob raises ``ValueError``. ``TMA`` where descriptors are unavailable (no Hopper,
    the interpreter) or the strides do not allow them raises ``ValueError`` at launch."""
    return _FORCED_FWD.forced(dict(knobs))


FWD_CONFIGS: list[dict[str, object]] = [
    *({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st, "TMA": False}
      for bm in (64, 128) for bn in (32, 64, 128) for w in (4, 8) for st in (1, 2, 3)),
    *({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st, "TMA": True}
      for bm in (64, 128) for bn in (32, 64, 128) for w in (4, 8) for st in (2, 3, 4)),
]
"""``kw tune flash_attention``'s space for the forward: pointer tiles (query rows × keys, warps, stages),
then K/V through tensor descriptors (Hopper only; elsewhere those candidates raise and are recorded). Every
config names ``TMA``: the default plan's path would otherwise leak into it. Not declared: ``WARP_SPEC``
(Triton 3.6, sm_90 AOT: at 8 warps the same code as without, at 4 warps the warp-specialisation pass aborts
the compiling process). TMA at 2 stages crashes ptxas on some tiles; the compile gate records those."""


@cached_plan
def fwd_plan(head_dim: int, fp32: bool, capability: tuple[int, int] | None) -> FwdPlan:
    """Tiles per head dim. Interpreter: 16×16 (tiny CPU cases still take several blocks, masked tails
    and the three loop ranges). Hopper: BLOCK_M 128 × BLOCK_N 64 (wgmma M is 64 rows a warpgroup). d 128:
    8 warps, 3 stages — 180 registers, 128 KiB shared, no spills (sm_90 AOT). d ≤ 64: 4 warps, 3 stages —
    229 registers, 64 KiB, two CTAs an SM (128×128 with 4 warps spilled 48 B; with 8 warps it fits at one
    CTA an SM). d 256: 64×64, 8 warps, 2 stages (254 registers, no spills; 4 warps spilled 88 B).
    fp32 inputs (exact products on FMA units, no tensor cores): 32×32, 8 warps, 1 stage (the 16-bit tiles
    spill 10 KiB there). Off Hopper, d 256 takes 32 keys a step where a block has less than 120 KiB of shared
    memory (Ada: 99 KiB; from the sm_89 compile, no such GPU measured).

    Hopper, d 256 (``kw tune flash_attention --case b2-hq8-hkv4-s4k-d256-causal``, H100, every declared
    config: ``benchmarks/results/h100-80gb-hbm3/tune/flash_attention-first-space``, kept by the re-run over the
    widened space in ``tune/flash_attention``): K/V through descriptors, 64×64, 4
    warps (one warpgroup: the 64×256 fp32 accumulator in 128 of its 244 registers), 3 stages — 0.344 ms
    against 0.662 for the 64×64 8-warp pointer plan before (1.93×); without descriptors the pointer path
    takes 128×32, 8 warps, 3 stages (0.418 ms). Most larger tiles spill or exceed 227 KiB of shared memory
    there.

    Hopper, d 128: K/V through tensor descriptors, 128×128 tiles, 8 warps, 3 stages (236 registers, 225 KiB
    shared) — the fastest variant of the H100 forward sweep (``benchmarks/results/h100-80gb-hbm3/sweeps/
    attn_fwd_sweep.json``, B4 H32 S4k / B2 H32 S8k): 495–515 TFLOP/s non-causal and 426–470 causal against
    446–461 / 401–428 for the pointer-path 128×64 plan (1.04–1.11×); the launcher falls back to that plan
    where descriptors are unavailable (rows not 16-byte aligned)."""
    block_d = max(16, next_pow2(head_dim))
    if capability is None and interpreter_active():
        return FwdPlan(16, 16, block_d, 1, 1)
    if fp32:
        return FwdPlan(32, 32, block_d, 8, 1)
    if block_d <= 64:
        return FwdPlan(128, 64, block_d, 4, 3)
    hopper = capability is not None and capability[0] == 9
    if block_d <= 128:
        return FwdPlan(128, 128, block_d, 8, 3, TMA=True) if hopper else FwdPlan(128, 64, block_d, 8, 3)
    if hopper:
        return FwdPlan(64, 64, block_d, 4, 3, TMA=True)
    # 64 keys a step at 2 stages take 104 KiB of shared memory at d 256: past the 99 KiB a block of Ada and the
    # consumer parts, 32 keys (68 KiB, no spill; sm_89 AOT)
    smem = smem_per_block(capability) if capability is not None else smem_per_block((9, 0))
    return FwdPlan(64, 64 if smem >= 120 * 1024 else 32, block_d, 8, 2)


def pointer_fallback(plan: FwdPlan) -> FwdPlan:
    """The pointer-path plan that stands in for a descriptor (TMA) plan where descriptors cannot be used (k/v
    rows not 16-byte aligned): the sm_90 tune's best pointer tiles for the head dim (d 256: 128×32 at 8 warps;
    the d 256 descriptor tiles at 4 warps spill 136 B on pointers)."""
    if plan.BLOCK_D <= 128:
        return replace(plan, TMA=False, WARP_SPEC=False, BLOCK_N=64)
    return FwdPlan(128, 32, plan.BLOCK_D, 8, 3)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs: exact ("ieee") products, as an fp32 attention promises; 16-bit inputs ignore it."""
    return "ieee" if dtype == torch.float32 else "tf32"


def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor | None,
                  cu_k: torch.Tensor | None, max_q: int, max_k: int, scale: float, left: int, right: int,
                  softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(o, lse)``: q ``[B, Sq, Hq, D]`` (varlen ``[Tq, Hq, D]``), k/v ``[B, Sk, Hkv, D]`` (``[Tk, Hkv,
    D]``), unit stride on D; o contiguous like q (q's dtype), lse fp32 ``[B, Hq, Sq]`` (varlen ``[Hq, Tq]``).
    ``cu_q``/``cu_k``: int32 ``[B + 1]``, any stride (stride 0 included); ``max_q`` sizes the grid only (a
    hint: longer sequences are still computed whole). ``softcap`` 0 means none; ``left``/``right`` -1 mean
    unbounded."""
    varlen = cu_q is not None
    o = empty(q.shape, dtype=q.dtype, device=q.device)  # the caller's dtype, whatever the kernels read
    q, k, v = (interpreter_dot_operand(t) for t in (q, k, v))
    if varlen:
        batch, (tq, hq, d), hkv = cu_q.shape[0] - 1, q.shape, k.shape[1]
        lse = empty((hq, tq), dtype=torch.float32, device=q.device)
        sq, sk = max_q, max_k
        qs, ks, vs, os_ = (0, *q.stride()), (0, *k.stride()), (0, *v.stride()), (0, *o.stride())
        ls = (0, lse.stride(0))
        cus = (cu_q.stride(0), cu_k.stride(0), tq, k.shape[0])
    else:
        batch, sq, hq, d = q.shape
        sk, hkv = k.shape[1], k.shape[2]
        lse = empty((batch, hq, sq), dtype=torch.float32, device=q.device)
        qs, ks, vs, os_ = q.stride(), k.stride(), v.stride(), o.stride()
        ls = (lse.stride(0), lse.stride(1))
        cus = (1, 1, 1, 1)  # unused; Triton folds 1s into constants: the dense kernels keep their signature
    plan = fwd_plan(d, q.dtype == torch.float32, gpu_capability())
    forced = _FORCED_FWD.get()
    if forced:
        plan = replace(plan, **forced)
    extra = dict(TMA=False, WARP_SPEC=False)  # every constexpr passed: launch() caches the compiled kernel
    if plan.TMA:
        # descriptors: 16-byte aligned row strides and bases, a Hopper GPU (or an sm_90 plan)
        # every row base a descriptor starts from (batch, sequence start, head) 16-byte aligned: all
        # strides but the last, not only the row stride (d 100 with 2 KV heads: rows 400 B, heads 200 B)
        misaligned = any(any((st * t.element_size()) % 16 for st in t.stride()[:-1]) or t.data_ptr() % 16
                         for t in (k, v))
        if forced and forced.get("TMA"):
            if not tma_available():
                raise ValueError("forced_fwd_plan: TMA needs a Hopper GPU (tma_available() is False)")
            if misaligned:
                raise ValueError("forced_fwd_plan: TMA needs 16-byte aligned k/v rows")
        elif misaligned or not tma_available():
            # the pointer plan for this head dim, with any knobs forced beside a default TMA plan still applied
            plan = replace(pointer_fallback(plan), **{k: v for k, v in (forced or {}).items() if k != "TMA"})
    if plan.TMA:
        ensure_tma_allocator()
        extra = dict(TMA=True, WARP_SPEC=plan.WARP_SPEC)
    if softcap > 0:
        qk_scale, softcap_log2 = scale / softcap, softcap * 1.4426950408889634
    else:
        qk_scale, softcap_log2 = scale * 1.4426950408889634, 0.0
    dummy = cu_q if varlen else lse  # never read when not varlen
    # varlen: at least one block per sequence whatever max_seqlen_q says (programs loop over the rest, and
    # the rows no sequence covers are zeroed by the same launch)
    grid = (max(cdiv(sq, plan.BLOCK_M), int(varlen)), batch * hq)
    if grid[0] > 0:
        launch(_attn_fwd_kernel, grid, q, k, v, o, lse, dummy, cu_k if varlen else dummy,
               qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1], os_[2], ls[0], ls[1],
               *cus, sq, sk, hq, hq // hkv, d, qk_scale, softcap_log2, left, right,
               num_warps=plan.num_warps, num_stages=plan.num_stages, IS_VARLEN=varlen, HAS_LEFT=left >= 0,
               HAS_RIGHT=right >= 0, SOFTCAP=softcap > 0, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
               BLOCK_D=plan.BLOCK_D, EVEN_D=d == plan.BLOCK_D, DOT_PREC=dot_precision(q.dtype), **extra)
    return o, lse
