# expect: none
"""Top-k counting with integer atomics carrying sem/scope keywords, and a fp16 dot with fp32 acc."""

import triton
import triton.language as tl


@triton.jit
def expert_count_kernel(topk_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    e = tl.load(topk_ptr + offs, mask=mask, other=0)
    ones = tl.full([BLOCK], 1, tl.int32)
    tl.atomic_add(count_ptr + e, ones, mask=mask, sem="relaxed", scope="gpu")


def expert_count(topk, counts):
    n = topk.numel()
    expert_count_kernel[(triton.cdiv(n, 1024),)](topk, counts, n, BLOCK=1024)
