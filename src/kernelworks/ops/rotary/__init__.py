"""Rotary position embedding: ``rotary_embedding(q, k, cos, sin)``, NeoX (halves) or GPT-J (interleaved)
pairs, partial rotary, q and k in one launch, forward and backward.

``kernels.py`` holds the Triton kernel (one for both directions), ``api.py`` the public function and the
custom op, ``reference.py`` the PyTorch math (Hugging Face's), ``spec.py`` the registered spec.
"""

from kernelworks.ops.rotary.api import rotary_embedding
from kernelworks.ops.rotary.spec import ROTARY_EMBEDDING_SPEC, SPECS

__all__ = ["ROTARY_EMBEDDING_SPEC", "SPECS", "rotary_embedding"]
