"""Decode attention over a paged KV cache: split-KV ("flash decoding") with a log-sum-exp combine.

Stage 1, ``_decode_split_kernel``: one program per (split, batch, KV head). The ``q_len × group`` query
rows that read this KV head (``group = Hq / Hkv`` heads × the new tokens) are packed into the M side of
one ``tl.dot`` tile (padded to ≥ 16 rows), so each K/V byte of the split is loaded once for all of them.
The split's keys are walked ``BLOCK_N`` at a time; each key's page comes from the block table (one int per
key: pages may be smaller than, equal to or larger than BLOCK_N, anywhere in the pool). Output: the split's
normalised partial ``o`` and base-2 ``lse`` in fp32 — or, with one split, the final ``o`` directly.

Stage 2, ``_decode_combine_kernel``: per query row, ``o = Σ_s 2^(lse_s − M) o_s / Σ_s 2^(lse_s − M)``.

Split count (:func:`decode_plan`): enough (batch × Hkv × splits) programs for ~4 per SM, each split at
least :data:`MIN_SPLIT_TOKENS` keys; planned from the block table's capacity (``max_pages × page_size``),
a static shape, so the launch is the same for every call (CUDA graphs) and needs no host sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernelworks.ops.attention.forward import dot_precision, scores, tile_mask, tile_mask_t
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

MIN_SPLIT_TOKENS = 512
"""Fewest keys per split on a GPU: below this the combine's extra traffic and the per-program setup cost
more than the parallelism gains."""
MAX_SPLITS = 64


@triton.jit
def _decode_split_kernel(p_q, p_k, p_v, p_bt, p_ctx, p_o, p_op, p_lp,
                         stride_qb, stride_qt, stride_qh, stride_kp, stride_ks, stride_kh,
                         stride_vp, stride_vs, stride_vh, stride_bt, stride_ob, stride_ot, stride_oh,
                         n_kv_heads, group, q_len, n_heads, head_dim, page_size, chunk, n_splits,
                         qk_scale, softcap_log2, SOFTCAP: tl.constexpr, DIRECT: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                         EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """Partial attention of split ``s`` (keys ``[s·chunk, min((s+1)·chunk, ctx))``) for the query rows
    ``r = t·group + hh`` (token t, head ``g·group + hh``) of (batch b, KV head g).

    q ``[B, T, Hq, D]``; caches ``[num_pages, page_size, Hkv, D]``; block table int32 ``[B, max_pages]``;
    ctx int32 ``[B]``; token t sits at position ``ctx − T + t`` and sees keys ``j ≤ ctx − T + t``.
    DIRECT (one split): o ``[B, T, Hq, D]`` in q's dtype. Else op fp32 ``[B, T·Hq, n_splits, D]`` (the
    split's normalised output) and lp fp32 ``[B, T·Hq, n_splits]`` (its base-2 lse; -inf: saw no key).
    Grid ``(n_splits, B · Hkv)``.
    """
    i_s = tl.program_id(0)
    i_bg = tl.program_id(1)
    i_b = i_bg // n_kv_heads
    i_g = i_bg % n_kv_heads
    ctx = tl.load(p_ctx + i_b)
    start = i_s * chunk  # noqa: KW007 - a token index within one sequence (context lengths are int32)
    if start >= ctx and not DIRECT:  # split past this sequence's context: the combine skips it
        return
    end = tl.minimum(start + chunk, ctx)

    o_r = tl.arange(0, BLOCK_H)
    m_r = o_r < q_len * group
    o_t = o_r // group
    o_h = i_g * group + o_r % group  # noqa: KW007 - a head index
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    m_q = tile_mask(m_r, m_d, EVEN_D)
    b_q = tl.load(p_q + i_b.to(tl.int64) * stride_qb + o_t[:, None] * stride_qt + o_h[:, None] * stride_qh
                  + o_d[None, :], mask=m_q, other=0.0)
    b_pos = ctx - q_len + o_t  # each row's own position: keys after it are masked (q_len > 1)

    b_m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([BLOCK_H], dtype=tl.float32)
    b_acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    p_btb = p_bt + i_b.to(tl.int64) * stride_bt
    o_nb = tl.arange(0, BLOCK_N)
    for n in range(start, end, BLOCK_N):
        o_n = n + o_nb
        m_n = o_n < end
        # one page index per key: the page of key j is block_table[b, j // page_size]
        b_page = tl.load(p_btb + o_n // page_size, mask=m_n, other=0).to(tl.int64)
        o_slot = (o_n % page_size).to(tl.int64)
        b_kt = tl.load(p_k + b_page[None, :] * stride_kp + o_slot[None, :] * stride_ks + i_g.to(tl.int64) * stride_kh
                       + o_d[:, None], mask=tile_mask_t(m_n, m_d, EVEN_D), other=0.0)
        b_s, _ = scores(tl.dot(b_q, b_kt, input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        b_s = tl.where(m_n[None, :] & (o_n[None, :] <= b_pos[:, None]), b_s, float("-inf"))
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        b_m_use = tl.where(b_m_new == float("-inf"), 0.0, b_m_new)
        b_p = tl.exp2(b_s - b_m_use[:, None])
        b_alpha = tl.exp2(b_m - b_m_use)
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        b_v = tl.load(p_v + b_page[:, None] * stride_vp + o_slot[:, None] * stride_vs + i_g.to(tl.int64) * stride_vh
                      + o_d[None, :], mask=tile_mask(m_n, m_d, EVEN_D), other=0.0)
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PREC)
        b_m = b_m_new

    m_seen = b_l > 0.0
    b_o = b_acc / tl.where(m_seen, b_l, 1.0)[:, None]
    if DIRECT:
        tl.store(p_o + i_b.to(tl.int64) * stride_ob + o_t[:, None] * stride_ot + o_h[:, None] * stride_oh
                 + o_d[None, :], b_o.to(p_o.dtype.element_ty), mask=m_q)
    else:
        o_row = (i_b.to(tl.int64) * q_len * n_heads + o_t * n_heads + o_h) * n_splits + i_s
        tl.store(p_op + o_row[:, None] * head_dim + o_d[None, :], b_o, mask=m_q)
        b_lse = tl.where(m_seen, b_m + tl.log2(tl.where(m_seen, b_l, 1.0)), float("-inf"))
        tl.store(p_lp + o_row, b_lse, mask=m_r)


@triton.jit
def _decode_combine_kernel(p_op, p_lp, p_ctx, p_o, stride_ob, stride_ot, stride_oh, q_len, n_heads, head_dim,
                           chunk, n_splits, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """``o[b, t, h] = Σ_s w_s o_s / Σ_s w_s`` with ``w_s = 2^(lse_s − max lse)`` over the splits that hold
    keys (``s·chunk < ctx``); 0 when none saw a key. Shapes as in ``_decode_split_kernel``. Grid
    ``(B · T · Hq,)``."""
    i_row = tl.program_id(0)
    i_b = i_row // (q_len * n_heads)
    i_t = (i_row // n_heads) % q_len
    i_h = i_row % n_heads
    ctx = tl.load(p_ctx + i_b)
    o_s = tl.arange(0, BLOCK_S)
    m_s = (o_s < n_splits) & (o_s * chunk < ctx)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    o_base = i_row.to(tl.int64) * n_splits
    b_lse = tl.load(p_lp + o_base + o_s, mask=m_s, other=float("-inf"))
    b_max = tl.max(b_lse, axis=0)
    b_max = tl.where(b_max == float("-inf"), 0.0, b_max)
    b_w = tl.exp2(b_lse - b_max)
    b_os = tl.load(p_op + (o_base + o_s[:, None]) * head_dim + o_d[None, :], mask=m_s[:, None] & m_d[None, :],
                   other=0.0)
    b_sum = tl.sum(b_w, axis=0)
    b_o = tl.sum(b_os * b_w[:, None], axis=0) / tl.where(b_sum > 0.0, b_sum, 1.0)
    p_row = p_o + i_b.to(tl.int64) * stride_ob + i_t.to(tl.int64) * stride_ot + i_h.to(tl.int64) * stride_oh
    tl.store(p_row + o_d, b_o.to(p_o.dtype.element_ty), mask=m_d)


@dataclass(frozen=True)
class DecodePlan:
    """``n_splits`` splits of ``chunk`` keys (a multiple of BLOCK_N); BLOCK_H packed query rows."""

    n_splits: int
    chunk: int
    BLOCK_H: int
    BLOCK_N: int
    BLOCK_D: int
    num_warps: int
    num_stages: int


@cached_plan
def decode_plan(batch: int, n_kv_heads: int, rows: int, capacity: int, head_dim: int, sms: int) -> DecodePlan:
    """Splits so that ``batch · Hkv · splits`` ≥ 4 programs per SM (3 CTAs of this kernel fit an SM on
    sm_90: 154 registers, 39 KiB shared — so about one full wave in flight), each ≥ MIN_SPLIT_TOKENS keys
    (interpreter: 16-key blocks and splits of 32 keys, so tiny cases still take several splits and the
    combine). ``rows`` = q_len × group, packed into BLOCK_H ≥ 16 rows."""
    block_h = max(16, next_pow2(rows))
    block_d = max(16, next_pow2(head_dim))
    if interpreter_active():
        block_n, min_chunk, warps, stages = 16, 32, 1, 1
    else:
        block_n, min_chunk, warps, stages = 64, MIN_SPLIT_TOKENS, 4, 3
    base = batch * n_kv_heads
    want = max(1, cdiv(4 * sms, base))
    splits = max(1, min(want, MAX_SPLITS, cdiv(capacity, min_chunk)))
    chunk = cdiv(cdiv(capacity, splits), block_n) * block_n
    splits = cdiv(capacity, chunk)
    return DecodePlan(splits, chunk, block_h, block_n, block_d, warps, stages)


def decode_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
               context_lens: torch.Tensor, scale: float, softcap: float) -> torch.Tensor:
    """``o`` shaped like ``q`` (``[B, Hq, D]`` or ``[B, T, Hq, D]``); see the kernels for the math."""
    q4 = q[:, None] if q.dim() == 3 else q
    if q4.stride(-1) != 1:
        q4 = q4.contiguous()
    if k_cache.stride(-1) != 1:
        k_cache = k_cache.contiguous()
    if v_cache.stride(-1) != 1:
        v_cache = v_cache.contiguous()
    batch, t_len, hq, d = q4.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    group = hq // hkv
    capacity = block_table.shape[1] * page
    device_index = q.device.index if q.device.type == "cuda" and q.device.index is not None else 0
    plan = decode_plan(batch, hkv, t_len * group, capacity, d, sm_count(device_index))
    o = empty(q.shape, dtype=q.dtype, device=q.device)  # not a view of a 4-D buffer: a custom op's output
    o_strides = o.stride()[:3] if q.dim() == 4 else (o.stride(0), 0, o.stride(1))
    direct = plan.n_splits == 1
    if direct:
        o_part = lse_part = o  # unused
    else:
        o_part = empty((batch, t_len * hq, plan.n_splits, d), dtype=torch.float32, device=q.device)
        lse_part = empty((batch, t_len * hq, plan.n_splits), dtype=torch.float32, device=q.device)
    if softcap > 0:
        qk_scale, softcap_log2 = scale / softcap, softcap * 1.4426950408889634
    else:
        qk_scale, softcap_log2 = scale * 1.4426950408889634, 0.0
    launch(_decode_split_kernel, (plan.n_splits, batch * hkv), q4, k_cache, v_cache, block_table, context_lens,
           o, o_part, lse_part, *q4.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], block_table.stride(0),
           *o_strides, hkv, group, t_len, hq, d, page, plan.chunk, plan.n_splits, qk_scale, softcap_log2,
           num_warps=plan.num_warps, num_stages=plan.num_stages, SOFTCAP=softcap > 0, DIRECT=direct,
           BLOCK_H=plan.BLOCK_H, BLOCK_N=plan.BLOCK_N, BLOCK_D=plan.BLOCK_D, EVEN_D=d == plan.BLOCK_D,
           DOT_PREC=dot_precision(q.dtype))
    if not direct:
        launch(_decode_combine_kernel, (batch * t_len * hq,), o_part, lse_part, context_lens, o,
               *o_strides, t_len, hq, d, plan.chunk, plan.n_splits,
               num_warps=1 if interpreter_active() else 2, BLOCK_S=next_pow2(plan.n_splits), BLOCK_D=plan.BLOCK_D)
    return o
