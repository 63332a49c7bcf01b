"""Model integration: ``kernelworks.patch(model)`` runs Hugging Face transformers models on the public ops
(``pip install kernelworks[hf]``). transformers is imported only when a model is patched."""

from kernelworks.patch.api import FAMILIES, patch, patched, unpatch

__all__ = ["FAMILIES", "patch", "patched", "unpatch"]
