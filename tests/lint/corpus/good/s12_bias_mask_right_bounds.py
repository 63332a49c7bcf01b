# expect: none
"""Linear epilogue with bias over an [M, N] tile: every mask uses the bound of its own dimension."""

import torch
import triton
import triton.language as tl


@triton.jit
def _bias_act_kernel(x_ptr, bias_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_n[None, :],
                mask=mask_m[:, None] & mask_n[None, :], other=0.0)
    b = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
    h = x.to(tl.float32) + b[None, :].to(tl.float32)
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :], tl.maximum(h, 0.0),
             mask=mask_m[:, None] & mask_n[None, :])


def bias_act(x, bias):
    M, N = x.shape
    y = torch.empty_like(x)
    _bias_act_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, bias, y, M, N, x.stride(0), y.stride(0),
                                                               BLOCK_M=64, BLOCK_N=64)
    return y
