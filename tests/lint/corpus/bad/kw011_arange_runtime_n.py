# expect: KW011
"""Row softmax that tries to make a block as wide as the runtime row."""

import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, stride, n_cols):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, n_cols)
    x = tl.load(x_ptr + row * stride + cols).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0))


def softmax_rows(x, y):
    softmax_row_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1])
