# expect: none
"""fla-style chunked output: every block pointer over a ragged T (or a padded K/V) dimension is loaded and
stored with boundary_check on it."""

import triton
import triton.language as tl


@triton.jit
def chunk_fwd_o_kernel(q, h, o, scale, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(tl.cdiv(K, BK)):
        p_q = tl.make_block_ptr(q + (i_b * T * H + i_h).to(tl.int64) * K, (T, K), (H * K, 1),
                                (i_t * BT, i_k * BK), (BT, BK), (1, 0))
        p_h = tl.make_block_ptr(h + i_bh.to(tl.int64) * K * V, (K, V), (V, 1), (i_k * BK, i_v * BV), (BK, BV), (1, 0))
        b_q = tl.load(p_q, boundary_check=(0, 1))
        b_h = tl.load(p_h, boundary_check=(0, 1))
        b_o += tl.dot(b_q, b_h)
    p_o = tl.make_block_ptr(o + (i_b * T * H + i_h).to(tl.int64) * V, (T, V), (H * V, 1), (i_t * BT, i_v * BV),
                            (BT, BV), (1, 0))
    tl.store(p_o, (b_o * scale).to(p_o.dtype.element_ty), boundary_check=(0, 1))


def chunk_fwd_o(q, h, scale, BT=64):
    B, T, H, K = q.shape
    V = h.shape[-1]
    o = q.new_empty(B, T, H, V)
    BK, BV = min(64, triton.next_power_of_2(K)), min(64, triton.next_power_of_2(V))
    chunk_fwd_o_kernel[(triton.cdiv(V, BV), triton.cdiv(T, BT), B * H)](q, h, o, scale, T, H=H, K=K, V=V, BT=BT,
                                                                        BK=BK, BV=BV)
    return o
