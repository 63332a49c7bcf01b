"""``grouped_matmul``: the mixture-of-experts GEMM — one product per expert over its rows, one launch.

``A [T, K]`` holds every token's row, sorted by expert (``group_sizes[e]`` rows for expert ``e``, possibly
0); ``B [E, K, N]`` one weight per expert; ``C[rows of e] = A[rows of e] @ B[e]``.

The tile schedule is computed *inside the kernel* from the ``[E]`` sizes, so a call never synchronises with
the host (the sizes usually come from a router on the GPU): each program loads the sizes (E ≤ a few
hundred ints, L2-resident), prefix-sums the per-expert m-tile counts with ``tl.cumsum`` and finds its
expert by counting the experts whose tiles end at or before its own tile index. The grid is sized for the
worst case without reading the sizes, ``Σ_e ⌈s_e/BLOCK_M⌉ ≤ ⌈T/BLOCK_M⌉ + E`` m-tiles, and programs past
the real count return at once. The m-tile index is the fastest grid axis, so the programs in flight share
one column block of the experts' weights (each expert's ``B`` tile is read from DRAM about once).

Hopper (:func:`_grouped_tma_kernel`): the same schedule, persistent (one program per SM walking the work
units ``(expert, n-tile, m-tile)``, m fastest) with device-side TMA descriptors — A as one ``[T, K]``
descriptor (a tile running past its expert's rows reads the next expert's rows: computed, never stored)
and B as one 2-D descriptor over the stacked experts (``[E·N, K]`` for K-major weights, ``[E·K, N]``
otherwise), so no operand descriptor is built in the loop; C is stored through a descriptor over the
unit's expert's rows (built per work unit: TMA drops the rows past the group, no pointer tile).

Nothing read from the index tensor is trusted (:func:`expert_groups`): a negative size is an empty group,
groups are cut at ``T``, so no value reaches memory outside ``a`` and ``c``; rows no group covers (past
``Σ sizes``, or before ``offsets[0]``) are written as zeros by the programs past the experts' tiles. The
host checks the values only in validation mode (:func:`kernelworks.validation`: one sync).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops.gemm.api import check_operand
from kernelworks.ops.gemm.forward import _FORCED_PLAN, Plan, _precision
from kernelworks.runtime.alloc import empty, empty_layout_of
from kernelworks.runtime.device import interpreter_active, interpreter_dot_operand, sm_count
from kernelworks.runtime.indices import check_index_tensor, check_index_values, check_offsets, validation_enabled
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.replay import replayed_op
from kernelworks.runtime.tma import ensure_tma_allocator, tma_available
from kernelworks.runtime.torch_op import TorchOp
from kernelworks.runtime.validate import check_same_device

INT32_SUM_LIMIT = 2**31
"""Launches with ``(E + 1)·T`` at least this sum the groups in int64 (:func:`expert_groups`); tests lower it."""


@triton.jit
def expert_groups(p_idx, s_idx, T, E, OFFSETS: tl.constexpr, WIDE: tl.constexpr, E_POW2: tl.constexpr,
                  BLOCK_M: tl.constexpr):
    """Each expert's rows ``[row0_e, row0_e + size_e)`` of ``A``/``C``, bounded whatever the index tensor
    holds. ``p_idx``: ``group_sizes [E]`` or (``OFFSETS``) ``offsets [E + 1]``, int32/int64, element stride
    ``s_idx``. A negative size (a decreasing offset) is an empty group; groups lie end to end from ``lo``
    (``offsets[0]``, 0 for sizes) and are cut at ``T``, so every row index lies in ``[0, T]``.

    Values are clamped into ``[0, T]`` in their own dtype first, so the prefix sum adds at most ``(E + 1)·T``:
    int32 unless ``WIDE`` (the launcher's ``(E + 1)·T ≥ 2³¹``; an int64 scan costs ~1 µs per launch).
    Returns ``(b_size, b_row0, b_tiles, lo, hi)``: ``[E_POW2]`` int32 vectors (0 past ``E``) and the covered
    rows ``[lo, hi)``; rows outside it belong to no group."""
    o_e = tl.arange(0, E_POW2)
    m_e = o_e < E
    p_e = p_idx + o_e.to(tl.int64) * s_idx
    if OFFSETS:
        lo = tl.minimum(tl.maximum(tl.load(p_idx), 0), T)
        b_lo = tl.minimum(tl.maximum(tl.load(p_e, mask=m_e, other=0), 0), T)
        b_hi = tl.minimum(tl.maximum(tl.load(p_e + s_idx, mask=m_e, other=0), 0), T)
        b_size = tl.maximum(b_hi - b_lo, 0)
    else:
        lo = tl.full((), 0, tl.int32)
        b_size = tl.minimum(tl.maximum(tl.load(p_e, mask=m_e, other=0), 0), T)
    if WIDE:
        b_size = b_size.to(tl.int64)
        lo = lo.to(tl.int64)
    else:
        b_size = b_size.to(tl.int32)
        lo = lo.to(tl.int32)
    b_end = lo + tl.cumsum(b_size, 0)
    b_row0 = tl.minimum(b_end - b_size, T).to(tl.int32)
    b_size = tl.minimum(b_end, T).to(tl.int32) - b_row0
    hi = tl.minimum(lo.to(tl.int32) + tl.sum(b_size, 0), T)
    return b_size, b_row0, (b_size + BLOCK_M - 1) // BLOCK_M, lo.to(tl.int32), hi


@triton.jit
def uncovered_tile(i_z, lo, hi, T, BLOCK_M: tl.constexpr):
    """The ``i_z``-th ``BLOCK_M``-row tile of the rows no group covers: the tiles of ``[0, lo)``, then
    those of ``[hi, T)``. Returns ``(first row of its range, rows in its range, tile's offset in it)``;
    an ``i_z`` past them all gives an offset past its range (nothing to store)."""
    n_head = tl.cdiv(lo, BLOCK_M)
    in_head = i_z < n_head
    start = tl.where(in_head, 0, hi)
    return start, tl.where(in_head, lo, T) - start, (i_z - tl.where(in_head, 0, n_head)) * BLOCK_M


@triton.jit
def _grouped_matmul_kernel(
    p_a, p_b, p_c, p_idx,
    T, N, K, E,
    s_am, s_ak, s_be, s_bk, s_bn, s_cm, s_cn, s_idx,
    OFFSETS: tl.constexpr, WIDE: tl.constexpr, PRECISION: tl.constexpr, E_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """``C[r0_e + i] = A[r0_e + i] @ B[e]`` for the rows ``i < s_e`` of each expert ``e`` (groups from
    :func:`expert_groups`). Grid ``(⌈T/BLOCK_M⌉ + E + 1, ⌈N/BLOCK_N⌉)``; program ``(i_tm, i_n)`` takes the
    ``i_tm``-th m-tile of the concatenated per-expert tilings, and the programs past them zero the rows no
    group covers (``[0, lo)`` and ``[hi, T)``: E + 2 ranges whose tiles number at most ``⌈T/BLOCK_M⌉ + E + 1``)."""
    i_tm = tl.program_id(0)
    i_n = tl.program_id(1)
    b_size, b_row0, b_tiles, lo, hi = expert_groups(p_idx, s_idx, T, E, OFFSETS, WIDE, E_POW2, BLOCK_M)
    b_tile_end = tl.cumsum(b_tiles, 0)
    i_e = tl.sum((b_tile_end <= i_tm).to(tl.int32), 0)  # experts entirely before this tile
    o_n = i_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    if i_e < E:
        m_e = tl.arange(0, E_POW2) == i_e
        size = tl.sum(tl.where(m_e, b_size, 0), 0)
        row0 = tl.sum(tl.where(m_e, b_row0, 0), 0)
        tile0 = tl.sum(tl.where(m_e, b_tile_end - b_tiles, 0), 0)
        o_r = (i_tm - tile0) * BLOCK_M + tl.arange(0, BLOCK_M)  # rows within the expert's group
        m_m = o_r < size
        o_m = row0.to(tl.int64) + o_r
        o_k = tl.arange(0, BLOCK_K)
        p_a_k = p_a + o_m[:, None] * s_am + o_k[None, :] * s_ak
        p_b_k = p_b + i_e.to(tl.int64) * s_be + o_k[:, None] * s_bk + o_n[None, :] * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            m_k = (k + o_k) < K
            b_a = tl.load(p_a_k, mask=m_m[:, None] & m_k[None, :], other=0.0)
            b_b = tl.load(p_b_k, mask=m_k[:, None] & m_n[None, :], other=0.0)
            acc = tl.dot(b_a, b_b, acc, input_precision=PRECISION)
            p_a_k += BLOCK_K * s_ak
            p_b_k += BLOCK_K * s_bk
        p_c_t = p_c + o_m[:, None] * s_cm + o_n[None, :] * s_cn
        tl.store(p_c_t, acc.to(p_c.dtype.element_ty), mask=m_m[:, None] & m_n[None, :])
    else:
        row0, rows, o_z = uncovered_tile(i_tm - tl.sum(b_tiles, 0), lo, hi, T, BLOCK_M)
        o_r = o_z + tl.arange(0, BLOCK_M)
        p_c_t = p_c + (row0.to(tl.int64) + o_r)[:, None] * s_cm + o_n[None, :] * s_cn
        zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=p_c.dtype.element_ty)
        tl.store(p_c_t, zeros, mask=(o_r < rows)[:, None] & m_n[None, :])


@triton.jit
def _grouped_tma_kernel(
    p_a, p_b, p_c, p_idx,
    T, N, K, E,
    s_am, s_b, s_cm, s_idx,
    OFFSETS: tl.constexpr, WIDE: tl.constexpr, B_T: tl.constexpr, PRECISION: tl.constexpr,
    E_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SMS: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    """As :func:`_grouped_matmul_kernel`, persistent with TMA. A ``[T, K]`` rows of stride ``s_am``; B the
    stacked experts as 2-D rows of stride ``s_b``: ``B_T`` — ``[E·N, K]`` (each expert an ``nn.Linear``
    weight ``[N, K]``; expert ``e``'s tile at row ``e·N + n``: a tile past N reads the next expert's rows,
    which land in output columns ≥ N and are not stored), else ``[E·K, N]`` (needs ``K % BLOCK_K == 0`` so
    no K tile crosses into the next expert). Grid ``(NUM_SMS,)``; work unit ``u`` of expert ``e`` covers
    m-tile ``u % mt_e`` and n-tile ``u // mt_e`` (m fastest: the SMs in flight share B column blocks).
    The rows no group covers are zeroed by a second loop, after the GEMM loop (zero trips when the groups
    cover ``T``), so the pipelined main loop is the same as without it."""
    d_a = tl.make_tensor_descriptor(p_a, [T, K], [s_am, 1], [BLOCK_M, BLOCK_K])
    if B_T:
        d_b = tl.make_tensor_descriptor(p_b, [E * N, K], [s_b, 1], [BLOCK_N, BLOCK_K])
    else:
        d_b = tl.make_tensor_descriptor(p_b, [E * K, N], [s_b, 1], [BLOCK_K, BLOCK_N])
    o_e = tl.arange(0, E_POW2)
    b_size, b_row0, b_tiles, lo, hi = expert_groups(p_idx, s_idx, T, E, OFFSETS, WIDE, E_POW2, BLOCK_M)
    n_n = tl.cdiv(N, BLOCK_N)
    b_unit_end = tl.cumsum(b_tiles, 0) * n_n
    n_units = tl.sum(b_tiles, 0) * n_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for i_u in tl.range(tl.program_id(0), n_units, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        i_e = tl.sum((b_unit_end <= i_u).to(tl.int32), 0)
        m_e = o_e == i_e
        mt = tl.sum(tl.where(m_e, b_tiles, 0), 0)
        i_l = i_u - tl.sum(tl.where(m_e, b_unit_end - b_tiles * n_n, 0), 0)
        row0 = tl.sum(tl.where(m_e, b_row0, 0), 0)
        o_am = row0 + (i_l % mt) * BLOCK_M
        o_bn = (i_l // mt) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i_k in range(k_tiles):
            o_k = i_k * BLOCK_K
            b_a = d_a.load([o_am, o_k])
            b_b = d_b.load([i_e * N + o_bn, o_k]).T if B_T else d_b.load([i_e * K + o_k, o_bn])
            acc = tl.dot(b_a, b_b, acc, input_precision=PRECISION)
        # the unit's indices again, from i_u (kept out of the registers live across the K loop)
        i_e = tl.sum((b_unit_end <= i_u).to(tl.int32), 0)
        m_e = o_e == i_e
        mt = tl.sum(tl.where(m_e, b_tiles, 0), 0)
        i_l = i_u - tl.sum(tl.where(m_e, b_unit_end - b_tiles * n_n, 0), 0)
        row0 = tl.sum(tl.where(m_e, b_row0, 0), 0)
        size = tl.sum(tl.where(m_e, b_size, 0), 0)
        # C through a descriptor over this expert's rows only: TMA drops the tile's rows past the group
        # (the next expert's), and the store needs no [BLOCK_M, BLOCK_N] pointer tensor (registers)
        d_c = tl.make_tensor_descriptor(p_c + row0.to(tl.int64) * s_cm, [size, N], [s_cm, 1],
                                        [BLOCK_M, BLOCK_N // 2])
        c = tl.permute(tl.reshape(acc.to(p_c.dtype.element_ty), (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        c_0, c_1 = tl.split(c)
        o_cm = (i_l % mt) * BLOCK_M
        o_cn = (i_l // mt) * BLOCK_N
        d_c.store([o_cm, o_cn], c_0)
        d_c.store([o_cm, o_cn + BLOCK_N // 2], c_1)
    # rows no group covers, [0, lo) and [hi, T): zero tiles through a descriptor over their range
    n_zero = (tl.cdiv(lo, BLOCK_M) + tl.cdiv(T - hi, BLOCK_M)) * n_n
    zeros = tl.zeros((BLOCK_M, BLOCK_N // 2), dtype=p_c.dtype.element_ty)
    for i_u in tl.range(tl.program_id(0), n_zero, NUM_SMS):
        row0, rows, o_zm = uncovered_tile(i_u % (n_zero // n_n), lo, hi, T, BLOCK_M)
        d_z = tl.make_tensor_descriptor(p_c + row0.to(tl.int64) * s_cm, [rows, N], [s_cm, 1],
                                        [BLOCK_M, BLOCK_N // 2])
        o_zn = (i_u // (n_zero // n_n)) * BLOCK_N
        d_z.store([o_zm, o_zn], zeros)
        d_z.store([o_zm, o_zn + BLOCK_N // 2], zeros)


@triton.jit
def _grouped_wgrad_kernel(
    p_a, p_g, p_db, p_idx,
    T, N, K, E,
    s_am, s_ak, s_gm, s_gn, s_de, s_dk, s_dn, s_idx,
    OFFSETS: tl.constexpr, WIDE: tl.constexpr, PRECISION: tl.constexpr, E_POW2: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """The weight gradient ``dB[e] = A[rows of e]ᵀ @ G[rows of e]`` (``[K, N]`` per expert, the groups of
    :func:`expert_groups`, so the same bounds as the forward), A ``[T, K]``, G ``[T, N]``. Grid
    ``(⌈K/BLOCK_K⌉ · ⌈N/BLOCK_N⌉, E)``: one output tile per program, its expert's rows walked BLOCK_R at a
    time; an empty group stores zeros (its weights got no gradient)."""
    i_t = tl.program_id(0)
    i_e = tl.program_id(1)
    n_n = tl.cdiv(N, BLOCK_N)
    b_size, b_row0, _, _, _ = expert_groups(p_idx, s_idx, T, E, OFFSETS, WIDE, E_POW2, BLOCK_R)
    m_e = tl.arange(0, E_POW2) == i_e
    size = tl.sum(tl.where(m_e, b_size, 0), 0)
    row0 = tl.sum(tl.where(m_e, b_row0, 0), 0)
    o_k = (i_t // n_n).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    o_n = (i_t % n_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_k = o_k < K
    m_n = o_n < N
    o_r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for r in range(0, size, BLOCK_R):
        m_r = (r + o_r) < size
        o_m = row0.to(tl.int64) + r + o_r
        b_at = tl.load(p_a + o_m[None, :] * s_am + o_k[:, None] * s_ak, mask=m_k[:, None] & m_r[None, :], other=0.0)
        b_g = tl.load(p_g + o_m[:, None] * s_gm + o_n[None, :] * s_gn, mask=m_r[:, None] & m_n[None, :], other=0.0)
        acc = tl.dot(b_at, b_g, acc, input_precision=PRECISION)
    p_t = p_db + i_e.to(tl.int64) * s_de + o_k[:, None] * s_dk + o_n[None, :] * s_dn
    tl.store(p_t, acc.to(p_db.dtype.element_ty), mask=m_k[:, None] & m_n[None, :])


@cached_plan
def grouped_plan(t: int, n: int, e: int, itemsize: int, tma_ok: bool) -> Plan:
    """Tiles, warps, stages and path. Tokens per expert set BLOCK_M: a group shorter than the tile wastes
    the rest of it, so average groups under 256 rows take 64-row tiles. With TMA operands (Hopper,
    :func:`_grouped_tma_operands`) 16-bit inputs take the persistent TMA kernel, 128×256×64 tiles on 8 warps
    with 4 stages for large groups: on the H100, on Qwen3-30B-A3B's layer (65536 rows over 128 experts, a
    random router), 4–9% faster than 3 stages on all four products of a training step (gate_up and down,
    forward and dA) and ahead of every other tile tried (128×128, 64×256, 256×128, 128×128×128; session 17,
    ``benchmarks/results/h100-80gb-hbm3/sweeps/grouped_moe_plans.json``)."""
    if interpreter_active():
        return Plan(False, 16, 32, 32, 4, 1)
    bm = 128 if t >= 256 * e else 64
    bk = 32 if itemsize == 4 else 64
    if tma_ok and itemsize == 2:
        return Plan(True, 128, 256, 64, 8, 4) if bm == 128 else Plan(True, 64, 128, 64, 4, 4)
    return Plan(False, bm, 128, bk, 8 if bm == 128 else 4, 3)


def _grouped_tma_operands(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bk: int) -> tuple[bool, int] | None:
    """``(B_T, row stride of B's 2-D view)`` when the TMA kernel can read ``a`` and ``b``, else None: A rows
    unit-strided, B's experts stacked (expert stride = rows × row stride) with a unit inner stride, 16-byte
    aligned bases and strides (C's rows too); row-major B also needs ``K % BLOCK_K == 0``."""
    size = a.element_size()
    _, k, n = b.shape
    if a.stride(1) != 1 or (a.stride(0) * size) % 16 or a.data_ptr() % 16 or b.data_ptr() % 16:
        return None
    # C's per-expert descriptor starts at any row (C may be bf16 where the interpreter reads fp32 a, b)
    if out.stride(1) != 1 or (out.stride(0) * out.element_size()) % 16:
        return None
    if b.stride(1) == 1 and b.stride(0) == n * b.stride(2) and (b.stride(2) * size) % 16 == 0:
        return True, b.stride(2)  # [E, N, K] storage, viewed [E, K, N]
    if b.stride(2) == 1 and b.stride(0) == k * b.stride(1) and (b.stride(1) * size) % 16 == 0 and k % bk == 0:
        return False, b.stride(1)
    return None


def _grouped_forward(a: torch.Tensor, b: torch.Tensor, groups: torch.Tensor, offsets: bool) -> torch.Tensor:
    t, (n_exp, k, n) = a.shape[0], b.shape
    out = empty((t, n), dtype=a.dtype, device=a.device)
    if out.numel() == 0:
        return out
    if n_exp == 0:  # no group: every row is uncovered
        return out.zero_()
    precision = _precision(a.dtype)
    a, b = interpreter_dot_operand(a), interpreter_dot_operand(b)  # fp32 dots for bf16 under the interpreter
    wide = (n_exp + 1) * t >= INT32_SUM_LIMIT  # the groups' prefix sums may pass int32 (expert_groups)
    forced = _FORCED_PLAN.get()  # forward.forced_plan (config sweeps, tests): overrides the default plan
    tma_ops = _grouped_tma_operands(a, b, out, 64) if k > 0 and (tma_available() or forced) else None
    plan = forced or grouped_plan(t, n, n_exp, a.element_size(), tma_ops is not None)
    if plan.tma:
        tma_ops = _grouped_tma_operands(a, b, out, plan.BLOCK_K)
        if tma_ops is None:
            raise ValueError("plan: the TMA grouped kernel cannot read these operands (layout, alignment)")
        if not interpreter_active():
            ensure_tma_allocator()
        b_t, s_b = tma_ops
        n_sms = sm_count(a.device.index or 0) if a.is_cuda else sm_count()
        units = (cdiv(t, plan.BLOCK_M) + n_exp + 1) * cdiv(n, plan.BLOCK_N)
        launch(_grouped_tma_kernel, (min(n_sms, units), 1, 1), a, b, out, groups, t, n, k, n_exp,
               a.stride(0), s_b, out.stride(0), groups.stride(0),
               num_warps=plan.num_warps, num_stages=plan.num_stages, OFFSETS=offsets, WIDE=wide, B_T=b_t,
               PRECISION=precision, E_POW2=next_pow2(n_exp), BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
               BLOCK_K=plan.BLOCK_K, NUM_SMS=n_sms, FLATTEN=plan.FLATTEN, WARP_SPECIALIZE=plan.WARP_SPECIALIZE)
        return out
    grid = (cdiv(t, plan.BLOCK_M) + n_exp + 1, cdiv(n, plan.BLOCK_N), 1)
    launch(_grouped_matmul_kernel, grid, a, b, out, groups, t, n, k, n_exp,
           *a.stride(), *b.stride(), *out.stride(), groups.stride(0),
           num_warps=plan.num_warps, num_stages=plan.num_stages, OFFSETS=offsets, WIDE=wide,
           PRECISION=precision, E_POW2=next_pow2(n_exp), BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
           BLOCK_K=plan.BLOCK_K)
    return out


def _grouped_fake(a, b, groups, offsets):
    return a.new_empty((a.shape[0], b.shape[2]))


@cached_plan
def wgrad_plan(itemsize: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_K, BLOCK_N, BLOCK_R, warps, stages)`` of :func:`_grouped_wgrad_kernel` (not yet tuned)."""
    if interpreter_active():
        return 16, 32, 16, 1, 1
    return (128, 128, 64, 8, 3) if itemsize == 2 else (64, 64, 32, 4, 3)


def _grouped_wgrad(a: torch.Tensor, g: torch.Tensor, groups: torch.Tensor, offsets: bool,
                   b: torch.Tensor) -> torch.Tensor:
    """``dB`` laid out as ``b`` (``[E, K, N]``): each expert's ``A[rows]ᵀ @ G[rows]``."""
    db = empty_layout_of(b)
    n_exp, k, n = b.shape
    if db.numel() == 0:
        return db
    if a.shape[0] == 0:
        return db.zero_()
    precision = _precision(a.dtype)
    a, g = interpreter_dot_operand(a), interpreter_dot_operand(g)
    block_k, block_n, block_r, warps, stages = wgrad_plan(a.element_size())
    launch(_grouped_wgrad_kernel, (cdiv(k, block_k) * cdiv(n, block_n), n_exp, 1), a, g, db, groups, a.shape[0], n,
           k, n_exp, *a.stride(), *g.stride(), *db.stride(), groups.stride(0), num_warps=warps, num_stages=stages,
           OFFSETS=offsets, WIDE=(n_exp + 1) * a.shape[0] >= INT32_SUM_LIMIT, PRECISION=precision,
           E_POW2=next_pow2(n_exp), BLOCK_K=block_k, BLOCK_N=block_n, BLOCK_R=block_r)
    return db


def _grouped_backward(dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, groups: torch.Tensor, offsets: bool,
                      need_a: bool, need_b: bool) -> list[torch.Tensor]:
    """``[dA]`` and/or ``[dB]`` (whichever is needed, in that order): ``dA = dC @ B[e]ᵀ`` per group (the
    forward kernel on ``B`` transposed as a view; rows no group covers get 0), ``dB`` by
    :func:`_grouped_wgrad_kernel`."""
    grads = []
    if need_a:
        grads.append(_grouped_forward(dc, b.transpose(1, 2), groups, offsets))
    if need_b:
        grads.append(_grouped_wgrad(a, dc, groups, offsets, b))
    return grads


def _grouped_backward_fake(dc, a, b, groups, offsets, need_a, need_b):
    return ([a.new_empty(a.shape)] if need_a else []) + ([torch.empty_like(b)] if need_b else [])


def _grouped_setup(ctx, inputs, output) -> None:
    a, b, groups, offsets = inputs
    ctx.save_for_backward(a, b, groups)
    ctx.offsets = offsets
    ctx.set_materialize_grads(False)


def _grouped_input_grads(ctx, grads: tuple, backward) -> tuple:
    """Gradients for ``(a, b, groups, offsets)``."""
    (dc,) = grads
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if dc is None or not (need_a or need_b):
        return None, None, None, None
    a, b, groups = ctx.saved_tensors
    out = backward(dc, a, b, groups, ctx.offsets, need_a, need_b)
    return out[0] if need_a else None, out[-1] if need_b else None, None, None


_grouped = TorchOp("grouped_matmul", forward=_grouped_forward, forward_fake=_grouped_fake,
                   backward=_grouped_backward, backward_fake=_grouped_backward_fake, setup_context=_grouped_setup,
                   input_grads=_grouped_input_grads)
"""``kernelworks::grouped_matmul`` (+ ``_backward``): ``(a, b, groups, offsets) → c``."""


def _check_group_list(name: str, values: list | tuple, total: int, offsets: bool) -> None:
    """A host list of sizes or offsets, checked always (its values are on the host: no sync)."""
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"{name}: expected ints, got {list(values)}")
    bad = [i for i, v in enumerate(values) if v < 0 or (offsets and i and v < values[i - 1])]
    if bad:
        want = "non-decreasing offsets >= 0" if offsets else "sizes >= 0"
        raise ValueError(f"{name}: expected {want}, got {values[bad[0]]} at index {bad[0]}")
    end, what = (values[-1], "offsets ending") if offsets and values else (sum(values), "sizes summing")
    if end > total:
        raise ValueError(f"{name}: expected groups within a's {total} rows, got {what} at {end}")


def _groups(group_sizes: object, offsets: object, n_experts: int, a: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``(index tensor on a's device, whether it holds offsets)`` from ``group_sizes`` or ``offsets``
    (tensor, any strides, or list). Values are checked on the host for lists, and for tensors in
    validation mode only (a device sync); the kernels bound them either way."""
    if (group_sizes is None) == (offsets is None):
        raise ValueError("group_sizes, offsets: expected exactly one of them")
    is_offsets = offsets is not None
    name, t = ("offsets", offsets) if is_offsets else ("group_sizes", group_sizes)
    total = a.shape[0]
    if isinstance(t, (list, tuple)):
        _check_group_list(name, t, total, is_offsets)
        t = torch.tensor(t, dtype=torch.int64, device=a.device)
    check_index_tensor(name, t, ndim=1, like=a, allow_empty=True)
    want = n_experts + is_offsets
    if tuple(t.shape) != (want,):
        raise ValueError(f"{name}: expected shape ({want},) for b's {n_experts} experts, got {tuple(t.shape)}")
    if is_offsets:
        check_offsets(name, t, total, start_at_zero=False)
    else:
        check_index_values(name, t, 0, total + 1)
        if validation_enabled() and t.numel() and int(t.sum()) > total:
            raise ValueError(f"{name}: expected sizes summing to at most {total} (a's rows), got {int(t.sum())}")
    return t, is_offsets


@replayed_op
def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_sizes: torch.Tensor | list[int] | None = None, *,
                   offsets: torch.Tensor | list[int] | None = None) -> torch.Tensor:
    """Per-expert products in one launch: ``C[rows of e] = A[rows of e] @ B[e]``, with autograd (``dA``
    by the same kernel on ``B[e]ᵀ``, ``dB[e] = A[rows of e]ᵀ @ dC[rows of e]`` by a per-expert
    weight-gradient kernel, laid out as ``b``; an expert with no rows gets a zero gradient).

    Args:
        a: ``[T, K]`` tokens sorted by expert; float16, bfloat16 or float32, any strides.
        b: ``[E, K, N]`` in ``a``'s dtype, any strides: expert weights stored ``[E, N, K]`` (each an
            ``nn.Linear`` weight) are passed as ``w.transpose(1, 2)``, no copy.
        group_sizes: ``[E]`` int32/int64 rows per expert (0 allowed), any strides; a tensor on ``a``'s
            device (never read on the host: no synchronisation) or a list of ints.
        offsets: instead of ``group_sizes``: ``[E + 1]`` non-decreasing row offsets, expert ``e`` on rows
            ``[offsets[e], offsets[e + 1])`` (usually ``offsets[0] = 0``, ``offsets[E] = T``).

    The groups cover ``a``'s rows in order, at most all of them (``Σ sizes ≤ T``); rows no group covers come
    back zero (padded token buffers). Lists are checked on the host; device tensors only in validation
    mode (:func:`kernelworks.validation`, one sync) — otherwise bad values cannot reach memory outside the
    tensors (a negative size is an empty group, groups are cut at ``T``) but give a meaningless result.

    Returns:
        ``[T, N]`` in ``a``'s dtype, fp32 accumulation.

    Example::

        y = kw.grouped_matmul(x_sorted, w_experts.transpose(1, 2), tokens_per_expert)   # w: [E, N, K]
    """
    check_operand("a", a, (2,))
    check_operand("b", b, (3,))
    check_same_device(("a", "b"), (a, b))
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: expected one dtype, got a={a.dtype}, b={b.dtype}")
    if b.shape[1] != a.shape[1]:
        raise ValueError(f"b: expected [E, {a.shape[1]}, N] (a's K), got shape {tuple(b.shape)}")
    groups, is_offsets = _groups(group_sizes, offsets, b.shape[0], a)
    return _grouped(a, b, groups, is_offsets)
