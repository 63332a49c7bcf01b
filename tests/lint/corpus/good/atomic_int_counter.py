# expect: none
"""Histogram with integer atomics: exact in any order."""

import triton
import triton.language as tl


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, n_bins, lo, width, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    bins = ((x - lo) / width).to(tl.int32)
    valid = mask & (bins >= 0) & (bins < n_bins)
    tl.atomic_add(hist_ptr + bins, 1, mask=valid)


@triton.jit
def count_nonzero_kernel(x_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(count_ptr, tl.sum((x != 0).to(tl.int32), axis=0))


def histogram(x, hist, lo, width):
    n = x.numel()
    histogram_kernel[(triton.cdiv(n, 1024),)](x, hist, n, hist.numel(), lo, width, BLOCK=1024)
    count_nonzero_kernel[(triton.cdiv(n, 1024),)](x, hist, n, BLOCK=1024)
