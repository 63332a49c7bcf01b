# expect: none
"""Append new keys into a paged KV cache: slot ids loaded, head dim constexpr, int64 slots."""

import triton
import triton.language as tl


@triton.jit
def kv_append_kernel(k_ptr, cache_ptr, slot_ptr, stride_kt, stride_ks, stride_kh, NUM_HEADS: tl.constexpr,
                     HEAD_DIM: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    h = tl.arange(0, NUM_HEADS)
    d = tl.arange(0, HEAD_DIM)
    src = k_ptr + t * stride_kt + h[:, None] * stride_kh + d[None, :]
    dst = cache_ptr + slot * stride_ks + h[:, None] * stride_kh + d[None, :]
    if slot >= 0:
        tl.store(dst, tl.load(src))


def kv_append(k, cache, slots):
    T, H, D = k.shape
    kv_append_kernel[(T,)](k, cache, slots, k.stride(0), cache.stride(0), k.stride(1), NUM_HEADS=H, HEAD_DIM=D)
