# expect: KW003
"""A debugging print left in the kernel."""

import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    print("x", x)
    tl.store(dst + offs, x, mask=mask)


def copy(src, dst):
    copy_kernel[(triton.cdiv(src.numel(), 256),)](src, dst, src.numel(), BLOCK=256)
