# expect: KW001
"""Liger-style SwiGLU forward with the column mask dropped from the store."""

import triton
import triton.language as tl


@triton.jit
def _swiglu_forward_kernel(a_ptr, b_ptr, c_ptr, stride, n_cols: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0).to(tl.int64)
    a_ptr += program_id * stride
    b_ptr += program_id * stride
    c_ptr += program_id * stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    a_row = tl.load(a_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    b_row = tl.load(b_ptr + col_offsets, mask=mask, other=0)
    c_row = a_row * tl.sigmoid(a_row) * b_row
    tl.store(c_ptr + col_offsets, c_row)


def swiglu_forward(a, b, c):
    n_rows, n_cols = a.shape
    _swiglu_forward_kernel[(n_rows,)](a, b, c, c.stride(-2), n_cols=n_cols,
                                      BLOCK_SIZE=triton.next_power_of_2(n_cols))
