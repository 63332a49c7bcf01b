"""The library: one module (or package) per op family. Importing this registers every family's spec."""

from kernelworks.ops import activation, softmax

__all__ = ["activation", "softmax"]
