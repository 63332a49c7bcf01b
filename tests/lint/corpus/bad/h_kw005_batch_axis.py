# expect: KW005
"""Per-batch bias add: the kernel reads the batch from axis 1, the grid only has the row axis."""

import triton
import triton.language as tl


@triton.jit
def batch_bias_kernel(x_ptr, b_ptr, stride_b, stride_r, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    batch = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    p = x_ptr + batch * stride_b + row * stride_r + cols
    tl.store(p, tl.load(p, mask=mask) + tl.load(b_ptr + batch * n_cols + cols, mask=mask), mask=mask)


def batch_bias(x, b):
    B, R, C = x.shape
    grid = (B * R,)
    batch_bias_kernel[grid](x, b, x.stride(0), x.stride(1), R, C, BLOCK=triton.next_power_of_2(C))
