# expect: KW017
"""Dev: segment max with atomic_max: the segment ids are loaded masked, the atomic is not."""

import triton
import triton.language as tl


@triton.jit
def segment_max_kernel(vals, seg_ids, out, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    seg = tl.load(seg_ids + o, mask=m, other=0)
    v = tl.load(vals + o, mask=m, other=float("-inf"))
    tl.atomic_max(out + seg, v)


def segment_max(vals, seg_ids, out):
    segment_max_kernel[(triton.cdiv(vals.numel(), 256),)](vals, seg_ids, out, vals.numel(), BLOCK=256)
