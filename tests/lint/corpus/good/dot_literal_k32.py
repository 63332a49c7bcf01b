# expect: none
"""Small fixed-size dots: literal K of 16 and a constexpr K of 32 set at the launch."""

import triton
import triton.language as tl


@triton.jit
def proj16_kernel(x_ptr, w_ptr, y_ptr, n_rows, stride, K: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    k = tl.arange(0, K)
    j = tl.arange(0, 16)
    mask = rows[:, None] < n_rows
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride + k[None, :], mask=mask, other=0.0)
    w = tl.load(w_ptr + k[:, None] * 16 + j[None, :])
    w2 = tl.load(w_ptr + j[:, None] * 16 + j[None, :])
    y = tl.dot(tl.dot(x, w).to(tl.float16), w2)
    tl.store(y_ptr + rows[:, None].to(tl.int64) * 16 + j[None, :], y, mask=mask)


def proj16(x, w, y):
    proj16_kernel[(triton.cdiv(x.shape[0], 64),)](x, w, y, x.shape[0], x.stride(0), K=32, BLOCK_R=64)
