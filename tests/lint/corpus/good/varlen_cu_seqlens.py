# expect: none
"""Variable-length sequences (cu_seqlens): per-sequence bounds loaded from memory, masked tiles."""

import triton
import triton.language as tl


@triton.jit
def varlen_scale_kernel(x_ptr, cu_seqlens_ptr, scale_ptr, stride_t, D: tl.constexpr, BLOCK_T: tl.constexpr):
    seq = tl.program_id(0)
    start = tl.load(cu_seqlens_ptr + seq).to(tl.int64)
    end = tl.load(cu_seqlens_ptr + seq + 1).to(tl.int64)
    s = tl.load(scale_ptr + seq)
    d = tl.arange(0, D)
    for t0 in range(start, end, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        mask = (t < end)[:, None]
        p = x_ptr + t[:, None] * stride_t + d[None, :]
        tl.store(p, tl.load(p, mask=mask, other=0.0) * s, mask=mask)


def varlen_scale(x, cu_seqlens, scale):
    varlen_scale_kernel[(cu_seqlens.numel() - 1,)](x, cu_seqlens, scale, x.stride(0), D=x.shape[1], BLOCK_T=32)
