# expect: KW008
"""LayerNorm forward that is passed the row strides but still steps rows by N (the strides are never
used), so a sliced or padded input reads the wrong rows."""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_fwd(X, Y, W, B, stride_x_row, stride_y_row, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=1.0)
    b = tl.load(B + cols, mask=mask, other=0.0)
    tl.store(Y + row * N + cols, xc * rstd * w + b, mask=mask)


def layer_norm(x, w, b, eps=1e-5):
    x2 = x.reshape(-1, x.shape[-1])
    y = torch.empty_like(x2)
    M, N = x2.shape
    _layer_norm_fwd[(M,)](x2, y, w, b, x2.stride(0), y.stride(0), N, eps, BLOCK_N=triton.next_power_of_2(N))
    return y.view_as(x)
