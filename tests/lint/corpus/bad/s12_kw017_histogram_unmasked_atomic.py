# expect: KW017
"""Token histogram for MoE routing: the expert ids are loaded with a mask, but the atomic increment is
not masked, so the lanes past n_tokens add their `other=0` to expert 0's count."""

import torch
import triton
import triton.language as tl


@triton.jit
def expert_histogram_kernel(topk_ids_ptr, counts_ptr, n_tokens, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    expert = tl.load(topk_ids_ptr + offs, mask=offs < n_tokens, other=0)
    tl.atomic_add(counts_ptr + expert, 1)


def expert_histogram(topk_ids, n_experts):
    counts = torch.zeros(n_experts, dtype=torch.int32, device=topk_ids.device)
    n = topk_ids.numel()
    expert_histogram_kernel[(triton.cdiv(n, 1024),)](topk_ids, counts, n, BLOCK=1024)
    return counts
