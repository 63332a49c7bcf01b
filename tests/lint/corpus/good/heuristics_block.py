# expect: none
"""BLOCK and num_warps from @triton.heuristics; launch passes neither."""

import triton
import triton.language as tl


@triton.heuristics({"BLOCK_N": lambda args: triton.next_power_of_2(args["n_cols"])})
@triton.jit
def l1_normalize_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    denom = tl.maximum(tl.sum(tl.abs(x), axis=0), 1e-12)
    tl.store(y_ptr + row * stride + cols, x / denom, mask=mask)


def l1_normalize(x, y):
    l1_normalize_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1])
