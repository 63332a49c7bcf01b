# expect: KW007
"""vLLM-style KV-cache write: the cache slot comes from a slot mapping, and the head offset is computed as
a product of the program id with the runtime head stride and block size: several int32 products that pass
2^31 for a large cache."""

import triton
import triton.language as tl


@triton.jit
def reshape_and_cache_kernel(key_ptr, key_cache_ptr, slot_mapping_ptr, key_stride, block_stride, page_size,
                             head_size, HEAD_BLOCK: tl.constexpr):
    token_idx = tl.program_id(0)
    head_idx = tl.program_id(1)
    slot = tl.load(slot_mapping_ptr + token_idx).to(tl.int64)
    if slot < 0:
        return
    block_idx = slot // page_size
    block_off = slot % page_size
    d = tl.arange(0, HEAD_BLOCK)
    k = tl.load(key_ptr + token_idx.to(tl.int64) * key_stride + head_idx * head_size + d, mask=d < head_size)
    dst = key_cache_ptr + block_idx * block_stride + head_idx * page_size * head_size + block_off * head_size + d
    tl.store(dst, k, mask=d < head_size)


def reshape_and_cache(key, key_cache, slot_mapping):
    n_tokens, n_heads, head_size = key.shape
    page_size = key_cache.shape[2]
    reshape_and_cache_kernel[(n_tokens, n_heads)](key, key_cache, slot_mapping, key.stride(0), key_cache.stride(0),
                                                  page_size, head_size,
                                                  HEAD_BLOCK=triton.next_power_of_2(head_size))
