# expect: none
"""MoE expert histogram: the atomic increment carries the same mask as the load of the expert ids."""

import torch
import triton
import triton.language as tl


@triton.jit
def count_experts_kernel(topk_ids_ptr, counts_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < numel
    expert = tl.load(topk_ids_ptr + offs, mask=valid, other=0)
    tl.atomic_add(counts_ptr + expert, tl.full([BLOCK], 1, tl.int32), mask=valid)


def count_experts(topk_ids, n_experts):
    counts = torch.zeros(n_experts, dtype=torch.int32, device=topk_ids.device)
    n = topk_ids.numel()
    count_experts_kernel[(triton.cdiv(n, 1024),)](topk_ids, counts, n, BLOCK=1024)
    return counts
