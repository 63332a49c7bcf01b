"""Launch heuristics shared by the row kernels (activations, softmax, and later norms and losses)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from threading import get_ident
from typing import Any, TypeVar

import torch
import triton
from triton.runtime.errors import OutOfResources

from kernelworks.runtime.compat import TRITON
from kernelworks.runtime.device import check_interpreter_usable, interpreter_active, planning_active

MAX_FUSED_ROW_BYTES = 128 * 1024
"""Largest row (in fp32 working bytes) kept whole in registers; longer rows take a looped kernel.

32k fp32 values over 16 warps is 64 registers of data per thread. Measured on an H100 (softmax, bf16,
64M elements): one pass holds 92% of copy bandwidth at 32768 columns (96% with two such rows, y and dy, in
the backward) and spills past it (73% forward at 65536; Liger falls from 3.0 to ~2.0 TB/s at 65k, per
quack's notes)."""


_Plan = TypeVar("_Plan", bound=Callable[..., Any])


def cached_plan(fn: _Plan) -> _Plan:
    """Cache a launch-plan function per argument tuple *and* per place kernels run.

    A plan is most of a small call's host cost, so launchers cache it; but the same shape plans
    differently under the interpreter (tiny tiles, one warp) and on a GPU — also while ``kw inspect``
    plans for a GPU on a CPU machine (:func:`~kernelworks.runtime.device.planning_for_gpu`) — so the key
    carries :func:`interpreter_active`. Every op family plans through this, never a bare ``lru_cache``.
    """
    cached = functools.lru_cache(maxsize=1024)(lambda interpreted, *args, **kwargs: fn(*args, **kwargs))

    @functools.wraps(fn)
    def plan(*args: Any, **kwargs: Any) -> Any:
        return cached(interpreter_active(), *args, **kwargs)

    plan.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return plan  # type: ignore[return-value]


@dataclass(frozen=True)
class RowLaunch:
    """How a row kernel is launched: ``BLOCK_N`` columns per tile, ``ROWS`` rows per program, warps."""

    BLOCK_N: int
    ROWS: int
    num_warps: int


@cached_plan
def row_launch(n_cols: int, n_rows: int, *, elems_per_thread: int = 16, min_elems: int = 2048,
               max_warps: int = 16) -> RowLaunch:
    """Tile for a kernel that holds whole rows (``BLOCK_N = next_pow2(n_cols)``) in registers.

    Short rows are packed several to a program (at least ``min_elems`` elements each, so every program
    does enough work to hide its launch); warps grow with the tile so each thread holds about
    ``elems_per_thread`` elements — 16-byte vectors for 16-bit dtypes, with a few in flight.
    """
    block_n = triton.next_power_of_2(max(n_cols, 1))
    rows = 1
    if block_n < min_elems:
        rows = min(min_elems // block_n, triton.next_power_of_2(max(n_rows, 1)))
    warps = max(1, min(max_warps, (block_n * rows) // (32 * elems_per_thread)))
    if interpreter_active():
        warps = 1  # the interpreter ignores warps; keep the launch trivially cheap
    return RowLaunch(BLOCK_N=block_n, ROWS=rows, num_warps=triton.next_power_of_2(warps))


@cached_plan
def tile_launch(n_cols: int, n_rows: int, *, tile_elems: int = 2048, elems_per_thread: int = 16,
                max_warps: int = 8) -> RowLaunch:
    """Tile for an elementwise kernel over ``[n_rows, n_cols]`` (no reduction: rows need not fit whole).

    Each program takes a ``ROWS × BLOCK_N`` tile of about ``tile_elems`` elements: ``BLOCK_N`` is the row
    length rounded up to a power of two, capped at ``tile_elems`` (long rows are split into column blocks),
    and short rows are stacked ``ROWS`` to a program. Warps are sized so each thread holds
    ``elems_per_thread`` elements — for 16-bit data two 16-byte vectors per input, enough loads in flight
    to hide DRAM latency — while one tile stays small enough that large inputs give many waves of programs.
    The defaults (2048 elements, 4 warps) won a sweep of the activation kernels on an H100 (tiles
    1024–8192, 4–16 warps; docs/notes/activation.md): within 1% of the best everywhere, and 6% ahead of
    4096/8 warps on the one compute-heavy case (exact GELU forward, 16384×14336 bf16).
    """
    # Plain-Python powers of two: triton.next_power_of_2 is a ConstexprFunction in triton 3.6 and costs
    # ~3 µs a call from the host, which an eager op launched per layer pays on every call.
    block_n = min(next_pow2(n_cols), tile_elems)
    rows = max(1, min(tile_elems // block_n, next_pow2(n_rows)))
    warps = max(1, min(max_warps, (block_n * rows) // (32 * elems_per_thread)))
    if interpreter_active():
        warps = 1  # the interpreter ignores warps; keep the launch trivially cheap
    return RowLaunch(BLOCK_N=block_n, ROWS=rows, num_warps=next_pow2(warps))


def next_pow2(n: int) -> int:
    """The smallest power of two ``>= n`` (1 for ``n <= 1``); ``triton.next_power_of_2`` without its
    host-side call overhead."""
    return 1 << max(n - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints; ``triton.cdiv`` without its host-side call overhead."""
    return -(-a // b)


# ------------------------------------------------------------------------------------ low-overhead launch

# Verified against the specialisation rules (native_specialize_impl: tests/runtime/test_launch.py checks
# _spec against the installed triton's) and the launchers of triton 3.6 and 3.8. ``JITFunction.run`` binds,
# specialises and launches ``CompiledKernel[grid](*args)`` with every argument in signature order, constexprs
# included; that runner in turn calls the backend launcher, whose C ``launch`` takes a version-specific
# argument list (:func:`_direct_launcher`). Other releases take the ordinary JIT path (always correct).
_FAST_LAUNCH = TRITON in ((3, 6), (3, 8))
_COMPILED: dict[tuple, tuple[Any, tuple, Callable[..., None] | None]] = {}
"""key → (CompiledKernel, the constexpr values in signature order, its direct launcher or None)."""
_I32_MIN, _I32_MAX, _U64_MIN = -(2**31), 2**31, 2**63


_observer: Any = None
"""The recording of ``runtime.replay`` in progress, if any: told of each launch on its thread (``launched``)
and muted around it (what a launch allocates is not the body's)."""


def _launch_hooks() -> bool:
    """True when a launch hook is set (a profiler such as proton): then launches keep Triton's own path,
    which calls them. Triton 3.6/3.8 keep the hooks as a ``HookChain`` that is never None; an empty chain
    (the usual case) is no hook. (Spelled out, no generator: it runs on every launch.)"""
    runtime = triton.knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return (enter is not None and bool(getattr(enter, "calls", True))) or \
        (leave is not None and bool(getattr(leave, "calls", True)))


try:  # torch's own C calls behind torch.cuda.current_device() / triton's stream query, without their Python
    from torch._C import _cuda_getCurrentRawStream as _current_stream
    from torch._C import _cuda_getDevice as _current_device
except ImportError:  # a CPU-only torch build: launch() never gets this far there (the interpreter runs)
    def _current_device() -> int:
        raise RuntimeError("no CUDA in this torch build")

    _current_stream = _current_device


def _spec(arg: object) -> object:
    """The part of an argument Triton (3.6 and 3.8 alike) specialises a kernel on: a tensor's dtype and
    16-byte alignment; an integer's type (i32 / i64 / u64) and whether it is 1 or a multiple of 16; other
    values themselves. Finer than Triton's key is safe (a few more cache entries), coarser never."""
    kind = type(arg)
    if kind is int:  # the common case first: sizes and strides (bool is its own type, never int here)
        return ("i32" if _I32_MIN <= arg < _I32_MAX else "u64" if arg >= _U64_MIN else "i64", arg == 1,
                arg % 16 == 0)
    if kind is bool:
        return ("b", arg)
    if kind is float:
        return "fp32"
    if hasattr(arg, "data_ptr"):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, int):  # int subclasses (IntEnum…): as triton, by value
        return _spec(int(arg))
    return (kind, arg)


_TENSOR = torch.Tensor
_INT_SPECS: dict[int, object] = {}
"""``_spec`` of the integers seen so far (sizes and strides repeat call after call); bounded."""


def _spec_key(args: tuple) -> tuple:
    """``tuple(map(_spec, args))`` with the two common cases inline (a third of the cost: this runs on every
    launch): plain tensors, and integers looked up in :data:`_INT_SPECS`."""
    return tuple([(_INT_SPECS.get(a) or _remember_int(a)) if type(a) is int
                  else (a.dtype, a.data_ptr() % 16 == 0) if type(a) is _TENSOR else _spec(a) for a in args])


def _remember_int(value: int) -> object:
    spec = _spec(value)
    if len(_INT_SPECS) < 65536:
        _INT_SPECS[value] = spec
    return spec


def _direct_launcher(compiled: Any) -> Callable[..., None] | None:
    """``go(grid0, grid1, grid2, stream, args)``: the backend's C launch of ``compiled`` called directly,
    skipping the per-call Python of ``CompiledKernel[grid]`` (a closure, a device and stream query, the
    launch-metadata hook) and of the launcher's ``__call__``. A kernel that needs global scratch (device-built
    TMA descriptors) gets it here as the launcher would: ``grid × num_ctas × size`` bytes from the caching
    allocator, stream-ordered, so it can be released when the call returns. None where that layer does other
    work — profile scratch, an instrumented build — or for an argument list this module does not know;
    ``launch`` then calls ``CompiledKernel[grid]``."""
    run = compiled.run
    if getattr(run, "profile_scratch_size", 1) or getattr(run, "gsan_enabled", False):
        return None
    c_launch, function, meta = run.launch, compiled.function, compiled.packed_metadata
    coop, pdl = run.launch_cooperative_grid, run.launch_pdl
    scratch_bytes = getattr(run, "global_scratch_size", 1) * getattr(run, "num_ctas", 1)
    if TRITON == (3, 6):  # launch(grid, stream, fn, coop, pdl, scratch, profile_scratch, meta, hooks…, *args)
        if scratch_bytes:
            def go(g0: int, g1: int, g2: int, stream: int, args: tuple) -> None:
                scratch = _scratch(g0 * g1 * g2 * scratch_bytes)
                c_launch(g0, g1, g2, stream, function, coop, pdl, scratch, None, meta, None, None, None, *args)
            return go

        def go(g0: int, g1: int, g2: int, stream: int, args: tuple) -> None:
            c_launch(g0, g1, g2, stream, function, coop, pdl, None, None, meta, None, None, None, *args)
        return go
    if TRITON == (3, 8):  # launch(grid, stream, fn, coop, pdl, meta, hooks…, scratch…, annotations, sig, args)
        annotations, signature = run.arg_annotations, run.kernel_signature
        if scratch_bytes:
            def go(g0: int, g1: int, g2: int, stream: int, args: tuple) -> None:
                scratch = _scratch(g0 * g1 * g2 * scratch_bytes)
                c_launch(g0, g1, g2, stream, function, coop, pdl, meta, None, None, None, scratch, None,
                         annotations, signature, args)
            return go

        def go(g0: int, g1: int, g2: int, stream: int, args: tuple) -> None:
            c_launch(g0, g1, g2, stream, function, coop, pdl, meta, None, None, None, None, None, annotations,
                     signature, args)
        return go
    return None


def _scratch(n_bytes: int) -> torch.Tensor:
    """Global scratch for one launch on the current device (the caching allocator's blocks are 512-byte
    aligned, beyond any kernel's scratch alignment)."""
    return torch.empty(n_bytes, dtype=torch.int8, device="cuda")


def fast_launch_active() -> bool:
    """True when :func:`launch` takes its cached direct path (a GPU, triton 3.6 or 3.8, not planning for
    ``kw inspect``): the condition for replaying recorded calls too (``runtime.replay``)."""
    return _FAST_LAUNCH and not interpreter_active() and not planning_active()


# ------------------------------------------------------------------------- plans that fit this GPU's shared memory

_log = logging.getLogger("kernelworks")
_exact: ContextVar[bool] = ContextVar("kernelworks_exact_stages", default=False)
_FITTED: dict[tuple, int] = {}
"""(kernel, warps, device, constexprs) → the pipeline depth that fitted, for a plan that asked for more shared
memory a block than this GPU has."""
TRITON_DEFAULT_STAGES = 3
"""``num_stages`` where a launch names none (Triton's CUDA default)."""


@contextmanager
def exact_stages() -> Iterator[None]:
    """Within the block a plan that does not fit raises ``OutOfResources`` instead of running with fewer stages:
    forced plans (``kw tune``, sweeps, tests) must run as named or not at all."""
    token = _exact.set(True)
    try:
        yield
    finally:
        _exact.reset(token)


def fitted_stages() -> dict[str, tuple[int, int]]:
    """``kernel name → (stages asked, stages run)`` for every plan this process ran with fewer stages."""
    return {key[0].__name__: (dict(key[3:]).get("num_stages", TRITON_DEFAULT_STAGES), stages)
            for key, stages in _FITTED.items()}


def _run_fitting(kernel: triton.JITFunction, grid: tuple[int, ...], args: tuple, num_warps: int,
                 constexprs: dict[str, object], device: int | None) -> Any:
    """``kernel[grid](...)``, one pipeline stage fewer at a time while the compiled kernel needs more shared memory
    a block than the GPU allows. Plans are sized for Hopper's 227 KiB; an A100 allows 163 KiB and Ada and
    Ampere consumer parts 99 KiB. Triton keeps ``num_stages − 1`` operand tiles in flight, so the stage count
    is what sizes a tiled kernel's buffers; tiles, warps and results stay those of the plan. Triton raises
    before anything is launched, so a retry is safe."""
    key = (kernel, num_warps, device, *constexprs.items())
    fitted = None if _exact.get() else _FITTED.get(key)
    options = constexprs if fitted is None else {**constexprs, "num_stages": fitted}
    while True:
        try:
            return kernel[grid](*args, num_warps=num_warps, **options)
        except OutOfResources as err:
            stages = int(options.get("num_stages", TRITON_DEFAULT_STAGES))  # type: ignore[call-overload]
            if err.name != "shared memory" or stages <= 1 or _exact.get():
                raise
            options = {**options, "num_stages": stages - 1}
            _FITTED[key] = stages - 1
            _log.info("%s: %d stages need %d bytes of shared memory a block, this GPU allows %d; trying %d",
                      kernel.__name__, stages, err.required, err.limit, stages - 1)


def launch(kernel: triton.JITFunction, grid: tuple[int, ...], *args: object, num_warps: int,
           **constexprs: object) -> None:
    """``kernel[grid](*args, num_warps=num_warps, **constexprs)`` with less host time.

    Triton's JIT binds and specialises every argument again on every call, then goes through
    ``CompiledKernel[grid]`` and the launcher's Python (18 µs a launch on our H100 host,
    benchmarks/host_floor.py), several times the GPU time of a small row kernel. Here the compiled kernel is
    cached under the key Triton itself specialises on (:func:`_spec` of each argument, the constexprs, the
    warps, the device) and its C launch called directly (:func:`_direct_launcher`). The first call for a
    key, calls under the interpreter, with a launch hook set (a profiler), and Triton versions other than 3.6
    and 3.8 take the ordinary path. ``args`` are the runtime arguments in signature order; ``constexprs``
    must be the kernel's remaining (constexpr) parameters.
    """
    if not _FAST_LAUNCH or interpreter_active() or planning_active():
        if interpreter_active():
            check_interpreter_usable()
        kernel[grid](*args, num_warps=num_warps, **constexprs)
        return
    device = _current_device()
    key = (kernel, num_warps, device, *constexprs.items(), *_spec_key(args))
    hit = _COMPILED.get(key)
    if hit is not None and _FITTED and _exact.get() and \
            hit[0].metadata.num_stages != constexprs.get("num_stages", TRITON_DEFAULT_STAGES):
        hit = None  # compiled with fewer stages to fit this GPU: a forced plan runs as named or raises
    recorder = _observer
    if recorder is not None and recorder.thread != get_ident():
        recorder = None  # another thread's recording: this launch is not part of it
    if recorder is not None:
        recorder.muted = True  # what the launch allocates (scratch) is not the body's
    try:
        if hit is None:
            compiled = _run_fitting(kernel, grid, args, num_warps, constexprs, device)
            tail = tuple(constexprs[name] for name in kernel.arg_names[len(args):])
            direct = _direct_launcher(compiled)
            _COMPILED[key] = (compiled, tail, direct)
            if recorder is not None:
                recorder.launched(grid, args, tail, None)  # a first compile: record again next time
            return
        compiled, tail, direct = hit
        g = (*grid, 1, 1)  # the launchers read grid[0..2]: pad a 1-D or 2-D grid
        if direct is not None and not _launch_hooks():
            direct(g[0], g[1], g[2], _current_stream(device), (*args, *tail))
        else:
            compiled[g[:3]](*args, *tail)
            direct = None
        if recorder is not None:
            recorder.launched(grid, args, tail, direct)
    finally:
        if recorder is not None:
            recorder.muted = False
