# expect: none
"""Device-side TMA tensor descriptors: the hardware clips out-of-bounds boxes (loads fill zeros, stores
are dropped), so ragged M/N/K need no mask or boundary_check."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.float16))


def matmul_tma(a, b_t):
    a, b_t = a.contiguous(), b_t.contiguous()
    M, K = a.shape
    N = b_t.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=a.device))
    matmul_tma_kernel[(triton.cdiv(M, 128), triton.cdiv(N, 128))](a, b_t, c, M, N, K, BLOCK_M=128, BLOCK_N=128,
                                                                  BLOCK_K=64)
    return c
