# expect: KW007
"""Persistent row softmax with a while loop: the row counter starts at the program id and advances by
the number of programs, in int32."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_persistent_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    while row < n_rows:
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)
        row += step


def softmax(x, programs=264):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    softmax_persistent_kernel[(min(programs, n_rows),)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                                                        BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y
