# expect: KW002
"""Linear layer whose dot products are produced in fp16 and summed across K tiles."""

import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        offs_k = k * BLOCK_K + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None],
                    mask=(offs_n[None, :] < N) & (offs_k[:, None] < K), other=0.0)
        acc += tl.dot(x, w, out_dtype=tl.float16)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear(x, w, y):
    M, K = x.shape
    N = w.shape[0]
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    linear_kernel[grid](x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
