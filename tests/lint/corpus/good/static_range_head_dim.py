# expect: none
"""Rotary embedding over a constexpr head dim in constexpr chunks: every offset is compile-time bounded."""

import triton
import triton.language as tl


@triton.jit
def rope_kernel(q_ptr, cos_ptr, sin_ptr, stride_t, HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    half = HEAD_DIM // 2
    for c in tl.static_range(0, HEAD_DIM // 2, CHUNK):
        d = c + tl.arange(0, CHUNK)
        x1 = tl.load(q_ptr + t * stride_t + d).to(tl.float32)
        x2 = tl.load(q_ptr + t * stride_t + half + d).to(tl.float32)
        cs = tl.load(cos_ptr + t * half + d).to(tl.float32)
        sn = tl.load(sin_ptr + t * half + d).to(tl.float32)
        tl.store(q_ptr + t * stride_t + d, x1 * cs - x2 * sn)
        tl.store(q_ptr + t * stride_t + half + d, x1 * sn + x2 * cs)


def rope(q, cos, sin):
    T, D = q.shape
    rope_kernel[(T,)](q, cos, sin, q.stride(0), HEAD_DIM=D, CHUNK=16)
