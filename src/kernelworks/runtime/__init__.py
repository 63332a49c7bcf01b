"""Runtime support shared by every op: device/interpreter detection, input validation, output allocation."""

from kernelworks.runtime.alloc import empty, empty_like, poison_outputs
from kernelworks.runtime.device import device_name, has_gpu, interpreter_active
from kernelworks.runtime.validate import (
    check_dtype,
    check_float_tensor,
    check_last_dim_contiguous,
    check_same_device,
    check_same_dtype,
    check_same_shape,
    check_tensor,
)

__all__ = [
    "check_dtype",
    "check_float_tensor",
    "check_last_dim_contiguous",
    "check_same_device",
    "check_same_dtype",
    "check_same_shape",
    "check_tensor",
    "device_name",
    "empty",
    "empty_like",
    "has_gpu",
    "interpreter_active",
    "poison_outputs",
]
