"""The Hopper GEMM: a persistent kernel over output tiles with device-side TMA descriptors.

One program per SM (grid = ``sm_count``) walks the tiles ``i_t = pid, pid + NUM_SMS, …`` in grouped order
(:func:`~kernelworks.ops.gemm.tiled.grouped_tile`, for L2 reuse). Operands are read through tensor
descriptors built on the device (``tl.make_tensor_descriptor``; the launcher installs the scratch
allocator): TMA copies whole tiles into shared memory, out-of-bounds rows/columns read as zero and
out-of-bounds stores are dropped, so no masks and no per-element address math in the main loop — the
~13% pointer tiles cost on Hopper (triton PR #5461). wgmma reads both operands from shared memory, so a
transposed operand is loaded in its stored orientation and transposed as a view (``.T``), no copy.

``FLATTEN`` (``tl.range(..., flatten=True)``) fuses the tile loop and the K loop into one pipelined loop, so
the next tile's first loads are in flight while this tile's epilogue runs. ``WARP_SPECIALIZE`` instead
splits producer (TMA) and consumer (wgmma) warps (triton ≥ 3.4 on Hopper; exclusive with flatten). The
epilogue is computed on the whole fp32 tile, then stored in ``EPI_SPLIT`` column slices: the store buffer in
shared memory shrinks accordingly, room the pipeline's stages can use.

Split-K (``SPLIT_K > 1``, decode shapes whose output tiles cannot fill the SMs): the work units are
(tile, split) pairs, ``i_u = i_s · tiles + i_t``; split ``i_s`` sums K tiles ``[i_s·KT_SPLIT, …)``, and the
split that arrives last for a tile sums the fp32 partials in split order and stores C
(:func:`~kernelworks.ops.gemm.tiled.splitk_fixup`: an arrival counter per tile, deterministic, one launch).
Its C store is a masked pointer store (only the last split writes; a TMA store cannot be predicated per
tile without a branch around it).

Constraints checked by the launcher (else the pointer kernel runs): 2-D problem (one batch), K > 0, each
operand with a unit stride in one dimension, 16-byte aligned base pointers and other strides.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelworks.ops.gemm.tiled import apply_scales, epilogue, grouped_tile, scaled_dot, splitk_fixup


@triton.jit
def _matmul_tma_kernel(
    p_a, p_b, p_c, p_bias, p_res, p_sa, p_sb, p_ws, p_lock,
    M, N, K, KT_SPLIT,
    s_a, s_b, s_cm, s_rm, s_rn, s_bias, s_sa, s_sa_k, s_sb, s_sb_k,
    alpha, beta,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
    PRECISION: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr, MAX_IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, EPI_SPLIT: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """``C = epilogue(A @ B)``, A ``[M, K]``, B ``[K, Nb]`` (``Nb = 2N`` for swiglu), C ``[M, N]``
    (contiguous rows, row stride ``s_cm``).

    fp8 scales: as in :func:`~kernelworks.ops.gemm.tiled._matmul_kernel` (``SCALE_A``/``SCALE_B``).

    ``A_T``: A is stored transposed (``[K, M]`` rows with stride ``s_a``), else ``[M, K]`` rows of stride
    ``s_a``; ``B_T``: B is stored as ``[Nb, K]`` (an ``nn.Linear`` weight, ``x @ W.t()``), else ``[K, Nb]``.
    """
    if A_T:
        d_a = tl.make_tensor_descriptor(p_a, [K, M], [s_a, 1], [BLOCK_K, BLOCK_M])
    else:
        d_a = tl.make_tensor_descriptor(p_a, [M, K], [s_a, 1], [BLOCK_M, BLOCK_K])
    n_b = 2 * N if ACT == "swiglu" else N
    if B_T:
        d_b = tl.make_tensor_descriptor(p_b, [n_b, K], [s_b, 1], [BLOCK_N, BLOCK_K])
    else:
        d_b = tl.make_tensor_descriptor(p_b, [K, n_b], [s_b, 1], [BLOCK_K, BLOCK_N])
    d_c = tl.make_tensor_descriptor(p_c, [M, N], [s_cm, 1], [BLOCK_M, BLOCK_N // EPI_SPLIT])

    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    i_pid = tl.program_id(0)
    # The epilogue's tile index is recomputed from its own counter: with FLATTEN the loop body is
    # restructured, and this keeps (i_m, i_n) out of the registers live across the K loop.
    i_tc = i_pid - NUM_SMS
    for i_u in tl.range(i_pid, n_tiles * SPLIT_K, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        if SPLIT_K > 1:
            i_t = i_u % n_tiles
            kt_lo = (i_u // n_tiles) * KT_SPLIT
            kt_hi = tl.minimum(k_tiles, kt_lo + KT_SPLIT)
        else:
            i_t = i_u
            kt_lo = 0
            kt_hi = k_tiles
        i_m, i_n = grouped_tile(i_t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        o_am = i_m * BLOCK_M
        o_bn = i_n * BLOCK_N
        # row/column indices, used only by block scales inside the loop (dead code otherwise)
        o_m = o_am.to(tl.int64) + tl.arange(0, BLOCK_M)
        o_n = o_bn.to(tl.int64) + tl.arange(0, BLOCK_N)
        m_m = o_m < M
        m_n = o_n < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # swiglu only
        for i_k in range(kt_lo, kt_hi):
            o_k = i_k * BLOCK_K
            b_a = d_a.load([o_k, o_am]).T if A_T else d_a.load([o_am, o_k])
            b_b = d_b.load([o_bn, o_k]).T if B_T else d_b.load([o_k, o_bn])
            acc = scaled_dot(acc, b_a, b_b, o_k, o_m, m_m, o_bn, o_n, m_n, p_sa, p_sb, s_sa, s_sa_k, s_sb,
                             s_sb_k, SCALE_A, PRECISION, MAX_IMPRECISE, BLOCK_N <= 128)
            if ACT == "swiglu":  # up tile at column N + o_bn: not 128-aligned unless N is, so per column
                b_u = d_b.load([N + o_bn, o_k]).T if B_T else d_b.load([o_k, N + o_bn])
                acc_up = scaled_dot(acc_up, b_a, b_u, o_k, o_m, m_m, N + o_bn, N + o_n, m_n, p_sa, p_sb, s_sa,
                                    s_sa_k, s_sb, s_sb_k, SCALE_A, PRECISION, MAX_IMPRECISE, False)

        i_tc += NUM_SMS
        i_tt = i_tc % n_tiles if SPLIT_K > 1 else i_tc
        i_m, i_n = grouped_tile(i_tt, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        o_m = i_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        o_n = i_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
        m_m = o_m < M
        m_n = o_n < N
        if SPLIT_K > 1:
            n_b = 2 * N if ACT == "swiglu" else N
            last, acc, acc_up = splitk_fixup(acc, acc_up, p_ws + o_m[:, None] * n_b + o_n[None, :],
                                             M.to(tl.int64) * n_b, m_m[:, None] & m_n[None, :],
                                             i_tc // n_tiles, p_lock, i_tt, N, SPLIT_K, ACT == "swiglu")
            m_m = m_m & last
        acc = apply_scales(acc, o_m, m_m, o_n, m_n, p_sa, p_sb, s_sa, s_sb, SCALE_A, SCALE_B)
        if ACT == "swiglu":
            acc_up = apply_scales(acc_up, o_m, m_m, N + o_n, m_n, p_sa, p_sb, s_sa, s_sb, SCALE_A, SCALE_B)
        y = epilogue(acc, acc_up, o_n, m_n, p_bias, s_bias, N, alpha, ACT, HAS_BIAS)
        if HAS_RES:
            m_t = m_m[:, None] & m_n[None, :]
            p_r = p_res + o_m[:, None] * s_rm + o_n[None, :] * s_rn
            y += beta * tl.load(p_r, mask=m_t, other=0.0).to(tl.float32)
        c = y.to(p_c.dtype.element_ty)
        if SPLIT_K > 1:  # only the last split stores (masked); decode tiles are small
            tl.store(p_c + o_m[:, None] * s_cm + o_n[None, :], c, mask=m_m[:, None] & m_n[None, :])
        elif EPI_SPLIT == 2:
            c = tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            c_0, c_1 = tl.split(c)
            d_c.store([i_m * BLOCK_M, i_n * BLOCK_N], c_0)
            d_c.store([i_m * BLOCK_M, i_n * BLOCK_N + BLOCK_N // 2], c_1)
        else:
            d_c.store([i_m * BLOCK_M, i_n * BLOCK_N], c)

