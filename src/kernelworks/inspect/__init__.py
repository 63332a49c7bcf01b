"""Ahead-of-time inspection of Triton kernels: compile for a target GPU on any machine (no GPU needed) and
report registers, spills, shared memory, occupancy and the SASS instruction mix, with warnings.

    from kernelworks.inspect import inspect_op, inspect_kernel
    for r in inspect_op("softmax", target="sm_90"):
        print(r.name, r.registers, r.occupancy.fraction, r.mix.summary(), r.warnings)

Modules: ``targets`` (sm_XX → GPU limits), ``compile`` (specialization and ``triton.compile``), ``capture``
(intercepting an op's launches), ``worker`` (the compile process used where Triton is the interpreter),
``sass`` (cuobjdump: resources, instruction mix), ``occupancy``,
``report`` (the report and its warnings), ``api`` (the entry points), ``render`` (text output).
"""

from kernelworks.inspect.api import (
    apply_config,
    compile_report,
    default_case,
    inspect_kernel,
    inspect_launch,
    inspect_op,
)
from kernelworks.inspect.capture import Launch, capture_launches, capture_op, plan_for_gpu
from kernelworks.inspect.occupancy import Occupancy, occupancy
from kernelworks.inspect.report import KernelReport, diagnose
from kernelworks.inspect.sass import InstructionMix, instruction_mix
from kernelworks.inspect.targets import TARGETS, Target, resolve_target

__all__ = [
    "TARGETS",
    "InstructionMix",
    "KernelReport",
    "Launch",
    "Occupancy",
    "Target",
    "apply_config",
    "capture_launches",
    "capture_op",
    "compile_report",
    "default_case",
    "diagnose",
    "inspect_kernel",
    "inspect_launch",
    "inspect_op",
    "instruction_mix",
    "occupancy",
    "plan_for_gpu",
    "resolve_target",
]
