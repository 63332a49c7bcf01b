# expect: KW003
"""L2 normalisation of rows with numpy's sqrt."""

import numpy as np
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    norm = np.sqrt(tl.sum(x * x, axis=0))
    tl.store(y_ptr + row * stride + cols, x / norm, mask=mask)


def l2norm(x, y):
    l2norm_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
