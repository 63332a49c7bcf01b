"""The norms in PyTorch eager: the ground truth (run on float64-upcast inputs) and the ``torch`` baseline
(run on the native inputs). Same signatures as the public functions.

``x + residual`` is formed in the input dtype before it is normalised (what an unfused add-then-norm
computes). RMSNorm is written out as Hugging Face's Gemma RMSNorm does it (everything in fp32 for 16-bit
inputs, the weight included, one rounding at the end — the kernels' math; it is also what HF models run in
eager mode); LayerNorm is ``torch.nn.functional.layer_norm``, as ``nn.LayerNorm`` runs it.
"""

from __future__ import annotations

import torch
from torch.nn import functional


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """fp32 for 16-bit inputs; fp32 and fp64 stay themselves."""
    return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6,
             residual: torch.Tensor | None = None, offset: float = 0.0):
    h = x if residual is None else x + residual
    hf = h.to(_compute_dtype(h))
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (offset + weight.to(hf.dtype))
    y = y.to(x.dtype)
    return y if residual is None else (y, h)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, residual: torch.Tensor | None = None):
    h = x if residual is None else x + residual
    params = [t for t in (weight, bias) if t is not None]
    if all(t.dtype == h.dtype for t in params):
        # torch's own kernel on the native dtypes (fp32 statistics inside): what nn.LayerNorm runs, so the
        # eager baseline is timed fairly
        y = functional.layer_norm(h, (h.shape[-1],), weight, bias, eps)
    else:  # mixed dtypes (fp32 parameters with bf16 x), which torch's CUDA kernel refuses: compute in fp32
        dtype = _compute_dtype(h)
        y = functional.layer_norm(h.to(dtype), (h.shape[-1],), None if weight is None else weight.to(dtype),
                                  None if bias is None else bias.to(dtype), eps).to(x.dtype)
    return y if residual is None else (y, h)
