# expect: KW006
"""Autotuned over BLOCK_N and num_stages; the launch pins BLOCK_N from a local variable."""

import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_N": b}, num_stages=s) for b in (256, 512) for s in (2, 3)],
                 key=["n_cols"])
@triton.jit
def row_max_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = tl.maximum(m, tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("-inf")))
    tl.store(out_ptr + row, tl.max(m, axis=0))


def row_max(x, out):
    block_n = 512
    row_max_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK_N=block_n)
