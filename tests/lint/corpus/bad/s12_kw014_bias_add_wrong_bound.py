# expect: KW014
"""Linear epilogue (bias + GELU) over an [M, N] tile: the bias is masked with M, the number of rows."""

import torch
import triton
import triton.language as tl


@triton.jit
def _bias_gelu_fwd_kernel(x_ptr, bias_ptr, y_ptr, M, N, stride_xm, stride_ym,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_n[None, :], mask=mask, other=0.0)
    # the bias has N entries
    b = tl.load(bias_ptr + offs_n, mask=offs_n < M, other=0.0)
    h = x.to(tl.float32) + b[None, :].to(tl.float32)
    y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)


def bias_gelu(x, bias):
    M, N = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 128))
    _bias_gelu_fwd_kernel[grid](x, bias, y, M, N, x.stride(0), y.stride(0), BLOCK_M=64, BLOCK_N=128)
    return y
