# expect: none
"""2-D tile with row and column masks combined by broadcasting."""

import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    o_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_r = o_m < M
    m_c = o_n < N
    mask = m_r[:, None] & m_c[None, :]
    x = tl.load(x_ptr + o_m[:, None].to(tl.int64) * stride_xm + o_n[None, :], mask=mask)
    tl.store(y_ptr + o_n[None, :].to(tl.int64) * stride_ym + o_m[:, None], x, mask=mask)


def transpose(x, y):
    M, N = x.shape
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    transpose_kernel[grid](x, y, M, N, x.stride(0), y.stride(0), BLOCK_M=32, BLOCK_N=32)
