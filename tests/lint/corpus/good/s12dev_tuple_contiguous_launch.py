# expect: none
"""Dev: inputs made contiguous in a tuple assignment; the output is a fresh torch.empty: row * n_cols is right."""

import torch
import triton
import triton.language as tl


@triton.jit
def mul_rows_kernel(a_ptr, b_ptr, c_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    a = tl.load(a_ptr + row * n_cols + cols, mask=m)
    b = tl.load(b_ptr + row * n_cols + cols, mask=m)
    tl.store(c_ptr + row * n_cols + cols, a * b, mask=m)


def mul_rows(a, b):
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty(a.shape, device=a.device, dtype=a.dtype)
    mul_rows_kernel[(a.shape[0],)](a, b, c, a.shape[1], BLOCK=triton.next_power_of_2(a.shape[1]))
    return c
