"""Activations: ``gelu``, ``silu`` and the gated ``swiglu``, ``geglu`` (two tensors or one packed [..., 2H]).

One forward and one backward Triton kernel serve all four (``kernels.py``); ``api.py`` holds the public
functions and the custom ops, ``reference.py`` the PyTorch math, ``spec.py`` the registered specs.
"""

from kernelworks.ops.activation.api import geglu, gelu, silu, swiglu
from kernelworks.ops.activation.spec import GEGLU_SPEC, GELU_SPEC, SILU_SPEC, SPECS, SWIGLU_SPEC

__all__ = ["GEGLU_SPEC", "GELU_SPEC", "SILU_SPEC", "SPECS", "SWIGLU_SPEC", "geglu", "gelu", "silu", "swiglu"]
