"""The rules, one per module, in code order. ``RULES`` is what the engine runs."""

from __future__ import annotations

from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.rules.kw001_unmasked import UnmaskedAccess
from kernelworks.lint.rules.kw002_low_precision_acc import LowPrecisionAccumulator
from kernelworks.lint.rules.kw003_host_calls import HostCodeInKernel
from kernelworks.lint.rules.kw004_dot_shape import DotShape
from kernelworks.lint.rules.kw005_grid_rank import GridRank
from kernelworks.lint.rules.kw006_autotuned_arg import AutotunedArgPassed
from kernelworks.lint.rules.kw007_int32_offsets import Int32Offsets
from kernelworks.lint.rules.kw008_contiguity import AssumedContiguous
from kernelworks.lint.rules.kw009_float_atomics import FloatAtomicAdd
from kernelworks.lint.rules.kw010_tf32_dot import ImplicitTF32
from kernelworks.lint.rules.kw011_arange_constexpr import ArangeNotConstexpr
from kernelworks.lint.rules.kw012_host_sync import HostSyncInLaunchPath
from kernelworks.lint.rules.kw013_sum_matmul import SumOfBroadcastMatmul
from kernelworks.lint.rules.kw014_mask_bound import MaskBound
from kernelworks.lint.rules.kw015_shifted_access import ShiftedAccess
from kernelworks.lint.rules.kw016_block_ptr_boundary import BlockPtrBoundary
from kernelworks.lint.rules.kw017_unmasked_atomic import UnmaskedAtomic

RULES: tuple[Rule, ...] = (
    UnmaskedAccess(),
    LowPrecisionAccumulator(),
    HostCodeInKernel(),
    DotShape(),
    GridRank(),
    AutotunedArgPassed(),
    Int32Offsets(),
    AssumedContiguous(),
    FloatAtomicAdd(),
    ImplicitTF32(),
    ArangeNotConstexpr(),
    HostSyncInLaunchPath(),
    SumOfBroadcastMatmul(),
    MaskBound(),
    ShiftedAccess(),
    BlockPtrBoundary(),
    UnmaskedAtomic(),
)
"""Every rule, in code order."""

CODES: tuple[str, ...] = tuple(r.code for r in RULES)

__all__ = ["CODES", "RULES", "Hit", "Rule"]
