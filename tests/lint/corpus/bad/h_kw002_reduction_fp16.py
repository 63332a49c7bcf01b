# expect: KW002
"""Squared-norm reduction over a long row, accumulator built with tl.full in fp16."""

import triton
import triton.language as tl


@triton.jit
def sq_norm_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.full([BLOCK], 0, dtype=tl.float16)
    for c in range(0, tl.cdiv(n_cols, BLOCK)):
        cols = c * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float16)
        acc = acc + x * x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def sq_norm(x, out):
    sq_norm_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=1024)
