# expect: KW004
"""Cosine similarity of two rows using tl.dot on the 1-D rows."""

import triton
import triton.language as tl


@triton.jit
def cosine_kernel(a_ptr, b_ptr, out_ptr, stride_a, stride_b, D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, D)
    a = tl.load(a_ptr + row * stride_a + offs).to(tl.float16)
    b = tl.load(b_ptr + row * stride_b + offs).to(tl.float16)
    num = tl.dot(a, b)
    den = tl.sqrt(tl.sum(a * a, axis=0) * tl.sum(b * b, axis=0))
    tl.store(out_ptr + row, num / den)


def cosine(a, b, out):
    cosine_kernel[(a.shape[0],)](a, b, out, a.stride(0), b.stride(0), D=a.shape[1])
