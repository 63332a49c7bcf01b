"""The pointer-based GEMM: one program per output tile, for the interpreter, Ampere, and small-M decode.

``C[b] = epilogue(A[b] @ B[b])`` with ``A [batch, M, K]``, ``B [batch, K, Nb]`` (any strides: a transposed
operand is just a pair of swapped strides, no copy), accumulated in fp32. Grid ``(tiles, SPLIT_K, batch)``;
tiles are walked in grouped order (:func:`grouped_tile`) so programs running together share rows of A and
columns of B in L2.

Split-K (decode shapes: a handful of rows, a long K, fewer output tiles than SMs): split ``s`` of ``SPLIT_K``
sums K range ``[s·K_SPLIT, (s+1)·K_SPLIT)`` and writes its raw fp32 accumulator into a workspace
``[SPLIT_K, batch, M, Nb]``. The partials are then added *in split order*, so the result is
bit-reproducible, either

* in the same launch (``SPLIT_INLINE``, :func:`splitk_fixup`): the split that finishes last for a tile —
  found with one atomic counter per tile, never an atomic on the output — sums the partials and runs the
  epilogue (no second launch, no reduce pass over the whole workspace); or
* by :func:`_splitk_reduce_kernel`, a second launch (the session-2 path, kept selectable).

The epilogue (shared with the Hopper kernel, :func:`epilogue`)::

    z = alpha · acc + bias
    y = act(z)                              none / relu / gelu / gelu_tanh / silu
    y = silu(z[:, :N]) · z[:, N:]           swiglu: B = [gate | up], Nb = 2N, output N columns
    C = y + beta · residual
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelworks.ops._math import sigmoid
from kernelworks.ops.activation.kernels import _activate

# ------------------------------------------------------------------------------------------ device helpers


@triton.jit
def grouped_tile(i_t, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Tile ``i_t`` of the ``[M, N]`` output in grouped order: ``GROUP_M`` tile-rows are walked column by
    column, so consecutive programs reuse the same ``GROUP_M`` row-blocks of A and the same column-block
    of B from L2 instead of each streaming a full row of tiles. Returns ``(i_m, i_n)``."""
    n_m = tl.cdiv(M, BLOCK_M)
    n_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * n_n
    i_g = i_t // width
    first_m = i_g * GROUP_M
    size_m = tl.minimum(n_m - first_m, GROUP_M)
    i_m = first_m + (i_t % width) % size_m
    i_n = (i_t % width) // size_m
    return i_m, i_n


@triton.jit
def epilogue(acc, acc_up, o_n, m_n, p_bias, s_bias, N, alpha, ACT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """``act(alpha·acc + bias)`` on an fp32 ``[BLOCK_M, BLOCK_N]`` accumulator whose columns are ``o_n``
    (``m_n``: in bounds). swiglu: ``acc`` is the gate tile, ``acc_up`` the up tile ``N`` columns further
    (its bias at ``N + o_n``); ``acc_up`` is ignored otherwise."""
    z = acc * alpha
    if HAS_BIAS:
        z += tl.load(p_bias + o_n * s_bias, mask=m_n, other=0.0).to(tl.float32)[None, :]
    if ACT == "swiglu":
        u = acc_up * alpha
        if HAS_BIAS:
            u += tl.load(p_bias + (N + o_n) * s_bias, mask=m_n, other=0.0).to(tl.float32)[None, :]
        y = z * sigmoid(z) * u
    elif ACT == "relu":
        y = tl.maximum(z, 0.0)
    elif ACT == "none":
        y = z
    else:  # silu, gelu, gelu_tanh: the activation family's fp32 math (one definition in the library)
        y = _activate(z, ACT)
    return y


@triton.jit
def scaled_dot(acc, b_a, b_b, k, o_m, m_m, o_bn, o_n, m_n, p_sa, p_sb, s_sa, s_sa_k, s_sb, s_sb_k,
               SCALE_A: tl.constexpr, PRECISION: tl.constexpr, MAX_IMPRECISE: tl.constexpr,
               SB_UNIFORM: tl.constexpr):
    """``acc + A_blk @ B_blk`` for the K block starting at ``k``. Block scales (``SCALE_A == 3``, fp8):
    the block's product is formed on its own (fp32, so fp8 wgmma's reduced-precision accumulation never
    spans more than one block) and folded in with ONE fma per element, ``acc = p · s + acc`` with
    ``s = sa[o_m, k/128] · sb[o_n/128, k/128]`` — which needs ``BLOCK_K`` to divide 128.
    ``SB_UNIFORM``: the tile's columns ``o_bn … o_bn + BLOCK_N`` lie in one 128-column scale block
    (``BLOCK_N ≤ 128``, tile start aligned), so ``sb`` is one scalar load and ``s`` a per-row vector
    (``BLOCK_M`` products per thread-row, not per element); else ``s`` is the outer product (one more
    multiply per element). Otherwise a plain accumulating dot (``MAX_IMPRECISE``: fp8 promotion interval,
    None for 16/32-bit inputs)."""
    if SCALE_A == 3:
        i_kb = k // 128
        b_sa = tl.load(p_sa + o_m * s_sa + i_kb * s_sa_k, mask=m_m, other=0.0)
        b_p = tl.dot(b_a, b_b, input_precision=PRECISION)
        if SB_UNIFORM:
            b_s = b_sa * tl.load(p_sb + (o_bn // 128) * s_sb + i_kb * s_sb_k)
            acc = tl.fma(b_p, tl.broadcast_to(b_s[:, None], b_p.shape), acc)
        else:
            b_sb = tl.load(p_sb + (o_n // 128) * s_sb + i_kb * s_sb_k, mask=m_n, other=0.0)
            acc = tl.fma(b_p, b_sa[:, None] * b_sb[None, :], acc)
    else:
        acc = tl.dot(b_a, b_b, acc, input_precision=PRECISION, max_num_imprecise_acc=MAX_IMPRECISE)
    return acc


@triton.jit
def apply_scales(acc, o_m, m_m, o_n, m_n, p_sa, p_sb, s_sa, s_sb, SCALE_A: tl.constexpr,
                 SCALE_B: tl.constexpr):
    """The accumulator times the dequantisation scales that are constant over K: per tensor (mode 1: one
    fp32 value) or per row of A / column of B (mode 2: ``sa[o_m]``, ``sb[o_n]``). Modes 0 (no scale) and 3
    (blocks, applied inside the K loop by :func:`scaled_dot`) leave it unchanged. Linear, so split-K
    partials may be scaled before they are summed."""
    if SCALE_A == 1:
        acc = acc * tl.load(p_sa)
    elif SCALE_A == 2:
        acc = acc * tl.load(p_sa + o_m * s_sa, mask=m_m, other=0.0)[:, None]
    if SCALE_B == 1:
        acc = acc * tl.load(p_sb)
    elif SCALE_B == 2:
        acc = acc * tl.load(p_sb + o_n * s_sb, mask=m_n, other=0.0)[None, :]
    return acc


@triton.jit
def splitk_fixup(acc, acc_up, p_w, slab, m_t, i_s, p_lock, i_lock, N, SPLIT_K: tl.constexpr,
                 GATED: tl.constexpr):
    """Split-K reduced inside the GEMM launch, deterministically. ``p_w``: this tile's ``[BLOCK_M, BLOCK_N]``
    pointers into split 0's fp32 partials (``slab`` elements between splits; swiglu's up half ``N`` columns
    further); ``m_t``: the tile's in-bounds mask; ``p_lock + i_lock``: the tile's arrival counter (int32, 0
    between launches).

    Every split stores its partial, then a CTA barrier (all threads' stores precede the count) and ONE
    ``acq_rel`` atomic increment of the counter. The split that sees ``SPLIT_K - 1`` arrived last: it reads
    the partials back (``.cg``: from L2, never a stale L1 line) and sums them in split order 0, 1, …, so the
    sum is the same whichever split is last (bit-reproducible); then resets the counter to 0 for the next
    launch. Its own partial is re-read too rather than kept: the accumulator is dead after its store, so
    the reduction holds one running sum and one partial (a rolled loop) — keeping it live next to unrolled
    partial loads spilled (AOT sm_90, 64×128 at 4 warps: 255 registers + 656 B). Returns
    ``(last, total, total_up)``; the totals are meaningful only where ``last`` (the other splits' loads are
    masked off: no traffic)."""
    tl.store(p_w + i_s * slab, acc, mask=m_t, cache_modifier=".cg")
    if GATED:
        tl.store(p_w + i_s * slab + N, acc_up, mask=m_t, cache_modifier=".cg")
    tl.debug_barrier()  # the counter's release must follow EVERY thread's partial store
    n_prev = tl.atomic_add(p_lock + i_lock, 1, sem="acq_rel", scope="gpu")
    last = n_prev == SPLIT_K - 1
    m_l = m_t & last
    total = tl.zeros_like(acc)
    total_up = tl.zeros_like(acc_up)
    for s in tl.range(0, SPLIT_K, num_stages=1):  # rolled, unpipelined: a partial in flight at a time
        total += tl.load(p_w + s * slab, mask=m_l, other=0.0, cache_modifier=".cg")
        if GATED:
            total_up += tl.load(p_w + s * slab + N, mask=m_l, other=0.0, cache_modifier=".cg")
    tl.store(p_lock + i_lock, 0, mask=last)  # re-armed for the next launch (kernel boundaries order it)
    return last, total, total_up


@triton.jit
def _store_tile(y, p_c, p_res, i_b, o_m, o_n, m_m, m_n, s_cb, s_cm, s_cn, s_rb, s_rm, s_rn, beta,
                HAS_RES: tl.constexpr):
    """``C[i_b, o_m, o_n] = y + beta·residual``, cast to C's dtype once, here."""
    m_t = m_m[:, None] & m_n[None, :]
    if HAS_RES:
        p_r = p_res + i_b * s_rb + o_m[:, None] * s_rm + o_n[None, :] * s_rn
        y += beta * tl.load(p_r, mask=m_t, other=0.0).to(tl.float32)
    p_o = p_c + i_b * s_cb + o_m[:, None] * s_cm + o_n[None, :] * s_cn
    tl.store(p_o, y.to(p_c.dtype.element_ty), mask=m_t)


# ----------------------------------------------------------------------------------------------- kernels


@triton.jit
def _matmul_kernel(
    p_a, p_b, p_c, p_bias, p_res, p_ws, p_lock, p_sa, p_sb,
    M, N, K, K_SPLIT,
    s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn, s_rb, s_rm, s_rn, s_bias, s_sa, s_sa_k, s_sb, s_sb_k,
    alpha, beta,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SPLIT_K: tl.constexpr,
    SPLIT_INLINE: tl.constexpr,
    PRECISION: tl.constexpr, SCALE_A: tl.constexpr, SCALE_B: tl.constexpr, MAX_IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """``C[b] = epilogue(A[b] @ B[b])``: A ``[batch, M, K]``, B ``[batch, K, Nb]``, C ``[batch, M, N]``
    (``Nb = 2N`` for swiglu, else ``N``), all by strides (a stride 0 broadcasts an operand over the batch).

    ``SPLIT_K > 1``: this program sums K in ``[i_s·K_SPLIT, min(K, (i_s+1)·K_SPLIT))`` and stores its raw
    accumulator(s) into the fp32 workspace ``p_ws [SPLIT_K, batch, M, Nb]`` (contiguous); the epilogue runs
    in the split that arrives last (``SPLIT_INLINE``, :func:`splitk_fixup`; ``p_lock [batch · tiles]`` int32
    zeros) or in :func:`_splitk_reduce_kernel`.

    fp8 (``fp8_matmul``): ``SCALE_A`` / ``SCALE_B`` 1 = per tensor, 2 = per row of A / column of B, 3 =
    blocks (``sa [M, ⌈K/128⌉]``, ``sb [⌈Nb/128⌉, ⌈K/128⌉]``, strides ``s_sa, s_sa_k, s_sb, s_sb_k``); 0 = none.
    """
    i_t = tl.program_id(0)
    i_s = tl.program_id(1)
    i_b = tl.program_id(2).to(tl.int64)  # batch · stride passes 2^31 on large batched products
    n_batch = tl.num_programs(2)
    i_m, i_n = grouped_tile(i_t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    o_m = i_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = i_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    o_k = tl.arange(0, BLOCK_K)
    m_m = o_m < M
    m_n = o_n < N

    k_lo = i_s.to(tl.int64) * K_SPLIT  # int64: k · s_ak passes 2^31 for a transposed A with long rows
    k_hi = tl.minimum(K, k_lo + K_SPLIT)
    p_a_k = p_a + i_b * s_ab + o_m[:, None] * s_am + (k_lo + o_k)[None, :] * s_ak
    p_b_k = p_b + i_b * s_bb + (k_lo + o_k)[:, None] * s_bk + o_n[None, :] * s_bn
    p_u_k = p_b + i_b * s_bb + (k_lo + o_k)[:, None] * s_bk + (N + o_n)[None, :] * s_bn  # swiglu's up half
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # swiglu's up tile; dead code otherwise
    for k in range(k_lo, k_hi, BLOCK_K):
        m_k = (k + o_k) < k_hi
        b_a = tl.load(p_a_k, mask=m_m[:, None] & m_k[None, :], other=0.0)
        b_b = tl.load(p_b_k, mask=m_k[:, None] & m_n[None, :], other=0.0)
        acc = scaled_dot(acc, b_a, b_b, k, o_m, m_m, i_n * BLOCK_N, o_n, m_n, p_sa, p_sb, s_sa, s_sa_k, s_sb,
                         s_sb_k, SCALE_A, PRECISION, MAX_IMPRECISE, BLOCK_N <= 128)
        if ACT == "swiglu":  # the up tile starts at column N + i_n·BLOCK_N: 128-aligned only if N is
            b_u = tl.load(p_u_k, mask=m_k[:, None] & m_n[None, :], other=0.0)
            acc_up = scaled_dot(acc_up, b_a, b_u, k, o_m, m_m, N + i_n * BLOCK_N, N + o_n, m_n, p_sa, p_sb,
                                s_sa, s_sa_k, s_sb, s_sb_k, SCALE_A, PRECISION, MAX_IMPRECISE, False)
            p_u_k += BLOCK_K * s_bk
        p_a_k += BLOCK_K * s_ak
        p_b_k += BLOCK_K * s_bk

    if SPLIT_K > 1 and SPLIT_INLINE:
        n_b = 2 * N if ACT == "swiglu" else N
        p_w = p_ws + (i_b * M + o_m[:, None]) * n_b + o_n[None, :]
        slab = n_batch.to(tl.int64) * M * n_b  # elements of one split's partials
        last, acc, acc_up = splitk_fixup(acc, acc_up, p_w, slab, m_m[:, None] & m_n[None, :], i_s, p_lock,
                                         i_b * tl.num_programs(0) + i_t, N, SPLIT_K, ACT == "swiglu")
        m_m = m_m & last  # the other splits store nothing (and load no bias/residual rows)
    acc = apply_scales(acc, o_m, m_m, o_n, m_n, p_sa, p_sb, s_sa, s_sb, SCALE_A, SCALE_B)
    if ACT == "swiglu":
        acc_up = apply_scales(acc_up, o_m, m_m, N + o_n, m_n, p_sa, p_sb, s_sa, s_sb, SCALE_A, SCALE_B)
    if SPLIT_K > 1 and not SPLIT_INLINE:
        # raw (scaled) partials; row stride Nb of the contiguous workspace
        n_b = 2 * N if ACT == "swiglu" else N
        m_t = m_m[:, None] & m_n[None, :]
        p_w = p_ws + ((i_s * n_batch + i_b) * M + o_m[:, None]) * n_b + o_n[None, :]
        tl.store(p_w, acc, mask=m_t)
        if ACT == "swiglu":
            tl.store(p_w + N, acc_up, mask=m_t)
    else:
        y = epilogue(acc, acc_up, o_n, m_n, p_bias, s_bias, N, alpha, ACT, HAS_BIAS)
        _store_tile(y, p_c, p_res, i_b, o_m, o_n, m_m, m_n, s_cb, s_cm, s_cn, s_rb, s_rm, s_rn, beta, HAS_RES)


@triton.jit
def _splitk_reduce_kernel(
    p_ws, p_c, p_bias, p_res,
    M, N,
    s_cb, s_cm, s_cn, s_rb, s_rm, s_rn, s_bias,
    alpha, beta,
    ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """``C = epilogue(Σ_s ws[s])`` over ``ws [SPLIT_K, batch, M, Nb]`` fp32, summed in split order
    (deterministic). Grid ``(tiles of [M, N], batch)``."""
    i_t = tl.program_id(0)
    i_b = tl.program_id(1).to(tl.int64)
    n_batch = tl.num_programs(1)
    n_n = tl.cdiv(N, BLOCK_N)
    o_m = (i_t // n_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = (i_t % n_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_m = o_m < M
    m_n = o_n < N
    m_t = m_m[:, None] & m_n[None, :]
    n_b = 2 * N if ACT == "swiglu" else N
    slab = n_batch.to(tl.int64) * M * n_b  # elements of one split's partials
    p_w = p_ws + (i_b * M + o_m[:, None]) * n_b + o_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(p_w + s * slab, mask=m_t, other=0.0)
        if ACT == "swiglu":
            acc_up += tl.load(p_w + s * slab + N, mask=m_t, other=0.0)
    y = epilogue(acc, acc_up, o_n, m_n, p_bias, s_bias, N, alpha, ACT, HAS_BIAS)
    _store_tile(y, p_c, p_res, i_b, o_m, o_n, m_m, m_n, s_cb, s_cm, s_cn, s_rb, s_rm, s_rn, beta, HAS_RES)
