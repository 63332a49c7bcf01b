"""``inspect_op`` and ``inspect_kernel``: compile for a target ahead of time and report on what came out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelworks.inspect.capture import REAL_INPUTS_MAX_BYTES, Launch, capture_op
from kernelworks.inspect.compile import (
    Specialization,
    as_jit,
    compile_for,
    launch_options,
    parse_signature,
    specialize,
    uses_dot,
)
from kernelworks.inspect.occupancy import SMEM_RESERVED_PER_BLOCK, occupancy
from kernelworks.inspect.report import KernelReport, diagnose
from kernelworks.inspect.sass import disassemble, instruction_mix, resource_usage
from kernelworks.inspect.targets import DEFAULT_TARGET, Target, resolve_target
from kernelworks.spec import Case, OpSpec, load_spec


def compile_report(kernel: Any, spec: Specialization, target: str | Target,
                   options: Mapping[str, Any] | None = None) -> KernelReport:
    """Compile ``kernel`` with a ready :class:`Specialization` and build its report (warnings included)."""
    t = resolve_target(target)
    compiled = compile_for(kernel, spec, t, options)
    res = resource_usage(compiled.cubin, compiled.name)
    sass = disassemble(compiled.cubin)
    # Triton's shared memory is all dynamic; on sm_90+ ptxas lists the per-block system reserve (1 KiB) as
    # static, which the occupancy adds for every target, so it is not counted twice
    static = max(res.static_shared_bytes - SMEM_RESERVED_PER_BLOCK, 0) if t.arch >= 90 else res.static_shared_bytes
    shared = compiled.shared_bytes + static
    report = KernelReport(
        name=as_jit(kernel).fn.__name__, target=t.name, gpu=t.gpu.name, num_warps=compiled.num_warps,
        num_stages=compiled.num_stages, signature=dict(spec.signature), constexprs=spec.constexpr_values(),
        divisible=spec.divisible(), registers=res.registers, stack_bytes=res.stack_bytes,
        local_bytes=res.local_bytes, shared_bytes=shared,
        occupancy=occupancy(t.gpu, registers=res.registers, shared_bytes=shared, num_warps=compiled.num_warps),
        mix=instruction_mix(sass), uses_dot=uses_dot(kernel), sm_count=t.gpu.sm_count,
        ptx=compiled.ptx, sass=sass,
    )
    report.warnings = diagnose(report)
    return report


def inspect_kernel(fn: Any, signature: str | Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
                   target: str | Target = DEFAULT_TARGET, num_warps: int = 4, num_stages: int = 3,
                   **options: Any) -> KernelReport:
    """Compile one ``@triton.jit`` function from types given by hand and report on it.

    Args:
        fn: the kernel (``@triton.jit``-decorated, interpreted or not, or the plain function).
        signature: ``"x_ptr=*fp16,y_ptr=*fp16,n=i32"`` or a dict; ``:16`` marks a scalar divisible by 16,
            ``*fp16:1`` a pointer that is not 16-byte aligned (pointers are assumed aligned otherwise).
        constexprs: values of the ``tl.constexpr`` parameters (defaults fill the rest).
        target: ``sm_80``, ``sm_90`` or ``sm_100`` (``sm_89`` too).
        num_warps, num_stages, options: launch options (``maxnreg=…``).

    Example:
        >>> r = inspect_kernel(add_kernel, "x=*fp16,y=*fp16,n=i32:16", {"BLOCK": 1024}, "sm_90")
        >>> r.registers, r.mix.global_loads   # (14, Counter({128: 1}))
    """
    spec = parse_signature(fn, signature, constexprs)
    return compile_report(fn, spec, target, {"num_warps": num_warps, "num_stages": num_stages, **options})


def apply_config(launch: Launch, config: Mapping[str, Any]) -> tuple[Launch, set[str]]:
    """``launch`` with ``config``'s values replacing same-named parameters and launch options; also returns
    the config keys it used."""
    names = set(as_jit(launch.kernel).arg_names)
    opts = launch_options()
    args, options, used = dict(launch.args), dict(launch.options), set()
    for key, value in config.items():
        if key in names:
            args[key] = value
            used.add(key)
        elif key in opts:
            options[key] = value
            used.add(key)
    return Launch(launch.kernel, args, options, launch.grid), used


def inspect_launch(launch: Launch, target: str | Target = DEFAULT_TARGET) -> KernelReport:
    """Compile a captured launch for ``target`` with the types and hints its arguments give."""
    t = resolve_target(target)
    options = {k: v for k, v in launch.options.items() if k in launch_options()}
    report = compile_report(launch.kernel, specialize(launch.kernel, launch.args, t), t, options)
    report.grid = launch.grid
    return report


def default_case(spec: OpSpec) -> Case:
    """The case inspected when none is named: the first bench case tagged ``quick`` (a real model shape),
    else the first bench case, else the first check case."""
    for c in spec.bench_cases:
        if "quick" in c.tags:
            return c
    pool = list(spec.bench_cases) or list(spec.check_cases)
    if not pool:
        raise ValueError(f"spec {spec.name!r} has no cases")
    return pool[0]


def find_cases(spec: OpSpec, case: str | Case | None) -> list[Case]:
    """Cases named ``case`` (name or id) among the bench and the check cases; the default case for None."""
    if case is None:
        return [default_case(spec)]
    if isinstance(case, Case):
        return [case]
    found = [c for c in (*spec.bench_cases, *spec.check_cases) if case in (c.name, c.id)]
    if not found:
        known = [c.id for c in (*spec.bench_cases, *spec.check_cases)]
        raise KeyError(f"spec {spec.name!r} has no case named {case!r}; known: {known}")
    return found


def compile_key(launch: Launch, target: Target) -> str:
    """Equal for two launches exactly when they compile to the same binary for ``target``."""
    spec = specialize(launch.kernel, launch.args, target)
    return repr((id(as_jit(launch.kernel)), spec.signature, sorted(spec.constexprs.items()),
                 sorted(spec.attrs.items()), sorted(launch.options.items())))


def _dedupe(launches: Sequence[Launch], target: Target) -> list[tuple[Launch, int]]:
    """Launches that compile to the same kernel, counted once."""
    seen: dict[str, list] = {}
    for launch in launches:
        key = compile_key(launch, target)
        if key in seen:
            seen[key][1] += 1
        else:
            seen[key] = [launch, 1]
    return [(launch, n) for launch, n in seen.values()]


def inspect_op(spec_or_name: OpSpec | str, case: str | Case | None = None, target: str | Target = DEFAULT_TARGET,
               *, modes: Sequence[str] = ("fwd",), config: Mapping[str, Any] | None = None,
               real_max_bytes: int = REAL_INPUTS_MAX_BYTES) -> list[KernelReport]:
    """Every kernel one call of the op launches for ``case``, compiled for ``target``, with its report.

    Args:
        spec_or_name: an :class:`OpSpec`, a registered op name or ``path/to/file.py:SPEC``.
        case: a case name or id (all cases of that name, e.g. each dtype), a :class:`Case`, or None for
            :func:`default_case`.
        target: ``sm_80``, ``sm_90`` (default) or ``sm_100``.
        modes: any of ``"fwd"`` (an inference call), ``"train"`` (the forward of a call recording a graph:
            kernels that also keep what the backward reads) and ``"bwd"`` (the backward pass alone).
        config: an entry of the spec's search space for the mode (``configs``; ``bwd_configs`` for ``bwd``):
            the subject runs under that mode's hook (``configured`` / ``bwd_configured``) when the spec has it
            (the launches the config really makes); otherwise its values override same-named constexprs and
            launch options of the captured launches (``{"num_warps": 8}``), and a key no launch has raises
            ``ValueError``.

    Example:
        >>> for r in inspect_op("softmax", "8192x8192", "sm_90"):
        ...     print(r.name, r.registers, f"{r.occupancy.fraction:.0%}", r.warnings)
    """
    spec = load_spec(spec_or_name) if isinstance(spec_or_name, str) else spec_or_name
    t = resolve_target(target)
    reports = []
    for c in find_cases(spec, case):
        for mode in modes:
            # the config's own launches, path included, where the mode's pass has a hook
            hooked = bool(config) and spec.search_space(mode)[1] is not None
            if hooked:
                knobs = set().union(*(entry.keys() for entry in spec.search_space(mode)[0]))
                unknown = sorted(set(config) - knobs)
                if unknown:  # the hook would ignore it and the report would name a config that never ran
                    raise ValueError(f"config: {unknown} are not knobs of {spec.name}'s {mode} search space "
                                     f"({', '.join(sorted(knobs))})")
            launches = capture_op(spec, c, mode=mode, real_max_bytes=real_max_bytes,
                                  capability=divmod(t.arch, 10), config=config if hooked else None)
            if config and not hooked:
                changed = [apply_config(launch, config) for launch in launches]
                unused = set(config) - set().union(*(used for _, used in changed))
                if unused:
                    raise ValueError(f"config: {sorted(unused)} match no parameter or launch option of "
                                     f"{sorted({launch.name for launch in launches})}")
                launches = [launch for launch, _ in changed]
            for launch, count in _dedupe(launches, t):
                report = inspect_launch(launch, t)
                report.case, report.mode, report.launches = c.id, mode, count
                report.config = dict(config) if config else None
                reports.append(report)
    return reports
