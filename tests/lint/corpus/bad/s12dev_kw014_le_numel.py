# expect: KW014
"""Dev: copy with an inclusive size bound."""

import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, numel, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i <= numel
    tl.store(dst + i, tl.load(src + i, mask=ok), mask=ok)


def copy(a, b):
    copy_kernel[(triton.cdiv(a.numel(), 256),)](a, b, a.numel(), BLOCK=256)
