"""Run an op's launcher without running its kernels: record each launch (kernel, arguments, options, grid).

``kw inspect softmax`` must see the launch a GPU would get — the kernel, the constexprs and ``num_warps``
the launcher picks for the case — on a machine that may have no GPU. Three pieces make that so:

* :func:`capture_launches` patches ``JITFunction.run`` and ``InterpretedFunction.run`` (every
  ``kernel[grid](...)`` ends there, through heuristics too) to record and return ``None``; an autotuned
  kernel records one launch per config its autotuner would try (after its own pruning), benchmarking none;
  a launch straight through an already compiled kernel (``CompiledKernel[grid](...)``, what a host-overhead
  cache such as ``kernelworks.runtime.launch.launch`` does on a hit) is recorded too;
* :func:`plan_for_gpu`: where no GPU is present, the ops' launch heuristics would plan for Triton's
  interpreter (one warp, small tiles). Inside the block (the runtime's
  :func:`~kernelworks.runtime.device.planning_for_gpu`) they plan for a GPU, input validation accepts CPU
  tensors as stand-ins for CUDA ones, and the runtime's compiled-kernel launch cache is bypassed;
* :func:`make_inputs`: the case's inputs. A launcher needs real tensors (``torch.library`` ops send meta
  tensors to their fake implementation, never to the launcher), but only their dtypes, shapes, strides and
  alignment reach the kernel's signature. Cases up to ``real_max_bytes`` get the spec's real random inputs;
  larger ones (the GPU-sized bench cases) get uninitialised CPU tensors with the layout the spec makes on
  the meta device — instant, never touched. A launcher that reads input *values* (sequence lengths, block
  tables) should be inspected on a smaller case.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from triton.compiler.compiler import CompiledKernel
from triton.runtime.autotuner import Autotuner
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from kernelworks.inspect.compile import as_jit
from kernelworks.runtime.device import has_gpu, planning_for_gpu
from kernelworks.spec import Case, Inputs, OpSpec

REAL_INPUTS_MAX_BYTES = 64 << 20
"""Cases whose inputs take more than this get uninitialised stand-ins (see the module docstring)."""


@dataclass
class Launch:
    """One intercepted ``kernel[grid](...)``: every parameter by name (defaults applied), the launch options
    (``num_warps``, ``num_stages``…) and the grid (None when it could not be evaluated)."""

    kernel: Any
    args: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    grid: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        """The kernel's Python name."""
        return as_jit(self.kernel).fn.__name__


def _grid(grid: Any, args: dict[str, Any]) -> tuple[int, ...] | None:
    try:
        g = grid(args) if callable(grid) else grid
        return tuple(int(x) for x in g)
    except Exception:  # a grid lambda reading a meta-parameter we cannot give; the grid is informative only
        return None


def record_launch(kernel: Any, args: tuple, kwargs: dict[str, Any], grid: Any) -> Launch:
    """Bind a launch's positional and keyword arguments to the kernel's parameters."""
    jit = as_jit(kernel)
    names = set(jit.arg_names)
    params = {k: v for k, v in kwargs.items() if k in names}
    options = {k: v for k, v in kwargs.items() if k not in names}
    bound = jit.signature.bind(*args, **params)
    bound.apply_defaults()
    values = dict(bound.arguments)
    return Launch(kernel, values, options, _grid(grid, values))


@contextlib.contextmanager
def capture_launches() -> Iterator[list[Launch]]:
    """Within the block, launching a Triton kernel records a :class:`Launch` (in the yielded list) instead of
    running it; the launch returns None."""
    launches: list[Launch] = []

    def fake_run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> None:
        if not warmup:
            launches.append(record_launch(self, args, kwargs, grid))
        return None

    def fake_autotune(self: Autotuner, *args: Any, **kwargs: Any) -> None:
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = self.prune_configs(kwargs)
        finally:
            self.nargs = None
        for config in configs:
            self.fn.run(*args, **kwargs, **config.all_kwargs())

    def fake_compiled(self: CompiledKernel, grid: Any) -> Callable[..., None]:
        def runner(*args: Any, stream: Any = None) -> None:
            launches.append(_record_compiled(self, args, grid))

        return runner

    patches = [(JITFunction, "run", fake_run), (InterpretedFunction, "run", fake_run),
               (Autotuner, "run", fake_autotune), (CompiledKernel, "__getitem__", fake_compiled)]
    originals = [(cls, name, cls.__dict__[name]) for cls, name, _ in patches]
    for cls, name, fake in patches:
        setattr(cls, name, fake)
    try:
        yield launches
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def _record_compiled(compiled: CompiledKernel, args: tuple, grid: Any) -> Launch:
    """A launch through a compiled kernel: ``args`` are all its parameters in order, constexprs included."""
    jit = compiled.src.fn
    meta = compiled.metadata
    options = {k: getattr(meta, k) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
               if getattr(meta, k, None) is not None}
    values = dict(zip(jit.arg_names, args))
    return Launch(jit, values, options, _grid(grid, values))


def _clear_plan_caches(modules: Iterable[str]) -> None:
    prefixes = tuple(modules)
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                value.cache_clear()


@contextlib.contextmanager
def plan_for_gpu(modules: Iterable[str] = (), capability: tuple[int, int] = (9, 0)) -> Iterator[None]:
    """Within the block, the ops' launchers plan for a GPU even where kernels would run in the interpreter:
    :func:`kernelworks.runtime.device.planning_for_gpu`. ``modules``: extra module-name prefixes whose
    ``lru_cache`` plan caches to clear on the way in and out (a user's spec module whose plans, unlike
    ours, may not key on where kernels run); ``capability``: the target's compute capability."""
    _clear_plan_caches(tuple(modules))
    try:
        with planning_for_gpu(capability):
            yield
    finally:
        _clear_plan_caches(tuple(modules))


# ------------------------------------------------------------------------------------------------- inputs


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _nbytes(inputs: Inputs) -> int:
    total = 0

    def add(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.untyped_storage().nbytes()
        return t

    _map_tensors(inputs, add)
    return total


def _stand_in(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An uninitialised tensor on ``device`` with ``t``'s dtype, shape, strides and storage offset."""
    numel = -(-t.untyped_storage().nbytes() // t.element_size())
    out = torch.empty(max(numel, 1), dtype=t.dtype, device=device)
    return out.as_strided(t.shape, t.stride(), t.storage_offset())


def make_inputs(spec: OpSpec, case: Case, device: torch.device, *,
                real_max_bytes: int = REAL_INPUTS_MAX_BYTES) -> Inputs:
    """The case's inputs on ``device``: real (seeded) when small, layout-exact stand-ins when large."""
    try:
        meta = spec.inputs(case, torch.device("meta"))
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        meta = None  # the input maker needs real values; make real inputs whatever their size
    if meta is not None and _nbytes(meta) > real_max_bytes:
        return _map_tensors(meta, lambda t: _stand_in(t, device))
    torch.manual_seed(0)
    return spec.inputs(case, device)


def capture_op(spec: OpSpec, case: Case, *, mode: str = "fwd", real_max_bytes: int = REAL_INPUTS_MAX_BYTES,
               capability: tuple[int, int] = (9, 0), config: Mapping[str, Any] | None = None) -> list[Launch]:
    """The launches one call of the spec's subject makes for ``case``, planned for a GPU of compute
    ``capability``, none of them run: ``mode="fwd"`` an inference call (no graph recorded), ``"train"`` the
    forward of a training call (its inputs requiring grad: a forward that keeps intermediates for its backward
    may launch other kernels), ``"bwd"`` that call's backward pass alone.

    ``config``: run the subject under the hook of ``mode``'s search space (``spec.configured(config)``, or
    ``spec.bwd_configured`` for ``bwd``), so the launches are exactly those the config makes — its kernel path
    included, not just its constexprs (``kw tune``'s compile gate, ``kw inspect --all-configs``)."""
    _, hook = spec.search_space(mode)  # raises on a mode other than fwd / train / bwd
    if mode in ("train", "bwd") and not spec.grad_inputs:
        raise ValueError(f"spec {spec.name!r} has no backward (no grad_inputs)")
    if config and hook is None:
        raise ValueError(f"spec {spec.name!r} has no `{'bwd_' if mode == 'bwd' else ''}configured` hook to run a "
                         "config under")
    provider = spec.providers[spec.subject]
    device = torch.device("cuda") if has_gpu() else torch.device("cpu")
    module = getattr(provider.fn, "__module__", None) or "kernelworks.ops"
    configured = hook(config) if config else contextlib.nullcontext()
    with plan_for_gpu([module], capability), configured:
        inputs = make_inputs(spec, case, device, real_max_bytes=real_max_bytes)
        if mode == "fwd":
            with capture_launches() as launches, torch.no_grad():
                provider.fn(**inputs)
            return launches
        for name in spec.grad_inputs:  # a case may leave one out (a packed gate-up input has no "up")
            if isinstance(inputs.get(name), torch.Tensor):
                inputs[name] = inputs[name].detach().requires_grad_(True)
        with capture_launches() as forward:
            out = provider.fn(**inputs)
        if mode == "train":
            return forward
        outs = [t for t in (out if isinstance(out, tuple | list) else (out,))
                if isinstance(t, torch.Tensor) and t.requires_grad]
        with capture_launches() as launches:
            torch.autograd.backward(outs, [torch.empty_like(t) for t in outs])
        return launches
