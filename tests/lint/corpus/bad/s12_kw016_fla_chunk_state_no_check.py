# expect: KW016
"""flash-linear-attention style chunked state accumulation: h += k^T v over chunks of BT tokens, block
pointers over [T, K] and [T, V] loaded without boundary_check although T need not be a multiple of BT."""

import torch
import triton
import triton.language as tl


@triton.jit
def chunk_fwd_state_kernel(k, v, h, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                           BK: tl.constexpr, BV: tl.constexpr):
    i_k, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    for i_t in range(tl.cdiv(T, BT)):
        p_k = tl.make_block_ptr(k + (i_b * T * H + i_h).to(tl.int64) * K, (K, T), (1, H * K),
                                (i_k * BK, i_t * BT), (BK, BT), (0, 1))
        p_v = tl.make_block_ptr(v + (i_b * T * H + i_h).to(tl.int64) * V, (T, V), (H * V, 1),
                                (i_t * BT, i_v * BV), (BT, BV), (1, 0))
        b_k = tl.load(p_k)
        b_v = tl.load(p_v)
        b_h += tl.dot(b_k, b_v)
    p_h = tl.make_block_ptr(h + i_bh.to(tl.int64) * K * V, (K, V), (V, 1), (i_k * BK, i_v * BV), (BK, BV), (1, 0))
    tl.store(p_h, b_h.to(p_h.dtype.element_ty), boundary_check=(0, 1))


def chunk_fwd_state(k, v, BT=64):
    B, T, H, K = k.shape
    V = v.shape[-1]
    h = k.new_empty(B, H, K, V, dtype=torch.float32)
    BK, BV = min(64, triton.next_power_of_2(K)), min(64, triton.next_power_of_2(V))
    grid = (triton.cdiv(K, BK), triton.cdiv(V, BV), B * H)
    chunk_fwd_state_kernel[grid](k, v, h, T, H=H, K=K, V=V, BT=BT, BK=BK, BV=BV)
    return h
