# expect: KW017
"""Dev: bitmap union with atomic_or over a rounded-up grid, no mask."""

import triton
import triton.language as tl


@triton.jit
def bitmap_or_kernel(dst, src, n_words, BLOCK: tl.constexpr):
    w = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    bits = tl.load(src + w, mask=w < n_words, other=0)
    tl.atomic_or(dst + w, bits)


def bitmap_or(dst, src):
    bitmap_or_kernel[(triton.cdiv(src.numel(), 128),)](dst, src, src.numel(), BLOCK=128)
