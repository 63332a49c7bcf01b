# expect: none
"""Dev: offsets that start at 1 (a shift in their definition), read at -1; and an indptr-style array."""

import triton
import triton.language as tl


@triton.jit
def from_one_kernel(x, y, indptr, n, BLOCK: tl.constexpr):
    o = 1 + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    prev = tl.load(x + o - 1, mask=m, other=0.0)
    tl.store(y + o, tl.load(x + o, mask=m) + prev, mask=m)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lo = tl.load(indptr + rows, mask=rows < n - 1, other=0)
    hi = tl.load(indptr + rows + 1, mask=rows < n - 1, other=0)
    tl.store(y + rows, (hi - lo).to(tl.float32), mask=rows < n - 1)


def from_one(x, y, indptr):
    from_one_kernel[(triton.cdiv(x.numel(), 256),)](x, y, indptr, x.numel(), BLOCK=256)
