"""Runtime support shared by every op: device/interpreter detection, input validation, output allocation."""

from kernelworks.runtime.alloc import empty, empty_like, poison_outputs
from kernelworks.runtime.device import device_name, has_gpu, interpreter_active, interpreter_dot_operand
from kernelworks.runtime.indices import (
    check_index_tensor,
    check_index_values,
    check_offsets,
    set_validation,
    validation,
    validation_enabled,
)
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
    "check_index_tensor",
    "check_index_values",
    "check_last_dim_contiguous",
    "check_offsets",
    "check_same_device",
    "check_same_dtype",
    "check_same_shape",
    "check_tensor",
    "device_name",
    "empty",
    "empty_like",
    "has_gpu",
    "interpreter_active",
    "interpreter_dot_operand",
    "poison_outputs",
    "set_validation",
    "validation",
    "validation_enabled",
]
