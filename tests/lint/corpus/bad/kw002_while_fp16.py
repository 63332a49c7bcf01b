# expect: KW002
"""Segment sum over a CSR layout, accumulating in fp16 in a while loop."""

import triton
import triton.language as tl


@triton.jit
def segment_sum_kernel(values_ptr, offsets_ptr, out_ptr, D: tl.constexpr):
    seg = tl.program_id(0)
    start = tl.load(offsets_ptr + seg)
    end = tl.load(offsets_ptr + seg + 1)
    cols = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float16)
    i = start
    while i < end:
        acc += tl.load(values_ptr + i * D + cols)
        i += 1
    tl.store(out_ptr + seg * D + cols, acc)


def segment_sum(values, offsets, out):
    segment_sum_kernel[(offsets.numel() - 1,)](values, offsets, out, D=values.shape[1])
