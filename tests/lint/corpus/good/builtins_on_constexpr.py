# expect: none
"""Builtins and host helpers applied to constexprs only: evaluated at compile time, fine."""

import triton
import triton.language as tl


@triton.jit
def chunked_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    SUB: tl.constexpr = max(BLOCK // CHUNKS, 16)
    N_SUB: tl.constexpr = triton.cdiv(BLOCK, SUB)
    base = tl.program_id(0) * BLOCK
    total = tl.zeros([SUB], dtype=tl.float32)
    for c in tl.static_range(min(N_SUB, 8)):
        offs = base + c * SUB + tl.arange(0, SUB)
        total += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(total, axis=0))


def chunked_sum(x, out):
    n = x.numel()
    chunked_sum_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096, CHUNKS=4)
