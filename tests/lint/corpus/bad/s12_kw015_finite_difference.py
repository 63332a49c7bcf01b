# expect: KW015
"""Central finite difference along rows: both neighbours loaded with the centre's mask."""

import torch
import triton
import triton.language as tl


@triton.jit
def _central_diff_kernel(u_ptr, du_ptr, n_cols, stride_row, inv_2h, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = (cols > 0) & (cols < n_cols)
    base = u_ptr + row * stride_row
    left = tl.load(base + cols - 1, mask=mask, other=0.0)
    right = tl.load(base + cols + 1, mask=mask, other=0.0)
    tl.store(du_ptr + row * stride_row + cols, (right - left) * inv_2h, mask=mask)


def central_diff(u, h):
    du = torch.zeros_like(u)
    rows, cols = u.shape
    _central_diff_kernel[(rows, triton.cdiv(cols, 256))](u, du, cols, u.stride(0), 0.5 / h, BLOCK_SIZE=256)
    return du
