"""Launch planning for ``matmul``: shape buckets → kernel path and tiles, then the launch.

Paths (:func:`matmul_plan`):

* ``tma`` — the persistent Hopper kernel (``hopper.py``): compute capability ≥ 9.0, one 2-D product (3-D
  ``A`` with a 2-D ``B`` is flattened when its rows merge), ``M > 64``, K > 0, each operand with a unit
  stride in one dimension and 16-byte aligned base and other stride, output rows of a multiple of 16 bytes.
  Operands or an output it cannot take as they are (an odd K, N or vocabulary puts rows off 16 bytes) are
  copied into aligned buffers first when the product is large enough (:func:`_worth_staging`): the pointer
  kernel and cuBLAS both run such products at a fraction of the tensor cores' rate.
* ``tiled`` — the pointer kernel (``tiled.py``) everywhere else: the interpreter, Ampere, batched products,
  small misaligned products, and decode (``M ≤ 64``), where it splits K when the output tiles cannot fill the SMs
  (:func:`decode_split`). Split-K partials are reduced inside the same launch by the split that finishes
  last for each tile (deterministic: summed in split order; ``Plan.SPLIT_INLINE``), or by a second launch.
  The Hopper kernel can split K the same way (``Plan(tma=True, SPLIT_K=…)``, a forced plan for now).

The launcher decides whether the operands are TMA-readable; the plan decides whether to use it (so a forced
plan, :func:`forced_plan`, may put decode shapes on the Hopper kernel).

Before the heuristic, the launcher asks the shipped table of this GPU (:data:`TUNED`, ``tuned/<gpu>.json``,
written by ``kw tune matmul --write``) for the shape bucket (:func:`matmul_bucket`); a fresh entry's config
is played back as the plan ``kw tune`` measured (:func:`plan_from_config`). A forced plan overrides both.

The defaults below start from the published Hopper recipes (PERF.md: 128×256×64 tiles, 8 warps, 3–4
stages, grouped order) with a wave-quantisation rule from the first H200 run (docs/notes/gemm.md);
``benchmarks/sweeps/matmul_configs.py`` measures the alternatives.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelworks.ops.gemm import hopper, tiled
from kernelworks.ops.gemm.hopper import _matmul_tma_kernel
from kernelworks.ops.gemm.tiled import _matmul_kernel, _splitk_reduce_kernel
from kernelworks.runtime.alloc import arrival_counters, empty
from kernelworks.runtime.device import interpreter_active, interpreter_dot_operand, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.plans import ForcedPlan
from kernelworks.runtime.tma import ensure_tma_allocator, tma_available
from kernelworks.runtime.tuned import TunedTable

DECODE_M = 64
"""Products with at most this many rows take the decode bucket (small BLOCK_M, split-K)."""

INLINE_SPLIT_K = True
"""Default plans reduce split-K partials inside the GEMM launch (``tiled.splitk_fixup``: the last split of
a tile sums them); False returns to the session-2 second launch (``_splitk_reduce_kernel``)."""

GROUP_M = 8
"""Tile-rows per group in the grouped tile order (L2 reuse)."""


@dataclass(frozen=True)
class Plan:
    """One launch's choices. ``tma``: the Hopper kernel; ``SPLIT_K > 1``: split-K with a reduce pass."""

    tma: bool
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int
    SPLIT_K: int = 1
    EPI_SPLIT: int = 1
    GROUP_M: int = GROUP_M
    FLATTEN: bool = True
    WARP_SPECIALIZE: bool = False
    FAST_ACCUM: bool = False
    """fp8 per-tensor/row: let wgmma accumulate the whole K chain without promotion to fp32 every BLOCK_K
    (``torch._scaled_mm(use_fast_accum=True)``): no second fp32 tile, so 128×256 tiles fit, at the cost of
    fp8 wgmma's reduced-precision accumulation over long K."""
    SPLIT_INLINE: bool = True
    """``SPLIT_K > 1``: reduce the partials in the same launch (the last split of each tile, counted by an
    atomic per tile, sums them in split order) instead of a second ``_splitk_reduce_kernel`` launch. The
    Hopper kernel always reduces inline."""


_FORCED_PLAN: ForcedPlan[Plan] = ForcedPlan("gemm")


def forced_plan(plan: Plan) -> AbstractContextManager[None]:
    """Within the block, every ``matmul``/``fp8_matmul``/``grouped_matmul`` launch uses ``plan`` instead of its
    own choice (``kw tune``, sweeps, tests; ``SPLIT_K`` is still rounded to whole K blocks). A ``tma`` plan runs
    16/32-bit operands the Hopper kernel cannot read as they are on aligned copies of them, whatever their
    size; one it cannot run at all (a batched product, misaligned fp8, swiglu over an odd N) raises
    ``ValueError``."""
    return _FORCED_PLAN.forced(plan)


def decode_split(tiles: int, k: int, block_k: int, n_sms: int, *, min_blocks: int = 4,
                 max_split: int = 16) -> int:
    """K splits for a decode product of ``tiles`` output tiles (bandwidth-bound on B): the most that still
    run in ONE wave (``tiles · split ≤ SMs``), each split keeping ≥ ``min_blocks`` K blocks (pipeline
    depth). Why one wave and no more — the H200 sweep (docs/notes/gemm.md), device time with the L2
    flushed: a decode CTA streams B at ~40–65 B/ns, so ~60–80 CTAs already saturate HBM (70B qkv M=64:
    80 tiles of 64×128, no split, 3.1 TB/s over 168 MB); with fewer the kernel is CTA-bound (8B o M=64,
    32 tiles: 1.4 TB/s); past one wave a split only adds partial traffic (8B qkv M=64: 25.1 µs at 96
    units, 31.4 at 192; 70B qkv M=64 53.6 at 80, 63.6 at 320). E.g. on 132 SMs at M = 64 (64×128 tiles):
    8B o and down (32 tiles) → 4, qkv (48) → 2, 70B o / down (64) → 2, 70B qkv (80) → 1; M ≤ 16 (16×64):
    8B o / down (64) → 2, qkv (96) → 1."""
    k_blocks = max(1, cdiv(k, block_k))
    split = 1
    while (split < max_split and tiles * (split + 1) <= n_sms
           and cdiv(k_blocks, split + 1) >= min_blocks):
        split += 1
    return split


@cached_plan
def matmul_plan(m: int, n: int, k: int, batch: int, itemsize: int, gated: bool, tma_ok: bool,
                n_sms: int, block_scaled: bool = False, fast_accum: bool = False) -> Plan:
    """The default plan for a ``[batch, m, k] @ [batch, k, n(·2 gated)]`` product of ``itemsize``-byte
    inputs (1: fp8, ``block_scaled`` with 128-wide K blocks, ``fast_accum``: no fp32 promotion inside the
    K loop); ``tma_ok``: the operands qualify for the Hopper path (layout and alignment)."""
    if interpreter_active():
        # The interpreter runs each program's dots in numpy: few, small programs keep the CPU tests fast;
        # decode-sized cases split K so the split-K path is exercised on the CPU too.
        bm = 16 if m <= 16 else 32
        split = 2 if m <= 16 and k >= 96 else 1
        return Plan(False, bm, 32, 32, 4, 1, SPLIT_K=split)
    fp32 = itemsize == 4
    if itemsize == 1:
        return _fp8_plan(m, n, k, batch, gated, tma_ok, n_sms, block_scaled, fast_accum)
    if m <= DECODE_M:
        # Memory-bound on B: one tile-row of A, B streamed once in long K steps. Measured on an H200
        # (benchmarks/sweeps/matmul_configs.py): M ≤ 16 best on 64×256 K steps with 3 stages (8B gate_up
        # M=16 54.5 vs 48.7 TFLOP/s for 64×128), M = 64 on 128-column tiles (70B qkv 200 vs 160).
        bm = max(16, next_pow2(m))
        bn, bk, stages = (64, 64, 3) if fp32 else ((64, 128, 4) if m <= 16 else (128, 128, 4))
        tiles = cdiv(m, bm) * cdiv(n, bn) * batch
        split = decode_split(tiles, k, bk, n_sms)
        if split == 1 and m <= 16 and not fp32:  # enough tiles without splitting K: longer K steps
            bk, stages = 256, 3  # (the split-K reduction kernel's partials spill 8 B with them)
        return Plan(False, bm, bn, bk, 4, stages, SPLIT_K=split, SPLIT_INLINE=INLINE_SPLIT_K)
    if tma_ok:
        if fp32:  # TF32 (or IEEE) wgmma: 4-byte operands, half the K per stage
            return Plan(True, 128, 128, 32, 8, 3, EPI_SPLIT=2)
        if gated:  # two accumulators (gate and up): 128×128 each is the register budget of one 128×256;
            # warp-specialised (producer warp + consumers) measured 729 vs 584 TFLOP/s at 8192 on an H200
            return Plan(True, 128, 128, 64, 8, 3, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True)
        if m <= 256:  # a 128-row tile would be mostly padding; measured 64×128×128 at M = 256: 8B down 512
            # vs 332 TFLOP/s for 128×128×64, 8B o 339 vs 243 (H200)
            return Plan(True, 64, 128, 128, 4, 4)
        # Wave quantisation: the persistent grid runs ⌈tiles / SMs⌉ rounds of one tile per SM, so the time
        # goes as rounds × tile area. Take the tile with the smaller product, the bigger tile on a tie (it
        # is the more efficient per flop). First H200 run: 128×256 at 192 tiles (2 rounds, 60 SMs idle in
        # the second) ran 8B qkv M=1024 at 0.74× cuBLAS; 128×128 does it in 3 full-ish rounds of half the
        # work (predicted ~85 µs vs 96); 64×128 tiles (old M ≤ 256 rule) ran at about half the per-SM rate
        # of 128×128 (8B qkv M=256: 0.50× cuBLAS), so they are no longer chosen here.
        cost_256 = cdiv(cdiv(m, 128) * cdiv(n, 256), n_sms) * 2
        cost_128 = cdiv(cdiv(m, 128) * cdiv(n, 128), n_sms)
        if cost_256 <= cost_128:
            return Plan(True, 128, 256, 64, 8, 3, EPI_SPLIT=2)
        return Plan(True, 128, 128, 64, 8, 5, EPI_SPLIT=2)  # 5 stages: 655 vs 617 TFLOP/s (8B qkv M=1024)
    if fp32:
        return Plan(False, 128, 64, 32, 4, 3)
    return Plan(False, 128, 64 if gated else 128, 32, 8, 4)


def matmul_bucket(m: int, n: int, k: int, batch: int, itemsize: int, gated: bool, tma_ok: bool,
                  precision: str) -> str:
    """The shape bucket of a product in the shipped tuned tables (:data:`TUNED`), e.g.
    ``M1024-N4096-K4096-2B-ieee``: M (rows after merging a 3-D A's batch) rounded up to a power of two —
    tiles and split-K follow M's order of magnitude, and token counts vary call to call — while N (output
    columns: half of b's for swiglu) and K are exact, being a model's fixed dimensions, where the best tile
    turns on divisibility and wave counts; the input size in bytes (bf16 and fp16 share entries) and the
    dot precision; then ``swiglu``, ``B<batch>`` for a batched product, and ``no_tma`` when the operands
    cannot take the Hopper kernel (layout, alignment)."""
    parts = [f"M{next_pow2(max(m, 1))}", f"N{n}", f"K{k}", f"{itemsize}B", precision]
    if gated:
        parts.append("swiglu")
    if batch > 1:
        parts.append(f"B{batch}")
    if not tma_ok:
        parts.append("no_tma")
    return "-".join(parts)


def plan_from_config(config: Mapping[str, Any]) -> Plan:
    """The plan of one of the spec's configs (``MATMUL_CONFIGS``): an ``EPI_SPLIT`` key means the Hopper TMA
    kernel. What ``kw tune`` forces (``configured``) and what a tuned table entry plays back, so a shipped
    entry runs exactly what was measured."""
    return Plan(tma="EPI_SPLIT" in config, **config)


TUNED = TunedTable("matmul", Path(__file__).with_name("tuned"),
                   tuple(Path(inspect.getsourcefile(m)) for m in (hopper, tiled, sys.modules[__name__])),
                   matmul_bucket, plan_from_config)
"""Per-GPU tuned plans (``tuned/<gpu-slug>.json``, written by ``kw tune matmul --write``), read before
:func:`matmul_plan` for 16- and 32-bit inputs outside the interpreter; an entry is ignored once this file,
``tiled.py`` or ``hopper.py`` changes, or under another triton (:mod:`kernelworks.runtime.tuned`)."""


def _fp8_plan(m: int, n: int, k: int, batch: int, gated: bool, tma_ok: bool, n_sms: int,
              block_scaled: bool, fast_accum: bool) -> Plan:
    """fp8: BLOCK_K 128 (fp8 wgmma takes K in 32s; 128 is also the block-scale granularity). Either way a
    second fp32 tile is live next to the accumulator — the block's product before it is scaled (block
    scales) or the wgmma chain promoted into fp32 every BLOCK_K (per tensor/row) — so tiles are 128×128
    (128×256 spills: 255 registers + 64 B stack at 8 warps, AOT for sm_90) and 128×64 with swiglu's
    second accumulator. ``fast_accum`` (per tensor/row only; block scales always fold each K block into
    fp32): no promotion, no second tile → 128×256×128, 8 warps, 4 stages (H200 sweep at 8192³ per tensor:
    1485 TFLOP/s vs ``_scaled_mm`` 1332 default / 1311 fast, same error as ``_scaled_mm``'s fast mode;
    3 stages 1473); swiglu's two accumulators → 128×128 (not measured)."""
    fast = fast_accum and not block_scaled
    if m <= DECODE_M:
        bm = max(16, next_pow2(m))
        split = decode_split(cdiv(m, bm) * cdiv(n, 64) * batch, k, 128, n_sms)
        return Plan(False, bm, 64, 128, 4, 4, SPLIT_K=split, FAST_ACCUM=fast, SPLIT_INLINE=INLINE_SPLIT_K)
    if fast and tma_ok:
        if gated:
            return Plan(True, 128, 128, 128, 8, 3, EPI_SPLIT=2, FAST_ACCUM=True)
        return Plan(True, 128, 256, 128, 8, 4, EPI_SPLIT=2, FAST_ACCUM=True)
    bn = 64 if gated else 128
    if not tma_ok:
        return Plan(False, 128, bn, 128, 8, 3, FAST_ACCUM=fast)
    if block_scaled:  # warp-specialised: 964 vs 892 TFLOP/s at 8192 (H200)
        return Plan(True, 128, bn, 128, 8, 4, EPI_SPLIT=2, FLATTEN=False, WARP_SPECIALIZE=True)
    return Plan(True, 128, bn, 128, 8, 4, EPI_SPLIT=2)


def _tma_operand(t: torch.Tensor) -> tuple[bool, int] | None:
    """``(transposed, stride)`` of a 2-D operand TMA can read — a unit stride in one dimension, the other
    stride and the base 16-byte aligned — else None."""
    size = t.element_size()
    if t.data_ptr() % 16 or any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
        return None  # (a broadcast operand, stride 0, is no TMA descriptor: it takes a copy or the pointer kernel)
    if t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0:
        return False, t.stride(0)
    if t.stride(0) == 1 and (t.stride(1) * size) % 16 == 0:
        return True, t.stride(1)
    return None


def _tma_output(c: torch.Tensor) -> bool:
    """The Hopper kernel can store ``c [M, N]``: unit column stride, row stride and base 16-byte aligned."""
    size = c.element_size()
    return c.stride(1) == 1 and (c.stride(0) * size) % 16 == 0 and c.data_ptr() % 16 == 0


STAGE_MIN = 128
"""Staging (:func:`_worth_staging`) needs N and K of at least this many."""


def _worth_staging(m: int, n: int, k: int) -> bool:
    """Whether a product whose operands or output the Hopper kernel cannot take as they are (a row stride
    or base off 16 bytes: an odd K, N or vocabulary) runs there on aligned copies (:func:`_aligned`).

    The pointer kernel cannot vectorise loads from rows that start off 16 bytes, so it runs at a fraction of
    the tensor cores' rate on them, and so does cuBLAS (H100, 8191 × 4095 × 3583 bf16: 138 and 144 TFLOP/s;
    at M = 128 ours 23 TFLOP/s; ``gaps/matmul-unaligned-before-staging-session21.json``). The copies cost one read
    and one write of each misaligned operand (and of the output); past decode sizes (``M > DECODE_M``, where
    B is streamed once and a copy of it would double the traffic) the product's time dominates them."""
    return m > DECODE_M and n >= STAGE_MIN and k >= STAGE_MIN


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """``t`` (2-D) if the Hopper kernel reads it as it is, else a copy laid out the same way (rows, or
    columns for a transposed view) whose long stride is rounded up to 16 bytes; the padding is never read
    (the descriptors' shapes are the true ones)."""
    if _tma_operand(t) is not None:
        return t
    if t.stride(0) == 1 and t.stride(1) != 1:  # a transposed view (``w.t()``): copy w's rows
        return _aligned(t.t()).t()
    copy = _aligned_empty(t.shape[0], t.shape[1], t.dtype, t.device)
    copy.copy_(t)
    return copy


def _aligned_empty(rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised ``[rows, cols]`` view with unit column stride and a 16-byte row stride."""
    per_16 = 16 // dtype.itemsize
    return empty((rows, cdiv(cols, per_16) * per_16), dtype=dtype, device=device)[:, :cols]


def _precision(dtype: torch.dtype) -> str:
    """fp32 inputs: TF32 exactly when PyTorch's own matmul would use it, else exact fp32 products."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def _merge_rows(a: torch.Tensor) -> torch.Tensor | None:
    """``a [B, M, K]`` as ``[B·M, K]`` without a copy, or None when its rows do not merge."""
    if a.stride(0) == a.shape[1] * a.stride(1) or a.shape[0] == 1:
        return a.reshape(-1, a.shape[2]) if a.shape[0] > 1 else a[0]
    return None


def _scale_args(t: torch.Tensor | None, mode: int) -> tuple[int, int]:
    """Strides of a scale tensor as the kernels read it: mode 2 ``[M]``/``[N]``, mode 3 ``[rows, K/128]``."""
    if mode == 2:
        return t.stride(-1), 0
    if mode == 3:
        return t.stride(0), t.stride(1)
    return 0, 0


def matmul_fwd(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
               act: str, alpha: float, beta: float, out_dtype: torch.dtype, scale_a: torch.Tensor | None = None,
               scale_b: torch.Tensor | None = None, scale_modes: tuple[int, int] = (0, 0),
               fast_accum: bool = False) -> torch.Tensor:
    """``act(alpha·a@b + bias) + beta·residual`` (validated inputs; see ``api.matmul``). ``act`` is
    ``"none"`` or an activation name; swiglu halves b's columns. fp8 (``api.fp8_matmul``): ``scale_a`` /
    ``scale_b`` with ``scale_modes`` (0 none, 1 per tensor, 2 per row / column, 3 blocks; 3 for both or
    neither) dequantise the product before the epilogue; ``fast_accum``: per tensor/row scales without
    fp32 promotion inside the K loop (a forced plan's ``FAST_ACCUM`` decides instead when one is set)."""
    gated = act == "swiglu"
    k, nb = b.shape[-2], b.shape[-1]
    n = nb // 2 if gated else nb
    m = a.shape[-2]
    batches = [t.shape[0] for t in (a, b) if t.dim() == 3]
    batch = 0 if 0 in batches else max(batches, default=1)  # broadcast: an empty batch stays empty
    out_shape = (batch, m, n) if (a.dim() == 3 or b.dim() == 3) else (m, n)
    out = empty(out_shape, dtype=out_dtype, device=a.device)
    if out.numel() == 0:
        return out
    precision = _precision(a.dtype)
    b_size = b.element_size()  # the caller's dtype: the interpreter's fp32 stand-in must not change a decision
    a, b = interpreter_dot_operand(a), interpreter_dot_operand(b)  # fp32 dots for bf16 under the interpreter

    # One 2-D product where possible: [B, M, K] @ [K, N] is [B·M, K] @ [K, N] when A's rows merge.
    a2 = None if b.dim() == 3 else a if a.dim() == 2 else _merge_rows(a)
    if a2 is not None:
        m2 = a2.shape[0]
        c3, a3, b3 = out.view(1, m2, n), a2.unsqueeze(0), b.unsqueeze(0)
        r3 = None if residual is None else residual.reshape(1, m2, n)
        n_batch = 1
    else:
        m2 = m
        c3 = out if out.dim() == 3 else out.unsqueeze(0)
        a3 = a if a.dim() == 3 else a.unsqueeze(0).expand(batch, -1, -1)
        b3 = b if b.dim() == 3 else b.unsqueeze(0).expand(batch, -1, -1)
        r3 = None if residual is None else residual.view(c3.shape) if residual.dim() == 3 else \
            residual.unsqueeze(0)
        n_batch = batch

    n_sms = sm_count(a.device.index or 0) if a.is_cuda else sm_count()
    forced = _FORCED_PLAN.get()
    # the interpreter runs device-side descriptors too: a forced TMA plan is tested there (default plans
    # under the interpreter never take it)
    tma_ok = tma_available() or (forced is not None and forced.tma and interpreter_active())
    tma_ready = staged = False  # the Hopper kernel reads the operands as they are / from aligned copies
    if n_batch == 1 and k > 0 and tma_ok:
        tma_ready = _tma_operand(a3[0]) is not None and _tma_operand(b3[0]) is not None and _tma_output(c3[0])
        # (swiglu's up half starts N columns in: a TMA box must start on 16 bytes, so N must be aligned)
        staged = not tma_ready and a.element_size() > 1 and not (gated and (n * b_size) % 16) and \
            (forced.tma if forced is not None else _worth_staging(m2, n, k))
    mode_a, mode_b = scale_modes
    plan = forced
    if plan is None and a.element_size() > 1 and not interpreter_active():  # fp8 has no tuned entries yet
        plan = TUNED.get(a.device.index or 0, m2, n, k, n_batch, a.element_size(), gated, tma_ready or staged,
                         precision)
    if plan is None:
        plan = matmul_plan(m2, n, k, n_batch, a.element_size(), gated, tma_ready or staged, n_sms, mode_a == 3,
                           fast_accum)
    if plan.tma and not (tma_ready or staged):
        raise ValueError("plan: the Hopper (TMA) kernel cannot read these operands (layout, alignment, batch)")
    c_store = c3  # where the kernel writes: c3, or an aligned stand-in copied into it afterwards
    if plan.tma and staged:
        a3, b3 = _aligned(a3[0]).unsqueeze(0), _aligned(b3[0]).unsqueeze(0)
        if not _tma_output(c3[0]):
            c_store = _aligned_empty(m2, n, out.dtype, out.device).unsqueeze(0)
    sa_arg = scale_a if scale_a is not None else out
    sb_arg = scale_b if scale_b is not None else out
    scale_strides = (*_scale_args(scale_a, mode_a), *_scale_args(scale_b, mode_b))
    fp8 = a.element_size() == 1
    scale_kw = {"SCALE_A": mode_a, "SCALE_B": mode_b,
                "MAX_IMPRECISE": plan.BLOCK_K if fp8 and mode_a != 3 and not plan.FAST_ACCUM else None}
    bias_arg = bias if bias is not None else out
    s_bias = bias.stride(0) if bias is not None else 0
    res_arg = r3 if r3 is not None else c3
    s_r = r3.stride() if r3 is not None else (0, 0, 0)

    # Split-K: whole K blocks per split (the last may be shorter); the split count follows the rounding
    split = plan.SPLIT_K
    k_split = cdiv(cdiv(max(k, 1), split), plan.BLOCK_K) * plan.BLOCK_K
    split = cdiv(max(k, 1), k_split)
    n_tiles = cdiv(m2, plan.BLOCK_M) * cdiv(n, plan.BLOCK_N)
    inline = split > 1 and (plan.SPLIT_INLINE or plan.tma)
    ws = empty((split, n_batch, m2, nb), dtype=torch.float32, device=a.device) if split > 1 else out
    locks = arrival_counters(a.device, n_tiles * n_batch) if inline else out

    if plan.tma:
        if not interpreter_active():
            ensure_tma_allocator()
        (a_t, s_a), (b_t, s_b) = _tma_operand(a3[0]), _tma_operand(b3[0])
        launch(_matmul_tma_kernel, (min(n_sms, n_tiles * split), 1, 1),
               a3[0], b3[0], c_store[0], bias_arg, res_arg[0], sa_arg, sb_arg, ws, locks,
               m2, n, k, k_split // plan.BLOCK_K,
               s_a, s_b, c_store.stride(1), s_r[1], s_r[2], s_bias, *scale_strides, alpha, beta,
               num_warps=plan.num_warps, num_stages=plan.num_stages, **scale_kw,
               ACT=act, HAS_BIAS=bias is not None, HAS_RES=r3 is not None, A_T=a_t, B_T=b_t,
               PRECISION=precision, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, BLOCK_K=plan.BLOCK_K,
               GROUP_M=plan.GROUP_M, NUM_SMS=n_sms, EPI_SPLIT=plan.EPI_SPLIT, FLATTEN=plan.FLATTEN,
               WARP_SPECIALIZE=plan.WARP_SPECIALIZE, SPLIT_K=split)
        if c_store is not c3:
            c3.copy_(c_store)
        return out

    launch(_matmul_kernel, (n_tiles, split, n_batch),
           a3, b3, c3, bias_arg, res_arg, ws, locks, sa_arg, sb_arg,
           m2, n, k, k_split,
           *a3.stride(), *b3.stride(), *c3.stride(), *s_r, s_bias, *scale_strides, alpha, beta,
           num_warps=plan.num_warps, num_stages=plan.num_stages, **scale_kw,
           ACT=act, HAS_BIAS=bias is not None, HAS_RES=r3 is not None, SPLIT_K=split, SPLIT_INLINE=inline,
           PRECISION=precision, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, BLOCK_K=plan.BLOCK_K,
           GROUP_M=plan.GROUP_M)
    if split > 1 and not inline:
        bm, bn = (16, 32) if interpreter_active() else (16, 128)
        launch(_splitk_reduce_kernel, (cdiv(m2, bm) * cdiv(n, bn), n_batch, 1),
               ws, c3, bias_arg, res_arg, m2, n, *c3.stride(), *s_r, s_bias, alpha, beta,
               num_warps=4, ACT=act, HAS_BIAS=bias is not None, HAS_RES=r3 is not None, SPLIT_K=split,
               BLOCK_M=bm, BLOCK_N=bn)
    return out
