# expect: KW001
"""RMSNorm: everything masked except the output store."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd_kernel(Y, X, W, stride_y, stride_x, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    x = tl.load(X + row * stride_x + col_offsets, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + col_offsets, mask=mask, other=0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * stride_y + col_offsets, x * rstd * w)


def rms_norm(x, w, eps=1e-6):
    y = torch.empty_like(x)
    n_rows, n_cols = x.shape
    _rms_norm_fwd_kernel[(n_rows,)](y, x, w, y.stride(0), x.stride(0), n_cols, eps,
                                    BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y
