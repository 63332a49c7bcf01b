# expect: KW008
"""2-D add of [M, N] tensors addressing rows with N as the stride."""

import triton
import triton.language as tl


@triton.jit
def add2d_kernel(a_ptr, b_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * N + rn[None, :]
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(c_ptr + offs, a + b, mask=mask)


def add2d(a, b, c):
    M, N = a.shape
    add2d_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 128))](a, b, c, M, N, BLOCK_M=32, BLOCK_N=128)
