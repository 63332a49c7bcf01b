"""Decode attention over a paged KV cache: split-KV ("flash decoding") with a log-sum-exp combine.

Stage 1, ``_decode_paged_kernel``: one program per (split, batch, KV head). The ``q_len × group`` query
rows that read this KV head (``group = Hq / Hkv`` heads × the new tokens) are packed into the M side of
one ``tl.dot`` tile (padded to ≥ 16 rows), so each K/V byte of the split is loaded once for all of them.
The split's keys are walked ``BLOCK_N`` at a time in two loops: the whole blocks every query row sees
(no masks at all) and a masked tail (the context's last partial block, the causal corner of ``q_len > 1``).
``PAGE`` (the page size) is a compile-time constant: with ``PAGE % BLOCK_N == 0`` a block lies in one page
(one scalar table read per block); otherwise each key's page comes from a gathered row index
``block_table[b, j // PAGE]`` (so 16-token pages still load 64–128 rows per iteration). The next block's
page index is read one iteration ahead and carried in the loop, so the K/V addresses do not depend on a
load of the same iteration: Triton's pipeliner then buffers K and V ``num_stages`` deep (with the table
read in the same iteration it treats K/V as indirect loads and keeps a single buffer, prefetch distance 1).
Output: the split's normalised partial ``o`` and base-2 ``lse`` in fp32 — or, with one split, ``o``.

Stage 2, ``_decode_combine_kernel``: per query row, ``o = Σ 2^(lse_s − M) o_s / Σ 2^(lse_s − M)``, the
splits read in a fixed order (deterministic), ``BLOCK_S`` at a time.

Plan (:func:`decode_plan`): the split count minimises a wave-quantisation model of the time,
``⌈programs / slots⌉ × (blocks per split + setup) + combine`` with ``slots = SMs × CTAs per SM`` — the
first H200 run tracked it (1.3-wave grids ran at 48–61% of copy, 1.9-wave ones at 82%). Planned from the
block table's capacity (``max_pages × page_size``), a static shape, so the launch is the same for every
call (CUDA graphs) and needs no host sync. :func:`forced_plan` overrides any knob (GPU sweeps, tests).
(The first kernel, with per-key table reads inside one masked loop, measured 1.16–1.27× slower on the H100
— ``benchmarks/results/h100-80gb-hbm3/sweeps/attn_decode_sweep.txt`` — and is gone.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from kernelworks.ops.attention.forward import dot_precision, scores, tile_mask, tile_mask_t
from kernelworks.runtime import replay
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, interpreter_dot_operand, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2

MIN_SPLIT_TOKENS = 256
"""Fewest keys per split on a GPU (unless the context is shorter): below this the combine's extra traffic
and the per-program setup cost more than the parallelism gains."""
MAX_SPLITS = 128
COMBINE_BLOCK_S = 32
"""Splits the combine kernel reads per step (it loops, so any split count fits its registers)."""
SETUP_BLOCKS = 2
"""Plan model: a program's fixed cost (q load, pipeline fill, epilogue), in KV-block iterations."""
COMBINE_BLOCKS = 4
"""Plan model: the combine launch (~3 µs on an H100/H200), in KV-block iterations (~0.7 µs each)."""
CTAS_PER_SM = {(64, 4, 3): 3, (64, 4, 4): 2, (64, 4, 2): 3, (64, 8, 3): 2, (64, 2, 3): 3, (32, 4, 4): 4,
               (128, 8, 3): 1, (128, 8, 2): 1, (128, 4, 3): 1}
"""CTAs of ``_decode_paged_kernel`` an sm_90 SM holds at head_dim 128, bf16, 16 packed rows, keyed by
``(BLOCK_N, num_warps, num_stages)`` — from the sm_90 AOT compile (``kw inspect``: 64/4/3 is 166 registers
and 70 KiB shared, K and V double-buffered; 32/4/4 122 and 53 KiB; 128/8/3 172 and 136 KiB); the plan
model's ``slots``. Unknown keys count 1."""


# ------------------------------------------------------------------------------------------ device helpers


@triton.jit
def _context_len(p_ctx, i_b, stride_ctx, capacity):
    """Sequence ``i_b``'s context length clamped into ``[0, capacity]`` (the block table's keys): whatever
    ``context_lens`` holds, no key past the table is visited (both kernels clamp alike, so the combine reads
    exactly the splits the first stage wrote)."""
    return tl.minimum(tl.maximum(tl.load(p_ctx + i_b.to(tl.int64) * stride_ctx), 0), capacity)


@triton.jit
def _block_pages(p_btb, n, n_table, stride_btp, o_nb, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Page indices (as the table holds them) for keys ``[n, n + BLOCK_N)``: a scalar when a block lies in
    one page (``PAGE % BLOCK_N == 0`` and ``n`` a multiple of BLOCK_N), else one per key. Entries past the
    table read 0 (the prefetch of the block after the last; never dereferenced)."""
    # one return after a constexpr if/else: triton 3.6 refuses an early return in a constexpr branch
    # when compiling (the interpreter accepts it)
    if PAGE % BLOCK_N == 0:
        i_pg = n // PAGE
        b_pg = tl.load(p_btb + i_pg.to(tl.int64) * stride_btp, mask=i_pg < n_table, other=0)
    else:
        o_pg = (n + o_nb) // PAGE
        b_pg = tl.load(p_btb + o_pg.to(tl.int64) * stride_btp, mask=o_pg < n_table, other=0)
    return b_pg


@triton.jit
def _block_rows(b_pg, n, o_nb, n_pages, stride_p, stride_s, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """int64 element offsets of the rows of keys ``[n, n + BLOCK_N)`` in a cache ``[n_pages, PAGE, H, D]``.
    A page index outside the pool is read as one clamped into it: a safe address whatever the table holds
    (:func:`_skip_keys` drops those keys' scores)."""
    b_pg = tl.minimum(tl.maximum(b_pg, 0), n_pages - 1)
    if PAGE % BLOCK_N == 0:
        o_row = b_pg.to(tl.int64) * stride_p + ((n % PAGE + o_nb) * stride_s).to(tl.int64)
    else:
        o_row = b_pg.to(tl.int64) * stride_p + (((n + o_nb) % PAGE) * stride_s).to(tl.int64)
    return o_row


@triton.jit
def _skip_keys(b_s, b_pg, n_pages, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Scores ``[R, BLOCK_N]`` with the keys on a page outside ``[0, n_pages)`` at -inf (skipped)."""
    m_pg = (b_pg >= 0) & (b_pg < n_pages)
    # a constexpr condition: one side is compiled (a scalar flag, or one per key)
    return tl.where(m_pg if PAGE % BLOCK_N == 0 else m_pg[None, :], b_s, float("-inf"))


@triton.jit
def _decode_paged_kernel(p_q, p_k, p_v, p_bt, p_ctx, p_o, p_op, p_lp,
                         stride_qb, stride_qt, stride_qh, stride_kp, stride_ks, stride_kh,
                         stride_vp, stride_vs, stride_vh, stride_bt, stride_btp, stride_ctx, stride_ob, stride_ot,
                         stride_oh, n_kv_heads, group, q_len, n_heads, head_dim, n_table, n_pages, capacity, chunk,
                         n_splits, qk_scale, softcap_log2, SOFTCAP: tl.constexpr, DIRECT: tl.constexpr,
                         PAGE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                         EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr):
    """Partial attention of split ``s`` (keys ``[s·chunk, min((s+1)·chunk, ctx))``, ``chunk`` a multiple
    of BLOCK_N) for the query rows ``r = t·group + hh`` (token t, head ``g·group + hh``) of (batch b, KV
    head g): ``o = Σ_j 2^(s₂ⱼ − m) v_j / Σ_j 2^(s₂ⱼ − m)``, ``s₂ = log2(e) · scale · q·k_j`` (soft-capped
    with SOFTCAP).

    q ``[B, T, Hq, D]``; caches ``[n_pages, PAGE, Hkv, D]``; block table int32 ``[B, n_table]``; ctx int32
    ``[B]`` (both any strides); token t sits at position ``ctx − T + t`` and sees keys ``j ≤ ctx − T + t``.
    Index values are bounded here: ctx clamped to ``[0, capacity]`` (at most ``n_table · PAGE``: the paged
    cache's keys, or a dense cache's length), keys on a page outside ``[0, n_pages)`` skipped (see
    :func:`_block_pages`).
    DIRECT (one split): o ``[B, T, Hq, D]`` in q's dtype. Else op fp32 ``[B, T·Hq, n_splits, D]`` (the
    split's normalised output) and lp fp32 ``[B, T·Hq, n_splits]`` (its base-2 lse; -inf: saw no key).
    Grid ``(n_splits, B · Hkv)``.
    """
    i_s = tl.program_id(0)
    i_bg = tl.program_id(1)
    i_b = i_bg // n_kv_heads
    i_g = i_bg % n_kv_heads
    ctx = _context_len(p_ctx, i_b, stride_ctx, capacity)
    start = i_s * chunk  # noqa: KW007 - a token index within one sequence (context lengths are int32)
    if start >= ctx and not DIRECT:  # split past this sequence's context: the combine skips it
        return
    end = tl.minimum(start + chunk, ctx)
    # keys j < ctx − T + 1 are visible to every row: whole blocks of them need no mask
    n_full = start + tl.maximum(tl.minimum(end, ctx - q_len + 1) - start, 0) // BLOCK_N * BLOCK_N

    o_r = tl.arange(0, BLOCK_H)
    m_r = o_r < q_len * group
    o_t = o_r // group
    o_h = i_g * group + o_r % group  # noqa: KW007 - a head index
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    m_q = tile_mask(m_r, m_d, EVEN_D)
    # padded rows (r ≥ T·group) load q = 0: finite scores, never stored
    b_q = tl.load(p_q + i_b.to(tl.int64) * stride_qb + o_t[:, None] * stride_qt + o_h[:, None] * stride_qh
                  + o_d[None, :], mask=m_q, other=0.0)
    b_pos = ctx - q_len + o_t  # each row's own position: keys after it are masked (q_len > 1)

    b_m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([BLOCK_H], dtype=tl.float32)
    b_acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    p_btb = p_bt + i_b.to(tl.int64) * stride_bt
    p_kh = p_k + i_g.to(tl.int64) * stride_kh
    p_vh = p_v + i_g.to(tl.int64) * stride_vh
    o_nb = tl.arange(0, BLOCK_N)

    b_pg = _block_pages(p_btb, start, n_table, stride_btp, o_nb, PAGE, BLOCK_N)
    for n in range(start, n_full, BLOCK_N):
        o_rk = _block_rows(b_pg, n, o_nb, n_pages, stride_kp, stride_ks, PAGE, BLOCK_N)
        o_rv = _block_rows(b_pg, n, o_nb, n_pages, stride_vp, stride_vs, PAGE, BLOCK_N)
        b_pg_cur = b_pg
        b_pg = _block_pages(p_btb, n + BLOCK_N, n_table, stride_btp, o_nb, PAGE, BLOCK_N)  # next block's, carried
        if EVEN_D:
            b_kt = tl.load(p_kh + o_rk[None, :] + o_d[:, None])
        else:
            b_kt = tl.load(p_kh + o_rk[None, :] + o_d[:, None], mask=m_d[:, None], other=0.0)
        b_s, _ = scores(tl.dot(b_q, b_kt, input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        b_s = _skip_keys(b_s, b_pg_cur, n_pages, PAGE, BLOCK_N)
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        # -inf only while a row has seen nothing but skipped pages (a bad table): exp2(-inf - -inf) is NaN
        b_m_use = tl.where(b_m_new == float("-inf"), 0.0, b_m_new)
        b_p = tl.exp2(b_s - b_m_use[:, None])
        b_alpha = tl.exp2(b_m - b_m_use)
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        if EVEN_D:
            b_v = tl.load(p_vh + o_rv[:, None] + o_d[None, :])
        else:
            b_v = tl.load(p_vh + o_rv[:, None] + o_d[None, :], mask=m_d[None, :], other=0.0)
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v, input_precision=DOT_PREC)
        b_m = b_m_new

    # the tail: the context's last partial block and the causal corner of q_len > 1 (per-key masks); not
    # pipelined (usually one iteration: its buffers would only take shared memory from the main loop's)
    for n in tl.range(n_full, end, BLOCK_N, num_stages=1):
        o_n = n + o_nb
        b_page = tl.load(p_btb + (o_n // PAGE).to(tl.int64) * stride_btp, mask=o_n < end, other=0)
        m_n = (o_n < end) & (b_page >= 0) & (b_page < n_pages)  # keys on a page outside the pool: skipped
        b_page = b_page.to(tl.int64)
        o_slot = (o_n % PAGE).to(tl.int64)
        b_kt = tl.load(p_kh + b_page[None, :] * stride_kp + o_slot[None, :] * stride_ks + o_d[:, None],
                       mask=tile_mask_t(m_n, m_d, EVEN_D), other=0.0)
        b_s, _ = scores(tl.dot(b_q, b_kt, input_precision=DOT_PREC), qk_scale, softcap_log2, SOFTCAP)
        b_s = tl.where(m_n[None, :] & (o_n[None, :] <= b_pos[:, None]), b_s, float("-inf"))
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        b_m_use = tl.where(b_m_new == float("-inf"), 0.0, b_m_new)  # a row that has seen nothing yet
        b_p = tl.exp2(b_s - b_m_use[:, None])
        b_alpha = tl.exp2(b_m - b_m_use)
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        b_v = tl.load(p_vh + b_page[:, None] * stride_vp + o_slot[:, None] * stride_vs + o_d[None, :],
                      mask=tile_mask(m_n, m_d, EVEN_D), other=0.0)
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
def _decode_combine_kernel(p_op, p_lp, p_ctx, p_o, stride_ctx, stride_ob, stride_ot, stride_oh, q_len, n_heads,
                           head_dim, capacity, chunk, n_splits, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """``o[b, t, h] = Σ_s w_s o_s / Σ_s w_s`` with ``w_s = 2^(lse_s − max lse)`` over the splits that hold
    keys (``s·chunk < ctx``), read BLOCK_S at a time in split order (deterministic); 0 when none saw a
    key. Shapes as in ``_decode_paged_kernel``. Grid ``(B · T · Hq,)``."""
    i_row = tl.program_id(0)
    i_b = i_row // (q_len * n_heads)
    i_t = (i_row // n_heads) % q_len
    i_h = i_row % n_heads
    ctx = _context_len(p_ctx, i_b, stride_ctx, capacity)
    n_live = tl.minimum((ctx + chunk - 1) // chunk, n_splits)
    o_sb = tl.arange(0, BLOCK_S)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < head_dim
    o_base = i_row.to(tl.int64) * n_splits
    b_mx = tl.full([BLOCK_S], float("-inf"), dtype=tl.float32)
    for s in range(0, n_live, BLOCK_S):
        o_s = s + o_sb
        b_mx = tl.maximum(b_mx, tl.load(p_lp + o_base + o_s, mask=o_s < n_live, other=float("-inf")))
    b_max = tl.max(b_mx, axis=0)
    b_max = tl.where(b_max == float("-inf"), 0.0, b_max)
    b_wsum = tl.zeros([BLOCK_S], dtype=tl.float32)
    b_acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(0, n_live, BLOCK_S):
        o_s = s + o_sb
        m_s = o_s < n_live
        b_w = tl.exp2(tl.load(p_lp + o_base + o_s, mask=m_s, other=float("-inf")) - b_max)
        b_os = tl.load(p_op + (o_base + o_s[:, None]) * head_dim + o_d[None, :], mask=m_s[:, None] & m_d[None, :],
                       other=0.0)
        b_wsum += b_w
        b_acc += tl.sum(b_os * b_w[:, None], axis=0)
    b_sum = tl.sum(b_wsum, axis=0)
    b_o = b_acc / tl.where(b_sum > 0.0, b_sum, 1.0)
    p_row = p_o + i_b.to(tl.int64) * stride_ob + i_t.to(tl.int64) * stride_ot + i_h.to(tl.int64) * stride_oh
    tl.store(p_row + o_d, b_o.to(p_o.dtype.element_ty), mask=m_d)


# ------------------------------------------------------------------------------------------------ plan


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


_FORCED: ContextVar[dict | None] = ContextVar("kernelworks_decode_forced_plan", default=None)
_KNOBS = ("splits", "BLOCK_N", "num_warps", "num_stages")


@contextmanager
def forced_plan(**knobs: object) -> Iterator[None]:
    """Within the block, ``decode_attention`` launches take these knobs instead of :func:`decode_plan`'s
    choice: ``splits`` (a request: rounded so each split holds whole BLOCK_N blocks), ``BLOCK_N`` (a power
    of two ≥ 16), ``num_warps``, ``num_stages``. Unset knobs keep the default plan's values. For GPU
    sweeps (``benchmarks/sweeps/decode_attention_plan.py``) and tests.

    Example::

        with forced_plan(splits=48, BLOCK_N=128, num_warps=8, num_stages=3):
            o = decode_attention(q, k_cache, v_cache, block_table, context_lens)
    """
    bad = set(knobs) - set(_KNOBS)
    if bad:
        raise ValueError(f"forced_plan: unknown knobs {sorted(bad)}; expected some of {_KNOBS}")
    block_n = knobs.get("BLOCK_N")
    if block_n is not None and (not isinstance(block_n, int) or block_n < 16 or block_n & (block_n - 1)):
        raise ValueError(f"forced_plan: BLOCK_N must be a power of two >= 16, got {block_n!r}")
    token = _FORCED.set(dict(knobs))
    try:
        with replay.paused():  # replays recorded outside would not read the forced plan
            yield
    finally:
        _FORCED.reset(token)


def _split(capacity: int, splits: int, block_n: int) -> tuple[int, int]:
    """``(n_splits, chunk)``: about ``splits`` splits of whole BLOCK_N blocks covering ``capacity`` keys."""
    splits = max(1, min(splits, cdiv(capacity, block_n)))
    chunk = cdiv(cdiv(max(capacity, 1), splits), block_n) * block_n
    return cdiv(max(capacity, 1), chunk), chunk


def _best_splits(base: int, blocks: int, slots: int, max_splits: int) -> int:
    """The split count minimising ``⌈base·s / slots⌉ · (⌈blocks / s⌉ + SETUP) + COMBINE·[s > 1]`` (time in
    KV-block iterations of one program, programs latency-bound); the fewest splits on a tie."""
    best, best_cost = 1, None
    for s in range(1, max(1, min(max_splits, blocks)) + 1):
        per = cdiv(blocks, s)
        s_eff = cdiv(blocks, per)
        cost = cdiv(base * s_eff, slots) * (per + SETUP_BLOCKS) + (COMBINE_BLOCKS if s_eff > 1 else 0)
        if best_cost is None or cost < best_cost:
            best, best_cost = s_eff, cost
    return best


@cached_plan
def decode_plan(batch: int, n_kv_heads: int, rows: int, capacity: int, head_dim: int, sms: int,
                itemsize: int = 2) -> DecodePlan:
    """The default plan for ``batch × n_kv_heads`` (batch, KV head) pairs over a block table of
    ``capacity`` keys; ``rows`` = q_len × group, packed into BLOCK_H ≥ 16 rows.

    GPU: BLOCK_N 64, 4 warps, 3 stages (K and V buffered 3 deep: 2 CTAs an SM at head_dim 128); the split
    count from :func:`_best_splits` with splits of ≥ MIN_SPLIT_TOKENS keys. Interpreter: 16-key blocks,
    splits of 32 keys and ~4 programs an SM's worth of splits, so tiny cases still take several splits and
    the combine."""
    block_h = max(16, next_pow2(rows))
    block_d = max(16, next_pow2(head_dim))
    base = batch * n_kv_heads
    if interpreter_active():
        block_n, warps, stages = 16, 1, 1
        want = max(1, min(cdiv(4 * sms, base), MAX_SPLITS, cdiv(capacity, 32)))
        splits, chunk = _split(capacity, want, block_n)
        return DecodePlan(splits, chunk, block_h, block_n, block_d, warps, stages)
    block_n, warps, stages = 64, 4, 3
    if block_d > 128 or itemsize > 2:  # d 256 / fp32: half the keys per block keeps the tiles' registers
        block_n = 32
    ctas = CTAS_PER_SM.get((block_n, warps, stages), 1) if block_d <= 128 and itemsize <= 2 else 1
    blocks = cdiv(max(capacity, 1), block_n)
    max_splits = max(1, min(MAX_SPLITS, capacity // MIN_SPLIT_TOKENS))
    want = _best_splits(base, blocks, sms * ctas, max_splits)
    splits, chunk = _split(capacity, want, block_n)
    return DecodePlan(splits, chunk, block_h, block_n, block_d, warps, stages)


def resolve_plan(batch: int, n_kv_heads: int, rows: int, capacity: int, head_dim: int, sms: int,
                 itemsize: int) -> DecodePlan:
    """:func:`decode_plan`'s choice with any :func:`forced_plan` knobs applied."""
    plan = decode_plan(batch, n_kv_heads, rows, capacity, head_dim, sms, itemsize)
    forced = _FORCED.get()
    if not forced:
        return plan
    block_n = forced.get("BLOCK_N") or plan.BLOCK_N
    splits, chunk = _split(capacity, forced.get("splits") or plan.n_splits, block_n)
    return replace(plan, n_splits=splits, chunk=chunk, BLOCK_N=block_n,
                   num_warps=forced.get("num_warps") or plan.num_warps,
                   num_stages=forced.get("num_stages") or plan.num_stages)


def _operand(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the kernels read it: head_dim unit-stride (else copied), fp32 for ``tl.dot`` under the
    interpreter. Strides are taken after this (a copy has its own)."""
    t = interpreter_dot_operand(t)
    return t if t.stride(-1) == 1 else t.contiguous()


def _decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_strides: tuple[int, ...], page: int,
            n_pages: int, capacity: int, block_table: torch.Tensor, context_lens: torch.Tensor, scale: float,
            softcap: float) -> torch.Tensor:
    """Both stages over a cache given by strides: ``cache_strides`` are the (page, slot, head) strides of
    ``k`` then of ``v`` (as :func:`_operand` made them); pages of ``page`` keys, ``n_pages`` of them, at most
    ``capacity`` keys a sequence. ``o`` shaped like ``q``."""
    o = empty(q.shape, dtype=q.dtype, device=q.device)  # not a view of a 4-D buffer: a custom op's output
    q4 = q[:, None] if q.dim() == 3 else q
    q4 = _operand(q4)
    batch, t_len, hq, d = q4.shape
    hkv = k.shape[2]
    group = hq // hkv
    device_index = q.device.index if q.device.type == "cuda" and q.device.index is not None else 0
    plan = resolve_plan(batch, hkv, t_len * group, capacity, d, sm_count(device_index), q.element_size())
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
    common = (*q4.stride()[:3], *cache_strides, *block_table.stride(), context_lens.stride(0), *o_strides, hkv,
              group, t_len, hq, d)
    consts = dict(num_warps=plan.num_warps, num_stages=plan.num_stages, SOFTCAP=softcap > 0, DIRECT=direct,
                  BLOCK_H=plan.BLOCK_H, BLOCK_N=plan.BLOCK_N, BLOCK_D=plan.BLOCK_D, EVEN_D=d == plan.BLOCK_D,
                  DOT_PREC=dot_precision(q4.dtype))
    grid = (plan.n_splits, batch * hkv)
    tensors = (q4, k, v, block_table, context_lens, o, o_part, lse_part)
    launch(_decode_paged_kernel, grid, *tensors, *common, block_table.shape[1], n_pages, capacity, plan.chunk,
           plan.n_splits, qk_scale, softcap_log2, PAGE=page, **consts)
    if not direct:
        launch(_decode_combine_kernel, (batch * t_len * hq,), o_part, lse_part, context_lens, o,
               context_lens.stride(0), *o_strides, t_len, hq, d, capacity, plan.chunk, plan.n_splits,
               num_warps=1 if interpreter_active() else 2, BLOCK_S=min(COMBINE_BLOCK_S, next_pow2(plan.n_splits)),
               BLOCK_D=plan.BLOCK_D)
    return o


def decode_fwd(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
               context_lens: torch.Tensor, scale: float, softcap: float) -> torch.Tensor:
    """``o`` shaped like ``q`` (``[B, Hq, D]`` or ``[B, T, Hq, D]``, q's dtype) over a paged cache ``[n_pages,
    page, Hkv, D]``; see the kernels for the math. ``block_table`` and ``context_lens`` may be any strided
    views (stride 0 included): the kernels take their strides and bound their values."""
    k_cache, v_cache = _operand(k_cache), _operand(v_cache)
    n_pages, page = k_cache.shape[0], k_cache.shape[1]
    return _decode(q, k_cache, v_cache, (*k_cache.stride()[:3], *v_cache.stride()[:3]), page, n_pages,
                   block_table.shape[1] * page, block_table, context_lens, scale, softcap)


_DENSE_INDICES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
"""``(device, batch) → (block table [batch, 1] = arange, context lengths [batch] = int32 max, stride 0)``:
constants a dense cache's decode reads, made once per batch size and device (bounded: a few sizes)."""


def _dense_indices(batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (device, batch)
    hit = _DENSE_INDICES.get(key)
    if hit is None:
        if len(_DENSE_INDICES) >= 64:
            _DENSE_INDICES.clear()
        table = torch.arange(batch, dtype=torch.int32, device=device)[:, None]
        lens = torch.full((1,), 2**31 - 1, dtype=torch.int32, device=device).expand(batch)
        hit = _DENSE_INDICES[key] = (table, lens)
    return hit


def dense_decode_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                     softcap: float) -> torch.Tensor:
    """Decode attention over a dense cache: q ``[B, T, Hq, D]`` (T ≤ a few new tokens, causal among
    themselves, the last at key ``S − 1``), k/v ``[B, S, Hkv, D]`` any strides (Hugging Face's ``[B, Hkv, S,
    D]`` cache transposed as a view) → o ``[B, T, Hq, D]``: ``flash_attention(q, k, v, causal=True)``
    computed by the split-KV kernel.

    The paged kernel reads the cache as ``B`` pages, page ``b`` being sequence ``b`` (a ``[B, 1]`` table of
    ``arange(B)``), with the page size a power of two ≥ S: a compile-time constant that changes only when a
    growing cache doubles, so decoding token after token reuses a handful of compiled kernels. Every
    sequence holds ``S`` keys (``capacity``); the context lengths are int32's maximum, clamped to it."""
    k, v = _operand(k), _operand(v)
    batch, seq = k.shape[0], k.shape[1]
    table, lens = _dense_indices(batch, q.device)
    return _decode(q, k, v, (*k.stride()[:3], *v.stride()[:3]), max(64, next_pow2(seq)), batch, seq, table, lens,
                   scale, softcap)
