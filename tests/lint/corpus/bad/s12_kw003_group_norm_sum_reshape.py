# expect: KW003
"""Group statistics over a reshaped tile: the builtin sum() iterates a block instead of reducing it."""

import torch
import triton
import triton.language as tl


@triton.jit
def group_mean_kernel(x_ptr, mean_ptr, stride_row, GROUP: tl.constexpr, N_GROUPS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, GROUP * N_GROUPS)
    x = tl.load(x_ptr + row * stride_row + cols).to(tl.float32)
    xg = tl.reshape(x, (N_GROUPS, GROUP))
    s = sum(xg, axis=1)
    tl.store(mean_ptr + row * N_GROUPS + tl.arange(0, N_GROUPS), s / GROUP)


def group_mean(x, group):
    rows, cols = x.shape
    mean = torch.empty(rows, cols // group, device=x.device, dtype=torch.float32)
    group_mean_kernel[(rows,)](x, mean, x.stride(0), GROUP=group, N_GROUPS=cols // group)
    return mean
