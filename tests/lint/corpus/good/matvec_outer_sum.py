# expect: none
"""Matrix-vector product as a 2-D broadcast and a row sum: no tensor-core form, and the right spelling."""

import triton
import triton.language as tl


@triton.jit
def _gemv(w_ptr, x_ptr, y_ptr, N, K, stride_wn, BN: tl.constexpr, BK: tl.constexpr):
    rn = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN,), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        x = tl.load(x_ptr + rk, mask=rk < K, other=0.0)
        w = tl.load(w_ptr + rn[:, None].to(tl.int64) * stride_wn + rk[None, :],
                    mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(y_ptr + rn, acc, mask=rn < N)
