"""Triton kernels of the loss family: cross-entropy with its gradient in one kernel, the gradient scaling
pass, and the target statistics.

Per row ``r`` of logits ``x [N, V]`` with target ``t = target[r]`` (c = softcap, ε = label_smoothing,
ζ = z_loss, s_r = the row's scale: ``1/n_valid`` for the mean, 1 for sum and none):

    x'_j  = c·tanh(x_j / c)                 (softcap; x' = x without it)
    m     = max_j x'_j,   S = Σ_j exp(x'_j − m),   lse = m + log S,   p_j = exp(x'_j − lse)
    loss  = s_r · [(1 − ε)(m − x'_t) + ε(m − mean_j x'_j) + log S + ζ·lse²]
    dx_j  = s_r · [p_j(1 + 2ζ·lse) − ε/V − (1 − ε)·[j = t]] · (1 − (x'_j/c)²)

Rows whose target is ``ignore_index`` have loss 0 and gradient 0. ``loss = lse − (1 − ε)x'_t − ε·mean x'``
is evaluated as ``(1 − ε)(m − x'_t) + ε(m − mean x') + log S``: with logits near ±1e4, ``lse`` alone carries
an fp32 rounding of ~1e-3 that the differences do not.

``_cross_entropy_fwd_kernel`` streams each row once for the online max/sum (``online_max_sum``, shared with
softmax) and, when the gradient is wanted, sweeps it again writing ``dx`` (into its own buffer or over the
logits), so loss + gradient cost 2 reads + 1 write of the logits; without the gradient, 1 read. Rows of at
most :data:`ONE_TILE_MAX_COLS` are held whole in registers (1 read + 1 write). The backward of the op is
then ``dx · grad_output`` (``_cross_entropy_bwd_kernel``), in place in eager mode, and skipped outright when
``grad_output`` is one value of exactly 1 (a plain ``loss.backward()``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops._math import LOG2E, tanh
from kernelworks.ops.softmax import online_max_sum
from kernelworks.runtime.alloc import arrival_counters, empty
from kernelworks.runtime.device import interpreter_active
from kernelworks.runtime.launch import MAX_FUSED_ROW_BYTES, cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.plans import ForcedPlan

ONE_TILE_MAX_COLS = MAX_FUSED_ROW_BYTES // 4
"""Longest row (32768: Llama-2/Mistral vocabularies) the kernel keeps whole in registers as fp32, reading
the logits once; softmax measured its one-pass kernel at 92% of copy bandwidth at this length on an H100,
spilling past it. Longer rows are streamed in tiles and read twice."""

# Looped tiles (columns per step) and warps: 16 fp32 values a thread (16-byte loads). Untuned starting
# points from softmax's measured looped kernels (8192/16 best to 65536 columns, 16384 past it; 32 warps
# won its read-and-write backward sweep); a GPU sweep should confirm them for this kernel.
LOOP_TILE, LOOP_WARPS = 8192, 16
LOOP_TILE_LONG, LOOP_WARPS_LONG = 16384, 32
ONE_TILE_WARPS = 32
"""Measured on the H100 (the sweep script since replaced by ``kw tune cross_entropy``, 8192 × 32000 bf16,
loss + gradient): one tile on 8/16/32 warps 494/460/438 µs; looped 8192/16 449 µs. At 128256 columns the
looped settings lie within 5% of each other (16384/32 best, 1934 µs: 3 passes of the logits at 3.0 TB/s)."""

FORCED_PLAN: ForcedPlan[dict] = ForcedPlan("cross_entropy")
"""A plan (``TILE``, ``ONE_TILE``, ``num_warps``) forced on :func:`cross_entropy_fwd` (``kw tune``'s hook)."""

CONFIGS = [{"TILE": 32768, "ONE_TILE": True, "num_warps": w} for w in (8, 16, 32)] + [
    {"TILE": t, "ONE_TILE": False, "num_warps": w} for t, w in ((4096, 8), (8192, 16), (8192, 32), (16384, 16),
                                                                (16384, 32))]
"""``kw tune cross_entropy``'s space: one 32768-column tile (rows that fit) or a looped tile, with warps."""

SCALE_BLOCK, SCALE_WARPS, SCALE_PROGRAMS = 2048, 4, 2112
"""The scaling pass is elementwise: the activation family's sweep found 2048-element tiles with 4 warps
within 1% of the best on an H100. 2112 programs = 16 resident 4-warp programs × 132 SMs: one wave, each
walking a contiguous run of tiles, so skipping the pass (grad_output 1) launches only that many."""

STATS_BLOCK, STATS_WARPS = 2048, 8

SELF_COUNT_MAX_ROWS = 1024
"""Batches of at most this many rows take the mean's scale by counting the targets in every program (8 KB
each, int64) instead of from a statistics launch first: one launch less, which is what a small batch's call
costs (its host time); past it the reads would cost device time."""

REDUCE_BLOCK = tl.constexpr(1024)
"""Rows the last program of a reducing launch sums per step (:func:`_arrive_and_reduce`): 8 steps at 8192
tokens, whatever the row's own tile (a 2-class row has 2 columns)."""

# Under Triton's interpreter (CPU tests, `kw check` without a GPU), rows past 8 columns take the looped
# path with 32-column tiles (256 past 256 columns), so vocabularies of 33 or 1000 run the loop and its
# masked tail; speed is meaningless there.
_INTERPRETER_ONE_TILE_MAX_COLS = 8
_INTERPRETER_TILE, _INTERPRETER_TILE_LONG = 32, 256
_INTERPRETER_STATS_BLOCK = 32
_INTERPRETER_SCALE_BLOCK, _INTERPRETER_SCALE_PROGRAMS = 64, 4


@cached_plan
def plan(n_cols: int, softcap: bool = False) -> dict[str, int | bool]:
    """Launch options of ``_cross_entropy_fwd_kernel`` for rows of ``n_cols`` (cached per place kernels run).

    Soft-capping halves the one-tile limit and takes the 8192-column loop: its tanh's temporaries over a
    32768-column row spill (392 B a thread at 16 warps, 184 B at 32, compiled for sm_90; none at 16384).
    """
    interpreted = interpreter_active()
    if interpreted:
        if n_cols <= _INTERPRETER_ONE_TILE_MAX_COLS:
            return {"TILE": next_pow2(n_cols), "ONE_TILE": True, "num_warps": 1}
        tile = _INTERPRETER_TILE if n_cols <= 256 else _INTERPRETER_TILE_LONG
        return {"TILE": tile, "ONE_TILE": False, "num_warps": 1}
    if n_cols <= (ONE_TILE_MAX_COLS // 2 if softcap else ONE_TILE_MAX_COLS):
        tile = next_pow2(n_cols)
        return {"TILE": tile, "ONE_TILE": True, "num_warps": max(1, min(ONE_TILE_WARPS, tile // 512))}
    if n_cols <= 65536 or softcap:
        return {"TILE": LOOP_TILE, "ONE_TILE": False, "num_warps": LOOP_WARPS}
    return {"TILE": LOOP_TILE_LONG, "ONE_TILE": False, "num_warps": LOOP_WARPS_LONG}


# ------------------------------------------------------------------------------------------------ kernels


@triton.jit
def _softcap(b_x, softcap, inv_softcap):
    """c·tanh(x/c), the Gemma-2 soft cap (``inv_softcap`` = 1/c: a multiply, not a division)."""
    return softcap * tanh(b_x * inv_softcap)


@triton.jit
def _row_grad(b_xc, o_n, b_t, b_m, b_log2_s, b_pc, b_c0, b_c1, inv_softcap, SOFTCAP: tl.constexpr):
    """dx for one tile of capped logits ``b_xc`` (x' = c·tanh(x/c), or x) at columns ``o_n`` (fp32):
    ``(p_j·pc − c0 − c1·[j = t]) · (1 − tanh²)``, p_j = exp2((x'_j − m)·log2e − log2 S), tanh = x'/c.
    The target's ``−c1`` is folded in fp32 before the store's rounding (p_t − 1 cancels as p_t nears 1)."""
    b_p = tl.exp2((b_xc - b_m) * LOG2E - b_log2_s)
    b_dx = b_p * b_pc - b_c0 - tl.where(o_n == b_t, b_c1, 0.0)
    if SOFTCAP:
        b_th = b_xc * inv_softcap
        b_dx = b_dx * ((1.0 - b_th) * (1.0 + b_th))
    return b_dx


@triton.jit
def _mean_scale(p_target, stride_t, n_rows, ignore_index):
    """``1/max(n, 1)``, n the targets of ``target [n_rows]`` that are not ``ignore_index``: the mean's scale,
    by the very expression :func:`_target_stats_kernel` uses, so both give the same bits."""
    o_b = tl.arange(0, REDUCE_BLOCK)
    b_n = tl.zeros([REDUCE_BLOCK], dtype=tl.int32)
    for i_r in range(0, n_rows, REDUCE_BLOCK):
        o_r = i_r + o_b
        m_r = o_r < n_rows  # masked by m_r, not by `other=`: see _target_stats_kernel
        b_tr = tl.load(p_target + o_r.to(tl.int64) * stride_t, mask=m_r, other=0).to(tl.int64)
        b_n += (m_r & (b_tr != ignore_index)).to(tl.int32)
    return 1.0 / tl.maximum(tl.sum(b_n, axis=0).to(tl.float32), 1.0)


@triton.jit
def _arrive_and_reduce(p_loss, p_target, stride_t, p_total, p_count, n_rows, ignore_index,
                       REDUCE: tl.constexpr):
    """The reduction over rows, by the program that finishes last (no separate ``sum`` launch): every program
    counts itself in on ``p_count`` once its row's loss is stored; the one that sees ``n_rows − 1`` before
    it reads the stored losses back (``.cg``: from L2, never a stale L1 line) in row order, writes their sum
    to ``p_total`` and re-arms the counter. ``"mean"`` (rows stored unscaled): it first scales each stored
    row by :func:`_mean_scale` — the very products, rounded, and then the very sum of a launch whose rows
    were scaled before they were stored, so the two agree bit for bit. The order is fixed, so the result is
    bit-reproducible whichever program arrives last."""
    tl.debug_barrier()  # the count's release must follow every thread's store of the row's loss
    n_prev = tl.atomic_add(p_count, 1, sem="acq_rel", scope="gpu")
    if n_prev == n_rows - 1:
        o_b = tl.arange(0, REDUCE_BLOCK)
        if REDUCE == "mean":
            # Scale the rows where they are stored, as a scaled launch does: `sum += row * s` would compile
            # to an FMA, which does not round the product, and so could differ from that launch in the last bit
            # past one row a lane.
            b_scale = _mean_scale(p_target, stride_t, n_rows, ignore_index)
            for i_r in range(0, n_rows, REDUCE_BLOCK):
                o_r = i_r + o_b
                m_r = o_r < n_rows
                b_row = tl.load(p_loss + o_r, mask=m_r, other=0.0, cache_modifier=".cg")
                tl.store(p_loss + o_r, b_row * b_scale, mask=m_r)
        b_sum = tl.zeros([REDUCE_BLOCK], dtype=tl.float32)
        for i_r in range(0, n_rows, REDUCE_BLOCK):
            o_r = i_r + o_b  # each thread reads back only what it stored above, so no barrier between
            b_sum += tl.load(p_loss + o_r, mask=o_r < n_rows, other=0.0, cache_modifier=".cg")
        tl.store(p_total, tl.sum(b_sum, axis=0))
        tl.store(p_count, 0)  # re-armed for the next launch (kernel boundaries order it)


@triton.jit
def _cross_entropy_fwd_kernel(p_x, p_dx, p_target, p_loss, p_scale, p_total, p_count, stride_x, stride_dx,
                              stride_t, stride_scale, n_rows, n_cols, ignore_index, label_smoothing, z_loss, softcap,
                              inv_softcap, TILE: tl.constexpr, ONE_TILE: tl.constexpr, HAS_GRAD: tl.constexpr,
                              SMOOTH: tl.constexpr, SOFTCAP: tl.constexpr, SCALE: tl.constexpr,
                              REDUCE: tl.constexpr):
    """Loss and gradient of one row per program (formulas in the module docstring).

    x: [N, V] logits, unit column stride, row stride ``stride_x``; dx: [N, V] (may be ``x`` itself: every
    tile is read before it is overwritten, by the same program); target: [N] int32/int64; loss: [N] fp32,
    the row's loss times its scale s_r: SCALE ``"rows"`` reads it at ``p_scale + r·stride_scale`` (stride 0:
    one scalar), ``"mean"`` counts it (:func:`_mean_scale`: each program reads every target, for small
    batches, where a statistics launch would cost more host time than the reads), ``"one"`` takes 1.
    REDUCE ``"sum"`` / ``"mean"``: the last program to finish also writes the rows' sum / mean to ``p_total``
    (fp32 scalar; :func:`_arrive_and_reduce`, ``p_count`` its zeroed counter).
    ONE_TILE: TILE ≥ V, the row stays in registers between the statistics and the gradient. Otherwise pass 1
    streams the row in TILE columns for m and S (asking L2 to keep it), pass 2 walks it backwards — the
    freshest tiles in L2 first — writing dx with streaming stores so the writes do not evict rows still to
    be re-read. An out-of-range target (not ``ignore_index``) gives a NaN loss and is never dereferenced.
    """
    i_r = tl.program_id(0).to(tl.int64)  # int64: row · stride passes 2^31 at 16k tokens × 256k vocab
    p_x += i_r * stride_x
    p_dx += i_r * stride_dx
    o_t = tl.arange(0, TILE)
    b_t = tl.load(p_target + i_r * stride_t).to(tl.int64)

    if b_t == ignore_index:  # no loss, zero gradient: write only, never read the row
        tl.store(p_loss + i_r, 0.0)
        if HAS_GRAD:
            for i_k in range(0, n_cols, TILE):
                o_n = i_k + o_t
                tl.store(p_dx + o_n, tl.zeros([TILE], dtype=p_dx.dtype.element_ty), mask=o_n < n_cols)
        if REDUCE != "":
            _arrive_and_reduce(p_loss, p_target, stride_t, p_total, p_count, n_rows, ignore_index, REDUCE)
        return

    if SCALE == "rows":
        b_scale = tl.load(p_scale + i_r * stride_scale).to(tl.float32)
    elif SCALE == "mean":
        b_scale = _mean_scale(p_target, stride_t, n_rows, ignore_index)
    else:
        b_scale = 1.0
    b_valid = (b_t >= 0) & (b_t < n_cols)
    b_xt = tl.load(p_x + tl.where(b_valid, b_t, 0)).to(tl.float32)
    if SOFTCAP:
        b_xt = _softcap(b_xt, softcap, inv_softcap)
    b_xt = tl.where(b_valid, b_xt, float("nan"))

    # pass 1: the row's max m, sum S of exp(x' − m) and (label smoothing) Σ x'
    if ONE_TILE:
        m_t = o_t < n_cols
        b_xc = tl.load(p_x + o_t, mask=m_t, other=float("-inf")).to(tl.float32)
        if SOFTCAP:  # only the capped row stays live for the gradient: tanh = x'/c there
            b_xc = tl.where(m_t, _softcap(b_xc, softcap, inv_softcap), float("-inf"))
        b_m = tl.max(b_xc, axis=0)
        b_sum = tl.sum(tl.exp2((b_xc - b_m) * LOG2E), axis=0)
        if SMOOTH:
            b_xsum = tl.sum(tl.where(m_t, b_xc, 0.0), axis=0)
    else:
        b_m = tl.full([], float("-inf"), tl.float32)
        b_s = tl.zeros([TILE], dtype=tl.float32)
        if SMOOTH:
            b_xs = tl.zeros([TILE], dtype=tl.float32)
        for i_k in range(0, n_cols, TILE):
            o_n = i_k + o_t
            m_n = o_n < n_cols
            b_x = tl.load(p_x + o_n, mask=m_n, other=float("-inf"),
                          eviction_policy="evict_last").to(tl.float32)  # wanted again in pass 2
            if SOFTCAP:
                b_x = _softcap(b_x, softcap, inv_softcap)
                b_x = tl.where(m_n, b_x, float("-inf"))
            if SMOOTH:
                b_xs += tl.where(m_n, b_x, 0.0)
            b_m, b_s = online_max_sum(b_m, b_s, b_x)
        b_sum = tl.sum(b_s, axis=0)
        if SMOOTH:
            b_xsum = tl.sum(b_xs, axis=0)

    # A +inf logit makes the row's lse +inf, as in torch; S itself is then exp(inf − inf) = NaN, so log S is
    # taken as 0 there (the loss comes out +inf, or NaN where the target's own logit is +inf, as torch's).
    b_log_s = tl.where(b_m == float("inf"), 0.0, tl.log(b_sum))
    b_lse = b_m + b_log_s
    if SMOOTH:
        b_loss = (1.0 - label_smoothing) * (b_m - b_xt) + label_smoothing * (b_m - b_xsum / n_cols) + b_log_s
    else:
        b_loss = (b_m - b_xt) + b_log_s
    b_loss += tl.where(z_loss != 0.0, z_loss * b_lse * b_lse, 0.0)  # not 0·inf = NaN when lse is +inf
    tl.store(p_loss + i_r, b_loss * b_scale)

    if HAS_GRAD:
        b_log2_s = tl.log2(b_sum)
        b_pc = b_scale * (1.0 + 2.0 * z_loss * b_lse)  # softmax term, with the z-loss's 2ζ·lse·p
        b_c0 = b_scale * label_smoothing / n_cols      # the smoothing's uniform target
        b_c1 = b_scale * (1.0 - label_smoothing)       # the one-hot target
        if ONE_TILE:
            b_dx = _row_grad(b_xc, o_t, b_t, b_m, b_log2_s, b_pc, b_c0, b_c1, inv_softcap, SOFTCAP)
            tl.store(p_dx + o_t, b_dx.to(p_dx.dtype.element_ty), mask=o_t < n_cols)
        else:
            o_last = (n_cols - 1) // TILE * TILE  # first column of the last tile
            for i_k in range(0, n_cols, TILE):
                o_n = (o_last - i_k) + o_t
                m_n = o_n < n_cols
                b_x = tl.load(p_x + o_n, mask=m_n, other=0.0, eviction_policy="evict_first").to(tl.float32)
                if SOFTCAP:
                    b_x = _softcap(b_x, softcap, inv_softcap)
                b_dx = _row_grad(b_x, o_n, b_t, b_m, b_log2_s, b_pc, b_c0, b_c1, inv_softcap, SOFTCAP)
                tl.store(p_dx + o_n, b_dx.to(p_dx.dtype.element_ty), mask=m_n, cache_modifier=".cs")
    if REDUCE != "":
        _arrive_and_reduce(p_loss, p_target, stride_t, p_total, p_count, n_rows, ignore_index, REDUCE)


@triton.jit
def _cross_entropy_bwd_kernel(p_g, p_dx, p_out, stride_g, stride_dx, stride_out, n_rows, n_cols,
                              tiles_per_program, BLOCK_N: tl.constexpr, SKIP_ONES: tl.constexpr):
    """The backward's scaling pass: ``out[r, j] = g_r · dx[r, j]`` for dx, out: [n_rows, n_cols].

    The [n_rows, n_cols] grid of BLOCK_N-column tiles is cut into runs of ``tiles_per_program``
    consecutive (row-major, so contiguous) tiles, one run per program: a fixed, small number of programs
    whatever the size. ``g_r`` is at ``p_g + r·stride_g``; stride 0 is one scalar. SKIP_ONES (a scalar g,
    in place: ``p_out = p_dx``): when g is exactly 1 every program returns at once — a plain
    ``loss.backward()`` costs a launch of a few thousand empty programs, no traffic.
    """
    i_p = tl.program_id(0)
    if SKIP_ONES:  # noqa: SIM102 (a constexpr test, resolved at compile time, around a runtime one)
        if tl.load(p_g).to(tl.float32) == 1.0:
            return
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    o_b = tl.arange(0, BLOCK_N)
    i_first = i_p.to(tl.int64) * tiles_per_program  # tile indices (rows × column blocks) in int64
    i_end = tl.minimum(i_first + tiles_per_program, n_rows * n_blocks)
    for i_t in range(i_first, i_end):
        i_r = i_t // n_blocks  # int64 (from i_first): row · stride passes 2^31
        o_n = (i_t % n_blocks) * BLOCK_N + o_b
        m_n = o_n < n_cols
        b_g = tl.load(p_g + i_r * stride_g).to(tl.float32)
        b_dx = tl.load(p_dx + i_r * stride_dx + o_n, mask=m_n, other=0.0).to(tl.float32)
        tl.store(p_out + i_r * stride_out + o_n, (b_dx * b_g).to(p_out.dtype.element_ty), mask=m_n)


@triton.jit
def _target_stats_kernel(p_target, p_stats, n_rows, stride_t, n_cols, ignore_index,
                         MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """One program over target [n_rows]: ``stats = [n_valid, n_bad, scale]`` (fp32), where n_valid counts
    targets ≠ ignore_index, n_bad those outside [0, n_cols), and scale = 1/max(n_valid, 1) when MEAN, else 1.
    One program keeps the count deterministic; at 16k tokens it is 8 steps of BLOCK."""
    o_b = tl.arange(0, BLOCK)
    b_valid = tl.zeros([BLOCK], dtype=tl.int32)
    b_bad = tl.zeros([BLOCK], dtype=tl.int32)
    for i_b in range(0, n_rows, BLOCK):
        o_r = i_b + o_b
        m_r = o_r < n_rows
        # masked by m_r, not by `other=ignore_index`: an ignore_index past an int32 target's range would be
        # wrapped by the load and counted as a bad target
        b_t = tl.load(p_target + o_r.to(tl.int64) * stride_t, mask=m_r, other=0).to(tl.int64)
        b_ok = m_r & (b_t != ignore_index)
        b_valid += b_ok.to(tl.int32)
        b_bad += (b_ok & ((b_t < 0) | (b_t >= n_cols))).to(tl.int32)
    n_valid = tl.sum(b_valid, axis=0).to(tl.float32)
    b_scale = 1.0 / tl.maximum(n_valid, 1.0) if MEAN else 1.0  # all ignored: the mean is 0, not 0/0
    tl.store(p_stats, n_valid)
    tl.store(p_stats + 1, tl.sum(b_bad, axis=0).to(tl.float32))
    tl.store(p_stats + 2, b_scale)


# ---------------------------------------------------------------------------------------------- launchers


def target_stats(target: torch.Tensor, n_cols: int, ignore_index: int, *, mean: bool) -> torch.Tensor:
    """``[n_valid, n_bad, scale]`` (fp32, on the device; no sync) for a flat ``target [N]``."""
    stats = empty((3,), dtype=torch.float32, device=target.device)
    block = _INTERPRETER_STATS_BLOCK if interpreter_active() else STATS_BLOCK
    launch(_target_stats_kernel, (1,), target, stats, target.shape[0], target.stride(0), n_cols, ignore_index,
           MEAN=mean, BLOCK=block, num_warps=1 if interpreter_active() else STATS_WARPS)
    return stats


def cross_entropy_fwd(x: torch.Tensor, target: torch.Tensor, loss: torch.Tensor,
                      scale: torch.Tensor | str | None, dx: torch.Tensor | None, *, ignore_index: int,
                      label_smoothing: float, z_loss: float, softcap: float | None, total: torch.Tensor | None = None,
                      reduce: str = "") -> None:
    """Launch ``_cross_entropy_fwd_kernel`` on rows ``x [N, V]`` (unit column stride): writes ``loss [N]``
    (fp32, scaled; with ``reduce="mean"`` a scratch the launch reduces) and, when ``dx`` is given (``[N, V]``,
    unit column stride, may be ``x``), the gradient.
    ``scale``: a tensor of one element (one scale for all rows) or ``N`` (one per row); ``"mean"``, the mean's
    ``1/count`` of the targets that are not ``ignore_index``, counted by every program (batches of at most
    :data:`SELF_COUNT_MAX_ROWS`); None, 1. ``reduce`` ``"sum"`` / ``"mean"`` (with ``total``, an fp32
    scalar): the same launch writes the rows' sum / their mean over the targets that are not ``ignore_index``
    (no separate reduction; ``"mean"`` takes no ``scale``: the last program scales the stored rows, then sums
    them)."""
    n_rows, n_cols = x.shape
    opts = FORCED_PLAN.get() or plan(n_cols, softcap is not None)
    if opts["ONE_TILE"] and opts["TILE"] < n_cols:
        raise ValueError(f"plan: a one-tile plan of {opts['TILE']} columns cannot hold rows of {n_cols}")
    if isinstance(scale, torch.Tensor) and scale.numel() not in (1, n_rows):
        raise ValueError(f"scale: expected 1 or {n_rows} values, got shape {tuple(scale.shape)}")
    if reduce not in ("", "sum", "mean") or (reduce == "") != (total is None) or (reduce == "mean" and
                                                                                  scale is not None):
        raise ValueError(f"reduce: expected '' (no total), 'sum' or 'mean' (no scale) with a total, got {reduce!r}")
    if reduce and n_rows == 0:  # no program runs to write it
        total.zero_()
        return
    mode = "rows" if isinstance(scale, torch.Tensor) else "one" if scale is None else scale
    scale = scale.reshape(-1) if mode == "rows" else loss  # (never read otherwise)
    stride_scale = scale.stride(0) if scale.numel() > 1 else 0
    counter = arrival_counters(x.device, 1) if reduce else loss
    launch(_cross_entropy_fwd_kernel, (n_rows,), x, x if dx is None else dx, target, loss, scale,
           loss if total is None else total, counter,
           x.stride(0), x.stride(0) if dx is None else dx.stride(0), target.stride(0), stride_scale,
           n_rows, n_cols, ignore_index, float(label_smoothing), float(z_loss),
           float(softcap or 1.0), 1.0 / float(softcap or 1.0),
           HAS_GRAD=dx is not None, SMOOTH=label_smoothing > 0, SOFTCAP=softcap is not None,
           SCALE=mode, REDUCE=reduce, **opts)


def cross_entropy_bwd(g: torch.Tensor, dx: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``out = g · dx`` for ``dx [rows, n]`` (unit column stride) and ``g`` one value (any shape: a 0-dim
    scalar, or the stride-0 expansion ``loss.sum()`` hands a ``none`` loss) or one per row. ``out=None``
    scales ``dx`` in place and, for a scalar g of exactly 1, does nothing at all. Returns ``out`` or ``dx``."""
    n_rows, n_cols = dx.shape
    if g.numel() not in (1, n_rows):
        raise ValueError(f"grad_output: expected a scalar or {n_rows} values, got shape {tuple(g.shape)}")
    g = g.reshape(-1)
    scalar = g.numel() == 1 or g.stride(0) == 0
    target = dx if out is None else out
    interpreted = interpreter_active()
    block = min(_INTERPRETER_SCALE_BLOCK if interpreted else SCALE_BLOCK, next_pow2(n_cols))
    n_tiles = n_rows * cdiv(n_cols, block)
    per_program = cdiv(n_tiles, _INTERPRETER_SCALE_PROGRAMS if interpreted else SCALE_PROGRAMS)
    launch(_cross_entropy_bwd_kernel, (cdiv(n_tiles, per_program),), g, dx, target, 0 if scalar else g.stride(0),
           dx.stride(0), target.stride(0), n_rows, n_cols, per_program, BLOCK_N=block,
           SKIP_ONES=scalar and out is None,
           num_warps=1 if interpreted else min(SCALE_WARPS, max(1, block // 512)))
    return target


__all__ = ["ONE_TILE_MAX_COLS", "cross_entropy_bwd", "cross_entropy_fwd", "plan", "target_stats"]
