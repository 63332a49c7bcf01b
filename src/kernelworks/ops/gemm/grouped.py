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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelworks.ops.gemm.api import check_operand
from kernelworks.ops.gemm.forward import _FORCED_PLAN, Plan, _precision
from kernelworks.runtime.alloc import empty
from kernelworks.runtime.device import interpreter_active, sm_count
from kernelworks.runtime.launch import cached_plan, cdiv, launch, next_pow2
from kernelworks.runtime.tma import ensure_tma_allocator, tma_available
from kernelworks.runtime.validate import check_dtype, check_same_device


@triton.jit
def _grouped_matmul_kernel(
    p_a, p_b, p_c, p_sizes,
    N, K, E,
    s_am, s_ak, s_be, s_bk, s_bn, s_cm, s_cn,
    PRECISION: tl.constexpr, E_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """``C[r0_e + i] = A[r0_e + i] @ B[e]`` for the rows ``i < s_e`` of each expert ``e`` (``r0_e = Σ_{f<e}
    s_f``). Grid ``(⌈T/BLOCK_M⌉ + E, ⌈N/BLOCK_N⌉)``; program ``(i_tm, i_n)`` takes the ``i_tm``-th m-tile of
    the concatenated per-expert tilings."""
    i_tm = tl.program_id(0)
    i_n = tl.program_id(1)
    o_e = tl.arange(0, E_POW2)
    b_size = tl.load(p_sizes + o_e, mask=o_e < E, other=0)
    b_tiles = (b_size + BLOCK_M - 1) // BLOCK_M
    b_tile_end = tl.cumsum(b_tiles, 0)
    i_e = tl.sum((b_tile_end <= i_tm).to(tl.int32), 0)  # experts entirely before this tile
    if i_e < E:
        m_e = o_e == i_e
        size = tl.sum(tl.where(m_e, b_size, 0), 0)
        row0 = tl.sum(tl.where(m_e, tl.cumsum(b_size, 0) - b_size, 0), 0)
        tile0 = tl.sum(tl.where(m_e, b_tile_end - b_tiles, 0), 0)
        o_r = (i_tm - tile0) * BLOCK_M + tl.arange(0, BLOCK_M)  # rows within the expert's group
        m_m = o_r < size
        o_m = row0.to(tl.int64) + o_r
        o_n = i_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_n = o_n < N
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


@triton.jit
def _grouped_tma_kernel(
    p_a, p_b, p_c, p_sizes,
    T, N, K, E,
    s_am, s_b, s_cm,
    B_T: tl.constexpr, PRECISION: tl.constexpr, E_POW2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_SMS: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    """As :func:`_grouped_matmul_kernel`, persistent with TMA. A ``[T, K]`` rows of stride ``s_am``; B the
    stacked experts as 2-D rows of stride ``s_b``: ``B_T`` — ``[E·N, K]`` (each expert an ``nn.Linear``
    weight ``[N, K]``; expert ``e``'s tile at row ``e·N + n``: a tile past N reads the next expert's rows,
    which land in output columns ≥ N and are not stored), else ``[E·K, N]`` (needs ``K % BLOCK_K == 0`` so
    no K tile crosses into the next expert). Grid ``(NUM_SMS,)``; work unit ``u`` of expert ``e`` covers
    m-tile ``u % mt_e`` and n-tile ``u // mt_e`` (m fastest: the SMs in flight share B column blocks)."""
    d_a = tl.make_tensor_descriptor(p_a, [T, K], [s_am, 1], [BLOCK_M, BLOCK_K])
    if B_T:
        d_b = tl.make_tensor_descriptor(p_b, [E * N, K], [s_b, 1], [BLOCK_N, BLOCK_K])
    else:
        d_b = tl.make_tensor_descriptor(p_b, [E * K, N], [s_b, 1], [BLOCK_K, BLOCK_N])
    o_e = tl.arange(0, E_POW2)
    b_size = tl.load(p_sizes + o_e, mask=o_e < E, other=0)
    b_tiles = (b_size + BLOCK_M - 1) // BLOCK_M
    n_n = tl.cdiv(N, BLOCK_N)
    b_unit_end = tl.cumsum(b_tiles, 0) * n_n
    b_row0 = tl.cumsum(b_size, 0) - b_size
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


@cached_plan
def grouped_plan(t: int, n: int, e: int, itemsize: int, tma_ok: bool) -> Plan:
    """Tiles, warps, stages and path. Tokens per expert set BLOCK_M: a group shorter than the tile wastes
    the rest of it, so average groups under 256 rows take 64-row tiles. With TMA operands (Hopper,
    :func:`_grouped_tma_operands`) 16-bit inputs take the persistent TMA kernel with the dense GEMM's tile,
    128×256×64, 8 warps, 3 stages for large groups (AOT sm_90: no spills) — not yet measured."""
    if interpreter_active():
        return Plan(False, 16, 32, 32, 4, 1)
    bm = 128 if t >= 256 * e else 64
    bk = 32 if itemsize == 4 else 64
    if tma_ok and itemsize == 2:
        return Plan(True, 128, 256, 64, 8, 3) if bm == 128 else Plan(True, 64, 128, 64, 4, 4)
    return Plan(False, bm, 128, bk, 8 if bm == 128 else 4, 3)


def _grouped_tma_operands(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bk: int) -> tuple[bool, int] | None:
    """``(B_T, row stride of B's 2-D view)`` when the TMA kernel can read ``a`` and ``b``, else None: A rows
    unit-strided, B's experts stacked (expert stride = rows × row stride) with a unit inner stride, 16-byte
    aligned bases and strides (C's rows too); row-major B also needs ``K % BLOCK_K == 0``."""
    size = a.element_size()
    _, k, n = b.shape
    if a.stride(1) != 1 or (a.stride(0) * size) % 16 or a.data_ptr() % 16 or b.data_ptr() % 16:
        return None
    if out.stride(1) != 1 or (out.stride(0) * size) % 16:  # C's per-expert descriptor starts at any row
        return None
    if b.stride(1) == 1 and b.stride(0) == n * b.stride(2) and (b.stride(2) * size) % 16 == 0:
        return True, b.stride(2)  # [E, N, K] storage, viewed [E, K, N]
    if b.stride(2) == 1 and b.stride(0) == k * b.stride(1) and (b.stride(1) * size) % 16 == 0 and k % bk == 0:
        return False, b.stride(1)
    return None


def _grouped_forward(a: torch.Tensor, b: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    t, (n_exp, k, n) = a.shape[0], b.shape
    out = empty((t, n), dtype=a.dtype, device=a.device)
    if out.numel() == 0 or n_exp == 0:
        return out
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
        units = (cdiv(t, plan.BLOCK_M) + n_exp) * cdiv(n, plan.BLOCK_N)
        launch(_grouped_tma_kernel, (min(n_sms, units), 1, 1), a, b, out, sizes, t, n, k, n_exp,
               a.stride(0), s_b, out.stride(0),
               num_warps=plan.num_warps, num_stages=plan.num_stages, B_T=b_t, PRECISION=_precision(a.dtype),
               E_POW2=next_pow2(n_exp), BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, BLOCK_K=plan.BLOCK_K,
               NUM_SMS=n_sms, FLATTEN=plan.FLATTEN, WARP_SPECIALIZE=plan.WARP_SPECIALIZE)
        return out
    grid = (cdiv(t, plan.BLOCK_M) + n_exp, cdiv(n, plan.BLOCK_N), 1)
    launch(_grouped_matmul_kernel, grid, a, b, out, sizes, n, k, n_exp,
           *a.stride(), *b.stride(), *out.stride(),
           num_warps=plan.num_warps, num_stages=plan.num_stages, PRECISION=_precision(a.dtype),
           E_POW2=next_pow2(n_exp), BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, BLOCK_K=plan.BLOCK_K)
    return out


_grouped_op = torch.library.custom_op("kernelworks::grouped_matmul", mutates_args=())(_grouped_forward)
"""``kernelworks::grouped_matmul``; eager calls run the body directly (no dispatch overhead)."""


@_grouped_op.register_fake
def _grouped_fake(a, b, sizes):
    return a.new_empty((a.shape[0], b.shape[2]))


def _sizes(group_sizes: object, offsets: object, n_experts: int, a: torch.Tensor) -> torch.Tensor:
    """The ``[E]`` int32 sizes on ``a``'s device, from ``group_sizes`` (tensor or list) or ``offsets``."""
    if (group_sizes is None) == (offsets is None):
        raise ValueError("group_sizes, offsets: expected exactly one of them")
    if offsets is not None:
        name, t, want = "offsets", offsets, n_experts + 1
    else:
        name, t, want = "group_sizes", group_sizes, n_experts
    if isinstance(t, (list, tuple)):
        if any(not isinstance(v, int) or v < 0 for v in t):
            raise ValueError(f"{name}: expected non-negative ints, got {list(t)}")
        total = t[-1] - t[0] if offsets is not None and t else sum(t)
        if total != a.shape[0]:
            raise ValueError(f"{name}: expected groups covering a's {a.shape[0]} rows, got {total}")
        t = torch.tensor(t, dtype=torch.int32, device=a.device)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or a list of ints, got {type(t).__name__}")
    check_dtype(name, t, (torch.int32, torch.int64))
    check_same_device(("a", name), (a, t))
    if tuple(t.shape) != (want,):
        raise ValueError(f"{name}: expected shape ({want},) for b's {n_experts} experts, got {tuple(t.shape)}")
    sizes = t[1:] - t[:-1] if offsets is not None else t
    return sizes if sizes.dtype == torch.int32 else sizes.to(torch.int32)


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, group_sizes: torch.Tensor | list[int] | None = None, *,
                   offsets: torch.Tensor | list[int] | None = None) -> torch.Tensor:
    """Per-expert products in one launch: ``C[rows of e] = A[rows of e] @ B[e]``. Forward only.

    Args:
        a: ``[T, K]`` tokens sorted by expert; float16, bfloat16 or float32, any strides.
        b: ``[E, K, N]`` in ``a``'s dtype, any strides: expert weights stored ``[E, N, K]`` (each an
            ``nn.Linear`` weight) are passed as ``w.transpose(1, 2)``, no copy.
        group_sizes: ``[E]`` int32/int64 rows per expert (0 allowed), a tensor on ``a``'s device (never read
            on the host: no synchronisation) or a list of ints (checked to sum to T).
        offsets: instead of ``group_sizes``: ``[E + 1]`` row offsets, ``offsets[0] = 0``, ``offsets[E] = T``.

    The groups must cover ``a``'s rows exactly (``Σ sizes = T``); with a device tensor that is the caller's
    contract (rows past the last group are left unwritten).

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
    sizes = _sizes(group_sizes, offsets, b.shape[0], a)
    op = _grouped_op if torch.compiler.is_compiling() else _grouped_forward
    return op(a, b, sizes)
