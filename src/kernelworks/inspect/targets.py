"""Compile targets: the ``sm_XX`` names ``kw inspect`` accepts, and the GPU whose limits each one stands for."""

from __future__ import annotations

from dataclasses import dataclass

from triton.backends.compiler import GPUTarget

from kernelworks.hardware import GPUS, GPUSpec


@dataclass(frozen=True)
class Target:
    """One compile target: ``sm_90`` is compute capability 9.0, reported against an H100-SXM's limits."""

    name: str
    arch: int
    gpu_name: str

    @property
    def gpu(self) -> GPUSpec:
        """The :data:`kernelworks.hardware.GPUS` entry whose per-SM limits the occupancy uses."""
        return GPUS[self.gpu_name]

    def triton_target(self) -> GPUTarget:
        """What ``triton.compile`` takes (``sm_90`` and ``sm_100`` compile to the ``a`` variants)."""
        return GPUTarget("cuda", self.arch, 32)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("sm_80", 80, "A100-SXM4-80GB"),
        Target("sm_89", 89, "RTX-4090"),
        Target("sm_90", 90, "H100-SXM"),
        Target("sm_100", 100, "B200"),
    )
}
DEFAULT_TARGET = "sm_90"


def resolve_target(target: str | Target) -> Target:
    """``Target`` from ``"sm_90"``, ``"sm90"`` or ``"90"``; unknown names raise ``ValueError`` listing the known."""
    if isinstance(target, Target):
        return target
    key = target.strip().lower().replace("sm_", "").replace("sm", "")
    for t in TARGETS.values():
        if str(t.arch) == key:
            return t
    raise ValueError(f"target: unknown {target!r}; expected one of {', '.join(TARGETS)}")
