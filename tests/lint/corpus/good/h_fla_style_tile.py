# expect: none
"""fla-style naming (i_ ids, o_ offsets, m_ masks, b_ blocks), boundary-checked block pointers and masks."""

import triton
import triton.language as tl


@triton.jit
def chunk_scale_kernel(x, y, scale, T, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    i_t, i_k, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = i_t * BT + tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    m_t = o_t < T
    m_k = o_k < K
    p_x = tl.make_block_ptr(x + i_bh.to(tl.int64) * T * K, (T, K), (K, 1), (i_t * BT, i_k * BK), (BT, BK), (1, 0))
    b_x = tl.load(p_x, boundary_check=(0, 1)).to(tl.float32)
    b_s = tl.load(scale + o_t, mask=m_t, other=0.0)
    p_y = y + i_bh.to(tl.int64) * T * K + o_t[:, None] * K + o_k[None, :]
    tl.store(p_y, (b_x * b_s[:, None]).to(p_y.dtype.element_ty), mask=m_t[:, None] & m_k[None, :])


def chunk_scale(x, y, scale, BT=64, BK=64):
    B, H, T, K = x.shape
    chunk_scale_kernel[(triton.cdiv(T, BT), triton.cdiv(K, BK), B * H)](x, y, scale, T, K=K, BT=BT, BK=BK)
