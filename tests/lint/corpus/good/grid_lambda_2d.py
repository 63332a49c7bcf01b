# expect: none
"""2-D meta-parameter grid matching program_id(0) and program_id(1)."""

import triton
import triton.language as tl


@triton.jit
def add_outer_kernel(a_ptr, b_ptr, c_ptr, M, N, stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    a = tl.load(a_ptr + rm, mask=rm < M, other=0.0)
    b = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :], a[:, None] + b[None, :], mask=c_mask)


def add_outer(a, b, c):
    M, N = a.numel(), b.numel()
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))  # noqa: E731
    add_outer_kernel[grid](a, b, c, M, N, c.stride(0), BLOCK_M=32, BLOCK_N=64)
