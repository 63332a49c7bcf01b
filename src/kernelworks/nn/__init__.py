"""Thin ``nn.Module`` wrappers over the functional ops, for models that hold parameters (norms) or want a
module-shaped loss. They call the same kernels as ``kernelworks.<op>`` and work under ``torch.compile``."""

from kernelworks.nn.loss import CrossEntropyLoss, FusedLinearCrossEntropyLoss
from kernelworks.nn.norm import LayerNorm, RMSNorm

__all__ = ["CrossEntropyLoss", "FusedLinearCrossEntropyLoss", "LayerNorm", "RMSNorm"]
