# expect: KW002
"""Sum over a long row, accumulated in bf16 tile by tile."""

import triton
import triton.language as tl


@triton.jit
def _sum_rows_kernel(x_ptr, out_ptr, stride_x, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.bfloat16)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
        acc += x
    tl.store(out_ptr + row, tl.sum(acc.to(tl.float32), axis=0))


def sum_rows(x, out):
    _sum_rows_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=2048)
