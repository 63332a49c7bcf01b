# expect: KW001
"""Offsets computed in a helper @triton.jit function; the kernel loads them without a mask."""

import triton
import triton.language as tl


@triton.jit
def _block_offsets(BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    return pid * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = _block_offsets(BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    y = x * tl.sigmoid(x)
    tl.store(y_ptr + offs, y, mask=offs < n)


def silu(x, y):
    silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
