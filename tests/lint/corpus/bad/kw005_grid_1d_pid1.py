# expect: KW005
"""2-D tiled transpose launched with a 1-D grid."""

import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK + tl.arange(0, BLOCK)
    rn = pid_n * BLOCK + tl.arange(0, BLOCK)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask)
    tl.store(y_ptr + rn[None, :] * stride_ym + rm[:, None], x, mask=mask)


def transpose(x):
    M, N = x.shape
    y = torch.empty((N, M), device=x.device, dtype=x.dtype)
    transpose_kernel[(triton.cdiv(M, 32),)](x, y, M, N, x.stride(0), y.stride(0), BLOCK=32)
    return y
