# expect: none
"""2-D elementwise kernel that takes both strides of every operand."""

import triton
import triton.language as tl


@triton.jit
def mul2d_kernel(a_ptr, b_ptr, c_ptr, M, N, stride_am, stride_an, stride_bm, stride_bn, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    rm64 = rm.to(tl.int64)
    a = tl.load(a_ptr + rm64[:, None] * stride_am + rn[None, :] * stride_an, mask=mask)
    b = tl.load(b_ptr + rm64[:, None] * stride_bm + rn[None, :] * stride_bn, mask=mask)
    tl.store(c_ptr + rm64[:, None] * stride_cm + rn[None, :] * stride_cn, a * b, mask=mask)


def mul2d(a, b, c):
    M, N = a.shape
    mul2d_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 64))](a, b, c, M, N, *a.stride(), *b.stride(), *c.stride(),
                                                          BLOCK_M=32, BLOCK_N=64)
