# expect: none
"""fla-style kernel over [B, T, H, K] that receives a transposed view together with all of its strides
and uses them, so any layout works."""

import torch
import triton
import triton.language as tl


@triton.jit
def l2norm_strided_kernel(x, y, T, H, s_xb, s_xt, s_xh, s_yb, s_yt, s_yh, K: tl.constexpr, BT: tl.constexpr,
                          eps: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    o_t = i_t * BT + tl.arange(0, BT)
    o_k = tl.arange(0, K)
    m_t = o_t < T
    p_x = x + i_b * s_xb + i_h * s_xh + o_t[:, None].to(tl.int64) * s_xt + o_k[None, :]
    b_x = tl.load(p_x, mask=m_t[:, None], other=0.0).to(tl.float32)
    b_r = tl.sqrt(tl.sum(b_x * b_x, axis=1) + eps)
    p_y = y + i_b * s_yb + i_h * s_yh + o_t[:, None].to(tl.int64) * s_yt + o_k[None, :]
    tl.store(p_y, (b_x / b_r[:, None]).to(y.dtype.element_ty), mask=m_t[:, None])


def l2norm_heads(q):
    B, T, H, K = q.shape
    x = q.transpose(1, 2)  # [B, H, T, K] view: strides passed below
    y = torch.empty_like(q)
    l2norm_strided_kernel[(triton.cdiv(T, 64), B * H)](x, y, T, H, x.stride(0), x.stride(2), x.stride(1),
                                                       y.stride(0), y.stride(1), y.stride(2), K=K, BT=64, eps=1e-6)
    return y
