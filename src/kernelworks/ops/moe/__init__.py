"""Mixture-of-experts token routing: ``moe_sort`` (pairs grouped by expert), ``moe_permute`` (tokens into
expert order) and ``moe_unpermute`` (expert outputs back to their tokens, weighted and summed), forward and
backward, around :func:`kernelworks.grouped_matmul`.

``kernels.py`` holds the Triton row kernels, ``api.py`` the public functions and the custom ops,
``reference.py`` the PyTorch math (Hugging Face's), ``spec.py`` the registered specs.
"""

from kernelworks.ops.moe.api import moe_permute, moe_sort, moe_unpermute
from kernelworks.ops.moe.spec import MOE_PERMUTE_SPEC, MOE_UNPERMUTE_SPEC, SPECS

__all__ = ["MOE_PERMUTE_SPEC", "MOE_UNPERMUTE_SPEC", "SPECS", "moe_permute", "moe_sort", "moe_unpermute"]
