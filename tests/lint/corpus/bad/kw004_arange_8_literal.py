# expect: KW004
"""Tiny 8x8 projection done with tl.dot over a literal K of 8."""

import triton
import triton.language as tl


@triton.jit
def rope_mix_kernel(x_ptr, r_ptr, y_ptr, n_rows, stride, BLOCK_R: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    k = tl.arange(0, 8)
    j = tl.arange(0, 16)
    mask = rows[:, None] < n_rows
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride + k[None, :], mask=mask, other=0.0)
    r = tl.load(r_ptr + k[:, None] * 16 + j[None, :])
    y = tl.dot(x, r)
    tl.store(y_ptr + rows[:, None].to(tl.int64) * 16 + j[None, :], y, mask=mask)


def rope_mix(x, r, y):
    rope_mix_kernel[(triton.cdiv(x.shape[0], 64),)](x, r, y, x.shape[0], x.stride(0), BLOCK_R=64)
