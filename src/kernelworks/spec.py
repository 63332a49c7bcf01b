"""The contract between the library and the workbench.

An op is described once, next to its kernels, by an :class:`OpSpec`: the reference math, an input maker,
named cases, a cost model, a tolerance rule and the providers that compute the same thing. ``kw check``,
``kw bench`` and ``kw report`` only ever talk to specs, so a user's own kernel gets the same treatment as
ours::

    SPEC = OpSpec(
        name="my_relu",
        reference=lambda x: torch.relu(x),
        inputs=lambda case, device: {"x": randn((case["rows"], case["cols"]), case, device)},
        check_cases=[Case("odd", {"rows": 3, "cols": 7}, torch.float32)],
        bench_cases=[Case("8k", {"rows": 8192, "cols": 8192}, torch.bfloat16)],
        cost=lambda case, mode: Cost(bytes=2 * case["rows"] * case["cols"] * case.itemsize),
        providers={"mine": Provider("mine", my_relu)},
        subject="mine",
    )

Then ``kw check path/to/file.py:SPEC`` or ``kernelworks.check(SPEC)``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

Inputs = dict[str, Any]
"""Keyword arguments for a provider: tensors and plain options (``approximate="tanh"``)."""

MODES = ("fwd", "bwd")
STEP = "fwd+bwd"  # a bench-only mode: the training step, forward then backward, with its peak memory
"""Bench/check directions. ``bwd`` is the backward pass alone (the forward runs outside the timed region)."""


class UnknownCaseError(KeyError, ValueError):
    """A case name a spec does not have: a ``KeyError`` (a lookup by name) and a ``ValueError`` (bad input),
    printed as its message, without the quotes ``KeyError`` adds."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Case:
    """One named shape/dtype/layout point of an op.

    ``params`` holds whatever the spec's input maker and cost model read (sizes, layout flags); tags mark
    subsets: ``"gpu"`` (too large for the CPU interpreter), ``"quick"`` (in ``kw report``'s default run),
    ``"sweep:<param>"`` (a point of a line plotted over ``params[<param>]``; ``"sweep:<param>@<series>"``
    puts it on the plot of that series, e.g. one GEMM shape over M).
    """

    name: str
    params: Mapping[str, Any]
    dtype: torch.dtype = torch.float32
    tags: frozenset[str] = frozenset()

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)

    @property
    def itemsize(self) -> int:
        """Bytes per element of the case's dtype."""
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def id(self) -> str:
        """Readable id used in tables and test names, e.g. ``odd_rows-bf16``."""
        return f"{self.name}-{dtype_name(self.dtype)}"


def case(name: str, dtype: torch.dtype = torch.float32, *, tags: Iterable[str] = (), **params: Any) -> Case:
    """Shorthand for ``Case(name, params, dtype, tags)``."""
    return Case(name, dict(params), dtype, frozenset(tags))


@dataclass(frozen=True)
class Cost:
    """Work of one call: floating-point operations and the fewest bytes that must cross device memory."""

    flops: float = 0.0
    bytes: float = 0.0


@dataclass(frozen=True)
class Tolerance:
    """Closeness rule for one dtype.

    An output passes when ``max(|out - ref| - rtol·|ref|) <= factor · baseline_err + atol``, where ``ref`` is
    the reference in float64 and ``baseline_err`` the max abs error of PyTorch doing the same math in the
    input dtype (the rule trusted attention libraries use), and its normwise error ``‖out − ref‖ / ‖ref‖`` is
    at most ``factor`` times PyTorch's plus ``rtol`` (:mod:`kernelworks.check.compare`). ``atol`` is the floor
    that keeps fp32 cases, whose baseline error is ~0, from demanding bit equality; the normwise half has
    none, so a systematic error on small outputs cannot hide under it, and ``rtol`` is its only slack (a rule
    with ``rtol = 0`` and no ``max_rel_l2`` is an absolute one: its element half alone). ``max_rel_l2``, for
    ops whose algorithm rounds differently from the reference's (a chunked scan against a token-by-token
    recurrence), also passes an output whose ``‖out − ref‖ / ‖ref‖`` is at most that bound — every element
    finite where the reference is; ``max_rel_l2_grad`` is that bound for gradients (the backward of such an
    op rounds more: issues state separate bars), ``max_rel_l2`` when None.
    """

    atol: float
    rtol: float = 0.0
    factor: float = 2.0
    max_rel_l2: float | None = None
    max_rel_l2_grad: float | None = None

    def for_gradients(self) -> Tolerance:
        """The rule a gradient is held to (``max_rel_l2_grad`` in place of ``max_rel_l2`` when set)."""
        if self.max_rel_l2_grad is None:
            return self
        return replace(self, max_rel_l2=self.max_rel_l2_grad)


_DEFAULT_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=8e-3, rtol=8e-3),
    torch.float64: Tolerance(atol=1e-10, rtol=1e-10),
}


def default_tolerance(dtype: torch.dtype) -> Tolerance:
    """The project's default rule per dtype (one table; ops tighten or widen it in their spec, with a why)."""
    return _DEFAULT_TOLERANCES.get(dtype, Tolerance(atol=0.0))


@dataclass(frozen=True)
class Provider:
    """A named callable computing the op: ``fn(**inputs) -> Tensor | tuple[Tensor, ...]``.

    ``requires`` lists modules that must import (peers such as ``liger_kernel``); a provider whose
    requirements are missing is skipped with a note, never an error. ``gpu_only`` marks providers that cannot
    run under the CPU interpreter.
    """

    name: str
    fn: Callable[..., Any]
    requires: tuple[str, ...] = ()
    gpu_only: bool = False
    supports_backward: bool = True

    def available(self) -> tuple[bool, str]:
        """``(True, "")`` when usable here, else ``(False, reason)``."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return False, f"{module} is not installed"
        if self.gpu_only and not torch.cuda.is_available():
            return False, "needs a CUDA GPU"
        return True, ""


@dataclass
class OpSpec:
    """Everything the workbench needs to know about one op. See the module docstring for an example.

    Fields:
        name: registry key (``softmax``, ``swiglu``).
        reference: the math in PyTorch eager; called on float64-upcast inputs as the ground truth and on the
            native inputs as the ``torch`` baseline provider.
        inputs: ``inputs(case, device) -> Inputs``; random, valid, never zeros. Seeded by the caller.
        check_cases / bench_cases: the checklist and the real-model shapes.
        cost: ``cost(case, mode) -> Cost`` with ``mode`` in :data:`MODES`.
        providers: implementations by name; ``torch`` and ``torch.compile`` are derived from ``reference``
            unless ``baselines`` says otherwise.
        subject: the provider under test (ours: ``kernelworks``).
        grad_inputs: names of inputs that receive gradients; empty means forward-only.
        tolerance: ``tolerance(dtype) -> Tolerance``; a case may widen it with a ``max_rel_l2`` param (a
            mode that rounds more by design, judged against a peer doing the same: :meth:`case_tolerance`),
            and one gradient's bound with ``max_rel_l2_grads`` (:meth:`gradient_tolerance`).
        deterministic: repeated runs on the same inputs must agree bit for bit.
        configs: tunable kernels' search space, simplest first (``kw inspect --all-configs`` compiles each;
            ``kw tune`` searches them when ``configured`` is set).
        configured: ``configured(config)`` → a context manager under which the subject provider runs that
            config (``kw tune``); None: not tunable.
        bwd_configs / bwd_configured: the same for the backward pass's kernels (``kw tune --mode bwd``, which
            times the backward alone on a graph built once and checks every gradient); empty / None when
            the backward is not tunable.
        tuned: the :class:`~kernelworks.runtime.tuned.TunedTable` the op reads its shipped per-GPU configs
            from at plan time; ``kw tune --write`` writes winners there. None: winners are only cached.
        bench_step: ``kw bench`` also times :data:`STEP` (forward + backward in one call, with the extra
            peak memory) by default — for ops whose work moves between directions across providers
            (a loss that writes its gradient in the forward), where only the sum compares fairly.
        step_cost: ``step_cost(case) -> Cost`` of :data:`STEP` when the step needs less than the forward's
            cost plus the backward's (that loss: its backward only rescales the gradient, and not at all
            for a unit upstream gradient); None: the sum.
    """

    name: str
    reference: Callable[..., Any]
    inputs: Callable[[Case, torch.device], Inputs]
    check_cases: Sequence[Case]
    bench_cases: Sequence[Case]
    cost: Callable[[Case, str], Cost]
    providers: Mapping[str, Provider]
    subject: str = "kernelworks"
    grad_inputs: tuple[str, ...] = ()
    tolerance: Callable[[torch.dtype], Tolerance] = default_tolerance
    deterministic: bool = True
    baselines: tuple[str, ...] = ("torch", "torch.compile")
    configs: Sequence[Mapping[str, Any]] = ()
    configured: Callable[[Mapping[str, Any]], AbstractContextManager[Any]] | None = None
    bwd_configs: Sequence[Mapping[str, Any]] = ()
    bwd_configured: Callable[[Mapping[str, Any]], AbstractContextManager[Any]] | None = None
    tuned: Any = None
    bench_step: bool = False
    step_cost: Callable[[Case], Cost] | None = None
    description: str = ""
    _compiled_reference: Callable[..., Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.subject not in self.providers:
            raise ValueError(f"spec {self.name!r}: subject {self.subject!r} is not among its providers "
                             f"{sorted(self.providers)}")
        unknown = set(self.baselines) - {"torch", "torch.compile"}
        if unknown:
            raise ValueError(f"spec {self.name!r}: unknown derived baselines {sorted(unknown)}")
        if isinstance(self.grad_inputs, str):
            raise TypeError(f"spec {self.name!r}: grad_inputs is a tuple of input names, got the string "
                            f"{self.grad_inputs!r}")
        strays = [n for n in self.grad_inputs if not _takes(self.reference, n)]
        if strays:  # a typo would silently drop that gradient's check
            raise ValueError(f"spec {self.name!r}: grad_inputs {strays} name no argument of its reference")

    @property
    def modes(self) -> tuple[str, ...]:
        """``("fwd",)`` or ``("fwd", "bwd")`` when the op has gradients."""
        return MODES if self.grad_inputs else ("fwd",)

    @property
    def bench_modes(self) -> tuple[str, ...]:
        """The modes ``kw bench`` times by default: :attr:`modes`, plus :data:`STEP` with ``bench_step``."""
        return self.modes + ((STEP,) if self.bench_step and self.grad_inputs else ())

    def search_space(self, mode: str = "fwd") -> tuple[Sequence[Mapping[str, Any]],
                                                       Callable[[Mapping[str, Any]], AbstractContextManager[Any]]
                                                       | None]:
        """``(configs, configured)`` of the pass ``mode`` (``fwd`` or ``bwd``) tunes: what ``kw tune --mode``
        searches and the hook it runs a config under. ``train`` (the forward of a training call, which
        ``kw inspect`` shows) is planned by the forward's."""
        if mode in ("fwd", "train"):
            return self.configs, self.configured
        if mode == "bwd":
            return self.bwd_configs, self.bwd_configured
        raise ValueError(f"mode: expected 'fwd', 'train' or 'bwd', got {mode!r}")

    def case_tolerance(self, case: Case) -> Tolerance:
        """The rule ``case``'s outputs are held to: :attr:`tolerance` of its dtype, with the case's own
        ``max_rel_l2`` param (when it has one) as the relative-L2 bound."""
        tol = self.tolerance(case.dtype)
        bound = case.get("max_rel_l2")
        return tol if bound is None else replace(tol, max_rel_l2=float(bound))

    def gradient_tolerance(self, case: Case, name: str) -> Tolerance:
        """The rule the gradient of input ``name`` is held to: the case's rule for gradients, or the bound the
        case's ``max_rel_l2_grads`` param (``{input name: bound}``) gives that one gradient: for a gradient
        whose values cancel to almost nothing in one case, without loosening its siblings."""
        tol = self.case_tolerance(case).for_gradients()
        bound = (case.get("max_rel_l2_grads") or {}).get(name)
        return tol if bound is None else replace(tol, max_rel_l2=float(bound))

    def all_providers(self) -> dict[str, Provider]:
        """The spec's providers plus the baselines derived from the reference (eager and torch.compile)."""
        out: dict[str, Provider] = {}
        if "torch" in self.baselines:
            out["torch"] = Provider("torch", self.reference)
        if "torch.compile" in self.baselines:
            out["torch.compile"] = Provider("torch.compile", self._compiled, gpu_only=True)
        out.update(self.providers)
        return out

    def provider(self, name: str | None = None) -> Provider:
        """The provider called ``name`` (default: the subject); ``KeyError`` naming the ones there are."""
        providers = self.all_providers()
        name = name or self.subject
        if name not in providers:
            raise KeyError(f"{self.name}: no provider {name!r}; its providers: {', '.join(providers)}")
        return providers[name]

    def reset_compiled(self) -> None:
        """Drop the torch.compile baseline's compiled reference (the bench does this per case, together
        with ``torch._dynamo.reset()``, so no case inherits another's recompile budget)."""
        self._compiled_reference = None

    def _compiled(self, **inputs: Any) -> Any:
        if self._compiled_reference is None:
            self._compiled_reference = torch.compile(self.reference, dynamic=False)
        return self._compiled_reference(**inputs)

    def has_cases(self, names: Iterable[str], *, bench: bool) -> bool:
        """Whether every name (or id) is one of this spec's bench (or check) cases."""
        pool = self.bench_cases if bench else self.check_cases
        return all(any(n in (c.name, c.id) for c in pool) for n in names)

    def find_cases(self, names: Iterable[str] | None, *, bench: bool) -> list[Case]:
        """Cases by name or id (all of the set when ``names`` is None); unknown names raise ``KeyError``."""
        pool = list(self.bench_cases if bench else self.check_cases)
        if names is None:
            return pool
        wanted = [names] if isinstance(names, str) else list(names)  # one name, not its characters
        chosen = [c for c in pool if c.name in wanted or c.id in wanted]
        missing = [n for n in wanted if not any(n in (c.name, c.id) for c in pool)]
        if missing:
            kind = "bench" if bench else "check"
            raise UnknownCaseError(f"spec {self.name!r} has no {kind} case named {missing}; "
                                   f"known: {[c.id for c in pool]}")
        return chosen


def _takes(fn: Callable[..., Any], name: str) -> bool:
    """``fn`` accepts a keyword argument ``name`` (True when its signature cannot be read or takes **kwargs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


# ---------------------------------------------------------------------------------------------- registry

_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Add a spec to the registry and return it; a name already taken by another spec raises (registering the
    same spec again does nothing)."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
        raise ValueError(f"an op spec named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def registry() -> dict[str, OpSpec]:
    """All registered specs by name (importing :mod:`kernelworks.ops` registers ours)."""
    importlib.import_module("kernelworks.ops")
    return dict(sorted(_REGISTRY.items()))


def _exec_file(module_name: str, path: Path, where: str) -> ModuleType:
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ImportError(f"cannot import {where}")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except SyntaxError:
        del sys.modules[module_name]
        raise
    except (Exception, SystemExit) as e:  # the user's file failed: one line naming it, not a traceback or exit
        del sys.modules[module_name]
        raise ImportError(f"{where}: running it raised {type(e).__name__}: {e}") from e
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_spec(target: str) -> OpSpec:
    """Resolve ``NAME`` (registered op), ``path/to/file.py:ATTR`` or ``package.module:ATTR`` to a spec.

    A file is run once per process, as an import is: every ``file.py:ATTR`` of one file comes from the same
    module (``kw check f.py:A f.py:B`` runs ``f.py`` once, so a spec it registers is not registered twice, and
    ``A`` stays bound in a module of ``sys.modules``, where ``kw check --sanitize`` finds it for its child)."""
    if ":" not in target:
        specs = registry()
        if target not in specs:
            hint = f"; a spec in a file is named FILE.py:SPEC ({target}:NAME)" if target.endswith(".py") else ""
            raise KeyError(f"no op named {target!r}{hint}; registered: {', '.join(specs)}")
        return specs[target]
    where, attr = target.rsplit(":", 1)
    if where.endswith(".py") or Path(where).exists():
        path = Path(where).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {where}")
        module_name = f"_kw_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"  # one per file
        module = sys.modules.get(module_name)
        if module is None or getattr(module, "__file__", None) != str(path):
            module = _exec_file(module_name, path, where)
    else:
        module = importlib.import_module(where)
    found = sorted(name for name, value in vars(module).items() if isinstance(value, OpSpec))
    there = f"its OpSpecs: {', '.join(found)}" if found else "it defines no OpSpec"
    if not hasattr(module, attr):
        raise KeyError(f"{target}: {where} has no {attr!r}; {there}")
    spec = getattr(module, attr)
    if not isinstance(spec, OpSpec):
        raise TypeError(f"{target}: expected an OpSpec, {attr!r} is a {type(spec).__name__}; {there}")
    return spec


# ----------------------------------------------------------------------------------------------- helpers

_DTYPE_NAMES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int8: "int8", torch.int32: "int32", torch.int64: "int64",
    torch.float8_e4m3fn: "fp8e4m3", torch.float8_e5m2: "fp8e5m2",
}


def dtype_name(dtype: torch.dtype) -> str:
    """Short name used in case ids and tables (``bf16``)."""
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def parse_dtype(name: str) -> torch.dtype:
    """Inverse of :func:`dtype_name`, also accepting torch names (``bfloat16``)."""
    for dtype, short in _DTYPE_NAMES.items():
        if name in (short, str(dtype).replace("torch.", "")):
            return dtype
    raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(_DTYPE_NAMES.values())}")


def randn(shape: Sequence[int], case: Case, device: torch.device | str, *, scale: float = 1.0,
          row_padding: int = 0) -> torch.Tensor:
    """Normal random tensor in the case's dtype (never zeros).

    ``row_padding > 0`` returns a non-contiguous view: the last dimension is carved out of rows that are
    ``row_padding`` elements longer, so the row stride differs from the row length (the layout a slice of a
    fused projection has).
    """
    shape = tuple(shape)
    full = (*shape[:-1], shape[-1] + row_padding) if shape else shape
    t = torch.randn(full, device=device, dtype=torch.float32).mul_(scale).to(case.dtype)
    return t[..., : shape[-1]] if row_padding else t
