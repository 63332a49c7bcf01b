"""Gated DeltaNet (Qwen3-Next's linear attention): the fused decode step on a state pool and the chunked
prefill.

``decode.py`` / ``prefill_fwd.py`` hold the Triton kernels, ``api.py`` the public functions and custom ops,
``reference.py`` the token-by-token recurrence (the ground truth), ``spec.py`` the specs.
"""

from kernelworks.ops.gated_delta.api import gated_delta_decode, gated_delta_prefill
from kernelworks.ops.gated_delta.reference import gated_delta_rule as gated_delta_reference
from kernelworks.ops.gated_delta.spec import DECODE_SPEC, PREFILL_SPEC, SPECS

__all__ = ["DECODE_SPEC", "PREFILL_SPEC", "SPECS", "gated_delta_decode", "gated_delta_prefill", "gated_delta_reference"]
