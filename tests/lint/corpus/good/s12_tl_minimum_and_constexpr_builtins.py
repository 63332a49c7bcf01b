# expect: none
"""Clipped activations with tl.minimum/tl.maximum on blocks; builtins only on constexprs and scalars
(grouped launch order as in the matmul tutorial)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _relu6_kernel(x_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_id = pid // (GROUP_M * num_pid_n)
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % (GROUP_M * num_pid_n)) // group_size_m
    VEC: tl.constexpr = max(BLOCK_N // 32, 1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.max_contiguous(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), VEC)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = rm[:, None].to(tl.int64) * stride_m + rn[None, :]
    x = tl.load(x_ptr + ptrs, mask=mask, other=0.0)
    y = tl.minimum(tl.maximum(x, 0.0), 6.0)
    tl.store(y_ptr + ptrs, y, mask=mask)


def relu6(x):
    M, N = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
    _relu6_kernel[grid](x, y, M, N, x.stride(0), BLOCK_M=64, BLOCK_N=64, GROUP_M=8)
    return y
