# expect: none
"""A while loop over tiles of a row with a masked tail."""

import triton
import triton.language as tl


@triton.jit
def count_positive_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    total = tl.zeros([BLOCK], dtype=tl.int32)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        total += (x > 0).to(tl.int32)
        start += BLOCK
    tl.store(out_ptr + row, tl.sum(total, axis=0))


def count_positive(x, out):
    count_positive_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=1024)
