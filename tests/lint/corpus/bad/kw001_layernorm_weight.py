# expect: KW001
"""LayerNorm forward: the row is masked, the weight and bias loads are not (BLOCK_N > N reads past them)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_fwd(X, Y, W, B, stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(W + cols)
    b = tl.load(B + cols)
    y = xc * rstd * w + b
    tl.store(Y + cols, y, mask=mask)


def layer_norm(x, weight, bias, eps=1e-5):
    y = torch.empty_like(x)
    M, N = x.shape
    BLOCK_N = triton.next_power_of_2(N)
    _layer_norm_fwd[(M,)](x, y, weight, bias, x.stride(0), N, eps, BLOCK_N=BLOCK_N)
    return y
