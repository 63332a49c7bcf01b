# expect: none
"""Fixed-size kernel that states its divisibility with tl.static_assert."""

import triton
import triton.language as tl


@triton.jit
def bias_gelu_fixed_kernel(x_ptr, b_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(N % BLOCK == 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32) + tl.load(b_ptr + offs % N).to(tl.float32)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)))


def bias_gelu_fixed(x, b, y):
    bias_gelu_fixed_kernel[(x.numel() // 256,)](x, b, y, N=b.numel(), BLOCK=256)
