# expect: none
"""fp32 matmul that states its dot precision explicitly (and a second one via allow_tf32)."""

import triton
import triton.language as tl


@triton.jit
def sgemm_ieee_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0).to(tl.float32)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0).to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def outer_update_kernel(u_ptr, v_ptr, s_ptr, D: tl.constexpr):
    r = tl.arange(0, D)
    u = tl.load(u_ptr + r[:, None] * D + r[None, :]).to(tl.float32)
    v = tl.load(v_ptr + r[:, None] * D + r[None, :]).to(tl.float32)
    s = tl.dot(u, v, allow_tf32=False)
    tl.store(s_ptr + r[:, None] * D + r[None, :], s)


def sgemm(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    sgemm_ieee_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, a.stride(0), b.stride(0),
                                                               c.stride(0), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)


def outer_update(u, v, s):
    outer_update_kernel[(1,)](u, v, s, D=64)
