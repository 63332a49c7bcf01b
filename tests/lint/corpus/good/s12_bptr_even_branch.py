# expect: none
"""Block-pointer copy specialised on divisibility: the EVEN_M_N branch skips the boundary check, the
other branch checks both dimensions."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"EVEN_M_N": lambda args: args["M"] % args["BLOCK_M"] == 0 and args["N"] % args["BLOCK_N"] == 0})
@triton.jit
def _scale_tile_kernel(X, Y, scale, M, N, stride_xm, stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       EVEN_M_N: tl.constexpr):
    offs = (tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N)
    p_x = tl.make_block_ptr(X, (M, N), (stride_xm, 1), offs, (BLOCK_M, BLOCK_N), (1, 0))
    p_y = tl.make_block_ptr(Y, (M, N), (stride_ym, 1), offs, (BLOCK_M, BLOCK_N), (1, 0))
    if EVEN_M_N:
        tl.store(p_y, tl.load(p_x) * scale)
    else:
        tl.store(p_y, tl.load(p_x, boundary_check=(0, 1)) * scale, boundary_check=(0, 1))


def scale_tile(x, scale):
    M, N = x.shape
    y = torch.empty_like(x)
    _scale_tile_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, y, scale, M, N, x.stride(0), y.stride(0),
                                                                 BLOCK_M=64, BLOCK_N=64)
    return y
