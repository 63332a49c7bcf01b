# expect: none
"""Dropout with tl.rand: seeds and offsets, masked IO, int64 element offsets."""

import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, y_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(y_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, y, p, seed):
    n = x.numel()
    dropout_kernel[(triton.cdiv(n, 1024),)](x, y, n, p, seed, BLOCK=1024)
