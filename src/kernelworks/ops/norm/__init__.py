"""Normalisation: ``layer_norm`` and ``rms_norm`` over the last dimension, with an optional fused residual
add (``h = x + residual``, returned) and Gemma's ``(offset + weight)`` scaling.

``forward.py`` / ``backward.py`` hold the Triton kernels (one set for both norms, ``IS_RMS`` constexpr),
``api.py`` the public functions and custom ops, ``reference.py`` the PyTorch math, ``spec.py`` the specs.
"""

from kernelworks.ops.norm.api import layer_norm, rms_norm
from kernelworks.ops.norm.spec import LAYER_NORM_SPEC, RMS_NORM_SPEC, SPECS

__all__ = ["LAYER_NORM_SPEC", "RMS_NORM_SPEC", "SPECS", "layer_norm", "rms_norm"]
