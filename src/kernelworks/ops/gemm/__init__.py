"""The GEMM family: ``matmul`` with fused epilogues (bias, activations, SwiGLU, residual), ``fp8_matmul``
with per-tensor / per-row / block scales, and ``grouped_matmul`` for mixture-of-experts.

``tiled.py`` holds the pointer-based kernel (interpreter, Ampere, decode with split-K), ``hopper.py`` the
persistent TMA kernel, ``forward.py`` the launch plans, ``api.py`` the public functions and custom ops,
``reference.py`` the PyTorch math, ``spec.py`` the registered specs.
"""

from kernelworks.ops.gemm.api import matmul
from kernelworks.ops.gemm.fp8 import fp8_matmul
from kernelworks.ops.gemm.grouped import grouped_matmul
from kernelworks.ops.gemm.spec import FP8_MATMUL_SPEC, GROUPED_MATMUL_SPEC, MATMUL_SPEC, SPECS

__all__ = ["FP8_MATMUL_SPEC", "GROUPED_MATMUL_SPEC", "MATMUL_SPEC", "SPECS", "fp8_matmul", "grouped_matmul",
           "matmul"]
