# expect: KW015
"""Short causal depthwise convolution (Mamba-style, width 4) over [T, D]: x[t - k] is read with the mask of
x[t], so the first tokens read before the start of the sequence."""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_fwd_kernel(x, w, y, T, D, stride_t, W: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    i_t, i_d = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = i_d * BD + tl.arange(0, BD)
    m_d = o_d < D
    m = (o_t[:, None] < T) & m_d[None, :]
    b_y = tl.zeros([BT, BD], dtype=tl.float32)
    for k in tl.static_range(W):
        b_w = tl.load(w + o_d * W + k, mask=m_d, other=0.0).to(tl.float32)
        b_x = tl.load(x + (o_t[:, None] - k) * stride_t + o_d[None, :], mask=m, other=0.0).to(tl.float32)
        b_y += b_x * b_w[None, :]
    tl.store(y + o_t[:, None] * stride_t + o_d[None, :], b_y.to(y.dtype.element_ty), mask=m)


def causal_conv1d(x, w):
    T, D = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(T, 64), triton.cdiv(D, 128))
    _causal_conv1d_fwd_kernel[grid](x, w, y, T, D, x.stride(0), W=w.shape[1], BT=64, BD=128)
    return y
