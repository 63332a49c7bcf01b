"""Launch heuristics shared by the row kernels (activations, softmax, and later norms and losses)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import triton

from kernelworks.runtime.compat import TRITON
from kernelworks.runtime.device import interpreter_active, planning_active

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
# _spec against the installed triton's) and the CompiledKernel launcher of triton 3.6 and 3.8, which are the
# same: ``CompiledKernel[grid](*args)`` with every argument in signature order, constexprs included, and
# ``JITFunction.run`` launches through exactly that after binding. Other releases take the ordinary JIT path
# (always correct, ~15 µs more host time per call).
_FAST_LAUNCH = TRITON in ((3, 6), (3, 8))
_COMPILED: dict[tuple, tuple[object, tuple]] = {}


def _spec(arg: object) -> object:
    """The part of an argument Triton (3.6 and 3.8 alike) specialises a kernel on: a tensor's dtype and
    16-byte alignment; an integer's type (i32 / i64 / u64) and whether it is 1 or a multiple of 16; other
    values themselves. Finer than Triton's key is safe (a few more cache entries), coarser never."""
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, int):
        kind = "i32" if -(2**31) <= arg < 2**31 else "u64" if arg >= 2**63 else "i64"
        return (kind, arg == 1, arg % 16 == 0)
    if isinstance(arg, float):
        return "fp32"
    if hasattr(arg, "data_ptr"):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    return (type(arg), arg)


def launch(kernel: triton.JITFunction, grid: tuple[int, ...], *args: object, num_warps: int,
           **constexprs: object) -> None:
    """``kernel[grid](*args, num_warps=num_warps, **constexprs)`` with less host time.

    Triton's JIT binds and specialises every argument again on every call (~15 µs of host time on our H100
    host, several times the GPU time of a small row kernel). Here the compiled kernel is cached under the
    key Triton itself specialises on (:func:`_spec` of each argument, the constexprs, the warps, the device)
    and launched through ``CompiledKernel[grid]``. The first call for a key, calls under the interpreter and
    Triton versions other than 3.6 and 3.8 take the ordinary path. ``args`` are the runtime arguments in signature
    order; ``constexprs`` must be the kernel's remaining (constexpr) parameters.
    """
    if not _FAST_LAUNCH or interpreter_active() or planning_active():
        kernel[grid](*args, num_warps=num_warps, **constexprs)
        return
    import torch  # the runtime package imports torch anyway; kept local so launch heuristics stay light

    key = (kernel, num_warps, torch.cuda.current_device(), *constexprs.items(), *map(_spec, args))
    hit = _COMPILED.get(key)
    if hit is None:
        compiled = kernel[grid](*args, num_warps=num_warps, **constexprs)
        names = kernel.arg_names[len(args):]
        _COMPILED[key] = (compiled, tuple(constexprs[name] for name in names))
        return
    compiled, tail = hit
    compiled[(*grid, 1, 1)[:3]](*args, *tail)  # CompiledKernel reads grid[0..2]: pad a 1-D or 2-D grid
