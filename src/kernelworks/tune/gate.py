"""The compile gate: every candidate config compiled ahead of time, in parallel, before any of them runs.

For one case and a batch of configs, :class:`CompileGate` records the launches each config makes — the
spec's subject runs under ``spec.configured(config)`` inside ``kw inspect``'s capture
(:func:`~kernelworks.inspect.capture.capture_op`: planned for the target GPU, no kernel run), so the kernel
*path* a config picks is captured, not only its constexprs — then compiles every distinct launch for the
target in worker processes (:func:`~kernelworks.inspect.worker.compile_many`), each bounded by a time-out,
and reads what ptxas allotted (``cuobjdump``: registers, spilled bytes). A config is turned away, never run,
when one of its kernels

* fails to compile (``compile error``) or runs past the time-out (``compile timeout``),
* asks for more shared memory per block than the target has (``out of shared memory``: Triton would raise
  ``OutOfResources`` at the launch), or
* spills more than ``spill_limit`` bytes per thread (``spills``).

Default spill bound, :data:`SPILL_LIMIT_BYTES` = 64 bytes per thread: small spills are not worth a
rejection — of matmul's declared configs compiled for sm_90, ``32×64×256`` spills 8 B (stack) on the Llama-3
8B qkv M = 64 case and ran within 7% of the winner on the H100 (``benchmarks/results/h100-80gb-hbm3/tune``),
so a zero bound would have thrown away a near-best config; a spill past a few 16-byte vectors means values
live in local memory inside the main loop, which no config worth keeping does. ``--spill-limit`` moves it.

A config whose launches cannot be captured (a launcher that reads input *values* that the stand-in inputs
of large cases do not have) is not judged here: it runs, and the run's own check decides.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelworks.spec import Case, OpSpec

SPILL_LIMIT_BYTES = 64
"""Spilled bytes per thread (stack + local) above which a config is not run (see the module docstring)."""
COMPILE_TIMEOUT_S = 120.0
"""Seconds one kernel's compile may take (the slowest of matmul's, warp-specialised, takes ~10 s)."""


def default_workers() -> int:
    """Compile processes at once: half the CPU cores (a compile is one busy core and ~1 GB), 1 to 8."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


@dataclass
class CompileCheck:
    """One config's compile verdict: ``ok``, ``compile error``, ``compile timeout``, ``out of shared
    memory``, ``spills``, or ``unchecked`` (its launches could not be captured; the run decides)."""

    verdict: str
    detail: str = ""
    registers: int | None = None
    """The most registers per thread of its kernels."""
    spill_bytes: int | None = None
    """The most spilled bytes per thread (stack + local) of its kernels."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict in ("ok", "unchecked")


def current_target() -> Any:
    """The :class:`~kernelworks.inspect.targets.Target` of this machine's GPU, None without a GPU or for an
    architecture ``kw inspect`` does not list."""
    import torch

    from kernelworks.inspect.targets import TARGETS

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return next((t for t in TARGETS.values() if t.arch == 10 * major + minor), None)


class CompileGate:
    """Compile-checks configs of one spec on one case for ``target`` (see the module docstring); verdicts
    are kept, so asking twice for a config compiles it once."""

    def __init__(self, spec: OpSpec, case: Case, target: Any, *, spill_limit: int = SPILL_LIMIT_BYTES,
                 timeout_s: float = COMPILE_TIMEOUT_S, workers: int | None = None, mode: str = "fwd") -> None:
        from kernelworks.inspect.targets import resolve_target

        self.spec, self.case, self.target = spec, case, resolve_target(target)
        self.mode = mode  # the pass whose launches (and search-space hook) are compiled: fwd or bwd
        self.spill_limit, self.timeout_s = spill_limit, timeout_s
        self.workers = workers or default_workers()
        self._checked: dict[str, CompileCheck] = {}
        self._compiled: dict[str, Any] = {}  # compile key -> Compiled | Exception | (registers, spill) tuple
        self._launch_keys: dict[str, tuple] = {}  # config key -> its launches: compile key, grid, scalar args

    def launches(self, config: Mapping[str, Any]) -> tuple | None:
        """What ``config``'s captured launches are (after :meth:`check`): per launch its compile key, grid and
        scalar arguments; None if not captured."""
        return self._launch_keys.get(self._key(config))

    @staticmethod
    def _key(config: Mapping[str, Any]) -> str:
        return repr(sorted(config.items()))

    def check(self, configs: Sequence[Mapping[str, Any]]) -> list[CompileCheck]:
        """The verdict of each config (``{}``: the op's own choice), compiling the new ones in parallel."""
        from kernelworks.inspect.api import compile_key
        from kernelworks.inspect.capture import capture_op
        from kernelworks.inspect.compile import launch_options, specialize
        from kernelworks.inspect.worker import CompileJob, compile_many

        t0 = time.perf_counter()
        todo: dict[str, list[str]] = {}  # config key -> its launches' compile keys
        jobs: dict[str, CompileJob] = {}
        opts = launch_options()
        for config in configs:
            ck = self._key(config)
            if ck in self._checked or ck in todo:
                continue
            try:
                launches = capture_op(self.spec, self.case, mode=self.mode,
                                      capability=divmod(self.target.arch, 10), config=dict(config) or None)
                keys, identity = [], []
                for launch in launches:
                    key = compile_key(launch, self.target)
                    keys.append(key)
                    # what else a config can change: the grid and the scalar arguments (not in compile keys)
                    scalars = tuple((k, v) for k, v in launch.args.items() if isinstance(v, (int, float, bool)))
                    identity.append((key, launch.grid, scalars))
                    if key not in self._compiled and key not in jobs:
                        jobs[key] = CompileJob(launch.kernel, specialize(launch.kernel, launch.args, self.target),
                                               self.target, {k: v for k, v in launch.options.items() if k in opts})
            except Exception as e:  # planning failed here; running it will say whether the config is at fault
                self._checked[ck] = CompileCheck("unchecked", f"launches not captured: {type(e).__name__}: {e}"[:300])
                continue
            todo[ck] = keys
            self._launch_keys[ck] = tuple(identity)
        if jobs:
            for key, result in zip(jobs, compile_many(list(jobs.values()), workers=self.workers,
                                                      timeout_s=self.timeout_s)):
                self._compiled[key] = self._resources(result)
        seconds = time.perf_counter() - t0
        for ck, keys in todo.items():
            self._checked[ck] = self._judge([self._compiled[k] for k in keys], seconds)
        return [self._checked[self._key(c)] for c in configs]

    def _resources(self, result: Any) -> Any:
        """A compile's outcome as ``(registers, spill_bytes, shared_bytes, name)``, or the exception."""
        if isinstance(result, Exception):
            return result
        from kernelworks.inspect.sass import resource_usage

        try:
            res = resource_usage(result.cubin, result.name)
        except (RuntimeError, OSError):  # no cuobjdump: spills unknown, shared memory still checked
            return (None, None, result.shared_bytes, result.name)
        return (res.registers, res.stack_bytes + res.local_bytes, result.shared_bytes, result.name)

    def _judge(self, outcomes: list[Any], seconds: float) -> CompileCheck:
        from kernelworks.inspect.worker import CompileTimeoutError

        if not outcomes:
            return CompileCheck("unchecked", "no kernel launch captured", seconds=seconds)
        for out in outcomes:
            if isinstance(out, CompileTimeoutError):
                return CompileCheck("compile timeout", str(out)[:300], seconds=seconds)
            if isinstance(out, Exception):
                lines = [line.strip() for line in str(out).splitlines() if line.strip()]
                # Triton's CompilationError: "at 4:8:", the source, then the cause on the last line
                said = lines[0] if len(lines) < 2 else f"{lines[0]} … {lines[-1]}"
                return CompileCheck("compile error", said[:300], seconds=seconds)
        regs = [r for r, *_ in outcomes if r is not None]
        spills = [s for _, s, *_ in outcomes if s is not None]
        check = CompileCheck("ok", registers=max(regs) if regs else None,
                             spill_bytes=max(spills) if spills else None, seconds=seconds)
        limit = self.target.gpu.smem_per_block
        for _, spill, shared, name in outcomes:
            if shared > limit:
                check.verdict = "out of shared memory"
                check.detail = f"{name}: {shared / 1024:.0f} KiB per block > {limit // 1024} KiB on {self.target.name}"
                return check
            if spill is not None and spill > self.spill_limit:
                check.verdict = "spills"
                check.detail = f"{name}: {spill} B per thread > {self.spill_limit} B"
                return check
        return check
