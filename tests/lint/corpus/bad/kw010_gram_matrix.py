# expect: KW010
"""Gram matrix X @ X^T of an fp32 input, accumulated over feature tiles."""

import triton
import triton.language as tl


@triton.jit
def gram_kernel(x_ptr, g_ptr, n, d, stride_x, stride_g, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    ri = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rj = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for d0 in range(0, d, BLOCK_D):
        rd = d0 + tl.arange(0, BLOCK_D)
        xi = tl.load(x_ptr + ri[:, None] * stride_x + rd[None, :], mask=(ri[:, None] < n) & (rd[None, :] < d),
                     other=0.0)
        xj = tl.load(x_ptr + rj[:, None] * stride_x + rd[None, :], mask=(rj[:, None] < n) & (rd[None, :] < d),
                     other=0.0)
        acc += tl.dot(xi.to(tl.float32), tl.trans(xj.to(tl.float32)))
    tl.store(g_ptr + ri[:, None] * stride_g + rj[None, :], acc, mask=(ri[:, None] < n) & (rj[None, :] < n))


def gram(x, g):
    n, d = x.shape
    gram_kernel[(triton.cdiv(n, 64), triton.cdiv(n, 64))](x, g, n, d, x.stride(0), g.stride(0), BLOCK=64, BLOCK_D=32)
