# expect: none
"""Sequence lengths from cu_seqlens (B + 1 entries): offs + 1 under the mask offs < B stays in range; the
scalar bos/eos loads of a varlen kernel likewise."""

import torch
import triton
import triton.language as tl


@triton.jit
def seq_lens_kernel(cu_seqlens, lens, B, BLOCK_B: tl.constexpr):
    o_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    m_b = o_b < B
    bos = tl.load(cu_seqlens + o_b, mask=m_b, other=0)
    eos = tl.load(cu_seqlens + o_b + 1, mask=m_b, other=0)
    tl.store(lens + o_b, eos - bos, mask=m_b)


@triton.jit
def varlen_mean_kernel(x, cu_seqlens, out, D, stride_t, BT: tl.constexpr, BD: tl.constexpr):
    i_n = tl.program_id(0)
    bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    o_d = tl.arange(0, BD)
    acc = tl.zeros([BD], dtype=tl.float32)
    for t0 in range(bos, eos, BT):
        o_t = t0 + tl.arange(0, BT)
        b_x = tl.load(x + o_t[:, None] * stride_t + o_d[None, :], mask=(o_t[:, None] < eos) & (o_d[None, :] < D),
                      other=0.0)
        acc += tl.sum(b_x.to(tl.float32), axis=0)
    tl.store(out + i_n.to(tl.int64) * D + o_d, acc / (eos - bos).to(tl.float32), mask=o_d < D)


def seq_lens(cu_seqlens):
    B = cu_seqlens.numel() - 1
    lens = torch.empty(B, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    seq_lens_kernel[(triton.cdiv(B, 128),)](cu_seqlens, lens, B, BLOCK_B=128)
    return lens


def varlen_mean(x, cu_seqlens):
    D = x.shape[1]
    B = cu_seqlens.numel() - 1
    out = torch.empty(B, D, device=x.device, dtype=torch.float32)
    varlen_mean_kernel[(B,)](x, cu_seqlens, out, D, x.stride(0), BT=64, BD=triton.next_power_of_2(D))
    return out
