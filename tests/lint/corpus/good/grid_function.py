# expect: none
"""Grid given by a named function returning two axes."""

import triton
import triton.language as tl


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    p = x_ptr + rm.to(tl.int64)[:, None] * stride + rn[None, :]
    b = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    tl.store(p, tl.load(p, mask=mask) + b[None, :], mask=mask)


def bias_add(x, b):
    M, N = x.shape

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))

    bias_add_kernel[grid](x, b, M, N, x.stride(0), BLOCK_M=16, BLOCK_N=256)
