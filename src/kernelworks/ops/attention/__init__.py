"""Attention: ``flash_attention`` (training-grade forward and deterministic backward: GQA, causal,
sliding windows, softcap, varlen) and ``decode_attention`` (paged KV cache, split-KV).

``forward.py`` / ``backward.py`` / ``decode.py`` hold the Triton kernels, ``api.py`` the public functions
and custom ops, ``reference.py`` the PyTorch math, ``spec.py`` the specs.
"""

from kernelworks.ops.attention.api import decode_attention, flash_attention
from kernelworks.ops.attention.spec import DECODE_ATTENTION_SPEC, FLASH_ATTENTION_SPEC, SPECS

__all__ = ["DECODE_ATTENTION_SPEC", "FLASH_ATTENTION_SPEC", "SPECS", "decode_attention", "flash_attention"]
