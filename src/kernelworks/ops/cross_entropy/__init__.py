"""Losses: ``cross_entropy`` and ``fused_linear_cross_entropy`` (the LM-head projection fused with the loss,
chunked over tokens so the full logits never exist).

``kernels.py`` holds the Triton kernels (loss and gradient in one kernel, the gradient scaling pass, the
target statistics), ``api.py`` the cross-entropy op, ``fused_linear.py`` the fused op, ``reference.py`` the
PyTorch math, ``spec.py`` the registered specs.
"""

from kernelworks.ops.cross_entropy.api import cross_entropy
from kernelworks.ops.cross_entropy.fused_linear import fused_linear_cross_entropy
from kernelworks.ops.cross_entropy.spec import CROSS_ENTROPY_SPEC, FUSED_LINEAR_CROSS_ENTROPY_SPEC, SPECS

__all__ = ["CROSS_ENTROPY_SPEC", "FUSED_LINEAR_CROSS_ENTROPY_SPEC", "SPECS", "cross_entropy",
           "fused_linear_cross_entropy"]
