# expect: KW015
"""Causal-LM loss prep done in the kernel: the target of position t is the label at t + 1, loaded with the
mask of position t (one past the end for the last token)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _shift_labels_kernel(labels_ptr, targets_ptr, valid_ptr, n_tokens, ignore_index, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < n_tokens
    target = tl.load(labels_ptr + (offs + 1), mask=in_range, other=ignore_index)
    tl.store(targets_ptr + offs, target, mask=in_range)
    tl.store(valid_ptr + offs, (target != ignore_index).to(tl.int8), mask=in_range)


def shift_labels(labels, ignore_index=-100):
    n = labels.numel()
    targets = torch.empty_like(labels)
    valid = torch.empty(n, dtype=torch.int8, device=labels.device)
    _shift_labels_kernel[(triton.cdiv(n, 1024),)](labels, targets, valid, n, ignore_index, BLOCK=1024)
    return targets, valid
