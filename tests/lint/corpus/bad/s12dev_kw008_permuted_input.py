# expect: KW008
"""Dev: channels-last conversion done with permute() and handed to a kernel that reads flat [rows, C] memory."""

import torch
import triton
import triton.language as tl


@triton.jit
def channel_bias_kernel(x_ptr, b_ptr, y_ptr, n_rows, C: tl.constexpr, ROWS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, C)
    offs = r[:, None].to(tl.int64) * C + c[None, :]
    m = (r < n_rows)[:, None]
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, x + tl.load(b_ptr + c)[None, :], mask=m)


def channel_bias(x, b):
    N, C, H, W = x.shape
    xs = x.permute(0, 2, 3, 1)
    y = torch.empty((N, H, W, C), device=x.device, dtype=x.dtype)
    rows = N * H * W
    channel_bias_kernel[(triton.cdiv(rows, 16),)](xs, b, y, rows, C=C, ROWS=16)
    return y
