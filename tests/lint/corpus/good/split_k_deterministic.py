# expect: none
"""Split-K that writes fp32 partials to a workspace (reduced later) instead of float atomics."""

import triton
import triton.language as tl


@triton.jit
def splitk_partial_kernel(a_ptr, b_ptr, ws_ptr, M, N, K, stride_am, stride_bk, stride_wk, stride_wm,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * BLOCK_K, K, BLOCK_K * SPLIT_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    ws = ws_ptr + pid_k.to(tl.int64) * stride_wk + rm[:, None] * stride_wm + rn[None, :]
    tl.store(ws, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def splitk_partial(a, b, ws):
    M, K = a.shape
    N = b.shape[1]
    splitk_partial_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64), 4)](
        a, b, ws, M, N, K, a.stride(0), b.stride(0), ws.stride(0), ws.stride(1),
        BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, SPLIT_K=4)
