# expect: none
"""Next-token difference with the shifted load masked by the shifted offsets."""

import torch
import triton
import triton.language as tl


@triton.jit
def next_diff_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    has_next = offs + 1 < n
    cur = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    nxt = tl.load(x_ptr + offs + 1, mask=has_next, other=0.0)
    tl.store(out_ptr + offs, tl.where(has_next, nxt - cur, 0.0), mask=offs < n)


def next_diff(x):
    out = torch.empty_like(x)
    n = x.numel()
    next_diff_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
