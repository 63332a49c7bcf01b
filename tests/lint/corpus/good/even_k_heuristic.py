# expect: none
"""EVEN_K specialisation from @triton.heuristics: unmasked loads only in the divisible branch."""

import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def axpy_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        x = tl.load(x_ptr + offs)
        y = tl.load(y_ptr + offs)
        tl.store(y_ptr + offs, alpha * x + y)
    else:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, alpha * x + y, mask=mask)


def axpy(alpha, x, y):
    n = x.numel()
    axpy_kernel[(triton.cdiv(n, 1024),)](x, y, alpha, n, BLOCK=1024)
