"""Activations: ``gelu``, ``silu`` and the gated ``swiglu``, ``geglu`` (two tensors or one packed [..., 2H]),
and ``gated_mlp``, the whole gated MLP with the activation recomputed in its backward (``mlp.py``).

One forward and one backward Triton kernel serve all five (``kernels.py``); ``api.py`` holds the public
functions and the custom ops, ``reference.py`` the PyTorch math, ``spec.py`` the registered specs.
"""

from kernelworks.ops.activation.api import geglu, gelu, silu, swiglu
from kernelworks.ops.activation.mlp import gated_mlp
from kernelworks.ops.activation.spec import GATED_MLP_SPEC, GEGLU_SPEC, GELU_SPEC, SILU_SPEC, SPECS, SWIGLU_SPEC

__all__ = [
    "GATED_MLP_SPEC", "GEGLU_SPEC", "GELU_SPEC", "SILU_SPEC", "SPECS", "SWIGLU_SPEC",
    "gated_mlp", "geglu", "gelu", "silu", "swiglu",
]
