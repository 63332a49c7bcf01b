"""The checklist engine behind ``kw check``: every check case of a spec, forward and backward.

For each case, on fresh seeded inputs:
1. the reference on float64-upcast inputs is the ground truth; the reference on the native inputs is the
   ``torch`` baseline that sets the error scale (see :mod:`kernelworks.check.compare`);
2. the provider runs twice with outputs NaN-poisoned (and, on a GPU, the caching allocator dirtied with
   NaN first, which catches unwritten elements in kernels that allocate with plain ``torch.empty``);
3. the two runs must agree bit for bit (a moving result is a race), the inputs must be left unchanged,
   and every output must pass the tolerance rule, element by element and as a whole (a lower precision
   than the dtype promises fails the normwise half); NaN/Inf where the reference is finite fails;
4. with ``grad_inputs``, the same for the gradients of a random upstream gradient;
5. the probes of :mod:`kernelworks.check.adversarial` on the forward: by default (``probes``) the two
   cheapest, fresh values in the same tensors and fresh tensors (results cached by address or shape, stale
   outputs; one more provider call each); with ``adversarial`` all four (also outputs that ignore an input,
   sizes hard-coded).

``kw check --sanitize`` adds, per case and tool, a run under NVIDIA's compute-sanitizer in a child process
(:mod:`kernelworks.check.sanitize`); its results are :class:`CaseResult` too, with ``tool`` and ``sanitizer``
set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelworks.check.compare import Comparison, bitwise_equal, compare
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.runtime.device import default_device, has_gpu, interpreter_active
from kernelworks.spec import Case, Inputs, OpSpec

if TYPE_CHECKING:
    from kernelworks.check.sanitize_log import Outcome


@dataclass
class CaseResult:
    """The verdict on one (case, mode) for one provider."""

    op: str
    case: Case
    mode: str
    provider: str
    comparisons: list[Comparison] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # what did not run and why (a probe skipped), not failures
    tool: str = ""  # the compute-sanitizer tool this run was watched by (kernelworks.check.sanitize); "": none
    sanitizer: Outcome | None = None  # that run's verdict, counts, first reports and log; None: not watched

    @property
    def passed(self) -> bool:
        return not self.skipped and not self.problems and all(c.passed for c in self.comparisons)


def as_outputs(out: Any) -> tuple[torch.Tensor, ...]:
    """A provider's result as a tuple of outputs."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def snapshot_outputs(out: Sequence[Any]) -> tuple[Any, ...]:
    """Copies of a provider's tensor outputs: one that hands back a buffer it keeps between calls (the docs
    allow it) rewrites that buffer on its next call, and a comparison of two runs must not see one tensor
    twice."""
    return tuple(o.detach().clone() if isinstance(o, torch.Tensor) else o for o in out)


def _tensors(inputs: Inputs) -> dict[str, torch.Tensor]:
    """The tensor inputs by name, those inside a list or tuple input as ``name[i]``."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            out[k] = v
        elif type(v) in (list, tuple):
            out.update({f"{k}[{i}]": x for i, x in enumerate(v) if isinstance(x, torch.Tensor)})
    return out


def _map_tensors(inputs: Inputs, fn: Callable[[torch.Tensor], torch.Tensor]) -> Inputs:
    """``inputs`` with ``fn`` applied to every tensor, those inside a list or tuple input included."""
    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return fn(v)
        if type(v) in (list, tuple) and any(isinstance(x, torch.Tensor) for x in v):
            return type(v)(one(x) for x in v)
        return v
    return {k: one(v) for k, v in inputs.items()}


def copies(inputs: Inputs) -> Inputs:
    """Every tensor input cloned (detached): what a reference runs on, so that one working in place cannot
    change the inputs a provider is then checked on (the provider would be blamed)."""
    return _map_tensors(inputs, lambda t: t.detach().clone())


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole allocation under ``t`` (its view and whatever lies around it: a padded row's tail, the other
    slices of a fused buffer) as a uint8 tensor."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _storage_snapshot(inputs: Inputs) -> list[tuple[list[str], torch.Tensor, torch.Tensor]]:
    """Per allocation under a tensor input that covers more than the input's view (a strided or sliced input):
    the inputs on it, its bytes and a copy of them."""
    groups: dict[int, list[str]] = {}
    first: dict[int, torch.Tensor] = {}
    tensors = _tensors(inputs)
    for k, v in tensors.items():
        ptr = v.untyped_storage().data_ptr()
        groups.setdefault(ptr, []).append(k)
        first.setdefault(ptr, v)
    out = []
    for ptr, names in groups.items():
        v = first[ptr]
        if v.untyped_storage().nbytes() > sum(tensors[k].numel() * tensors[k].element_size() for k in names):
            live = _storage_bytes(v)
            out.append((names, live, live.clone()))
    return out


def _modified_inputs(inputs: Inputs, snapshot: Mapping[str, torch.Tensor],
                     storages: Sequence[tuple[list[str], torch.Tensor, torch.Tensor]], when: str = "") -> list[str]:
    """Problems: inputs whose values changed, and allocations under strided or sliced inputs written outside
    what the inputs' views cover (a neighbour's memory, as far as the provider could tell)."""
    changed = [k for k, v in _tensors(inputs).items() if not bitwise_equal(v, snapshot[k])]
    problems = [f"input {k!r} was modified{when}" for k in changed]
    for names, live, before in storages:
        if not set(names) & set(changed) and not torch.equal(live, before):
            problems.append(f"input {names[0]!r}: memory around its view (the same allocation) was written{when}")
    return problems


def upcast(inputs: Inputs, dtype: torch.dtype = torch.float64) -> Inputs:
    """Copies of the tensor inputs (detached; inside list and tuple inputs too), floating ones cast to
    ``dtype``; everything else unchanged."""
    return _map_tensors(inputs, lambda t: t.detach().to(dtype, copy=True) if t.is_floating_point()
                        else t.detach().clone())


def _dirty_allocator(device: torch.device) -> None:
    """Leave NaN in the caching allocator's free blocks, so ``torch.empty`` in a kernel's wrapper returns
    NaN-filled memory and unwritten outputs are caught even without :func:`poison_outputs`."""
    if device.type == "cuda":
        # Small (<1 MiB) and large blocks live in separate pools: dirty both.
        blocks = [torch.empty(1 << k, dtype=torch.float32, device=device) for k in range(6, 18) for _ in range(4)]
        free, _ = torch.cuda.mem_get_info()
        blocks.append(torch.empty(min(free // 8, 1 << 28) // 4, dtype=torch.float32, device=device))
        for b in blocks:
            b.fill_(float("nan"))
        del blocks


class _PoisonFreshCPUMemory(TorchDispatchMode):
    """Fills every CPU tensor that an ``empty``-family op returns with NaN (integers: -1, bools: True): the CPU
    allocator cannot be dirtied the way :func:`_dirty_allocator` dirties CUDA's, and a kernel under the
    interpreter that leaves part of a ``torch.empty`` output unwritten would otherwise read whatever the heap
    held — often the zeros or the right answer of the previous run."""

    _ALLOCATORS = frozenset({torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
                             torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                             torch.ops.aten.new_empty_strided.default})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self._ALLOCATORS and isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.numel():
            out.fill_(float("nan") if out.is_floating_point() else True if out.dtype == torch.bool else -1)
        return out


@contextmanager
def fresh_memory_poisoned(device: torch.device) -> Iterator[None]:
    """Within this block a provider's fresh allocations hold NaN, so elements it never writes fail the
    comparison: our ops' outputs through :func:`~kernelworks.runtime.alloc.poison_outputs`, a user kernel's
    plain ``torch.empty`` through the dirtied CUDA allocator or, on the CPU, :class:`_PoisonFreshCPUMemory`."""
    _dirty_allocator(device)
    with poison_outputs():
        if device.type == "cuda":
            yield
        else:
            with _PoisonFreshCPUMemory():
                yield


def with_grad_leaves(inputs: Inputs, names: Sequence[str], dtype: torch.dtype | None) -> Inputs:
    """A copy of ``inputs`` whose ``names`` are fresh leaves (optionally cast) that require grad."""
    out = dict(inputs)
    for n in names:
        t = inputs[n].detach()
        out[n] = (t.to(dtype) if dtype is not None else t).requires_grad_(True)
    return out


def gradients(fn: Callable[..., Any], inputs: Inputs, names: Sequence[str], grad_outs: Sequence[torch.Tensor],
              dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """The gradients of ``fn(**inputs)``'s floating outputs, seeded with ``grad_outs`` (cast to each output's
    dtype), with respect to the inputs ``names`` (fresh leaves, cast to ``dtype`` when given)."""
    leaves = with_grad_leaves(inputs, names, dtype)
    outs = [o for o in as_outputs(fn(**leaves)) if o.is_floating_point() and o.requires_grad]
    if not outs:
        raise RuntimeError(f"no output requires grad: it computes no gradient for {', '.join(names)} "
                           "(no autograd path, or the inputs detached)")
    gos = [g.to(o.dtype) for g, o in zip(grad_outs, outs)]
    grads = torch.autograd.grad(outs, [leaves[n] for n in names], gos, allow_unused=True)
    missing = [n for n, g in zip(names, grads) if g is None]
    if missing:
        raise RuntimeError(f"no gradient for {', '.join(map(repr, missing))}: the outputs do not depend on it "
                           "through autograd, or its backward returns None")
    return grads


def check_case(spec: OpSpec, case: Case, *, provider: str | None = None, device: torch.device | None = None,
               seed: int = 0, modes: Iterable[str] | None = None, probes: bool = True,
               adversarial: bool = False) -> list[CaseResult]:
    """Run the checklist for one case; returns one result per mode (``fwd``, and ``bwd`` with gradients).
    ``probes`` adds the default cheat probes to a forward that passed (fresh values in the same tensors, fresh
    tensors: two more provider calls); ``adversarial`` all of them (it implies ``probes``)."""
    device = device or default_device()
    name = provider or spec.subject
    prov = spec.provider(name)
    modes = [m for m in (modes or spec.modes) if m in spec.modes]
    results = {m: CaseResult(spec.name, case, m, name) for m in modes}

    def skip_all(reason: str) -> list[CaseResult]:
        for r in results.values():
            r.skipped = reason
        return list(results.values())

    if "gpu" in case.tags and device.type != "cuda":
        return skip_all("GPU-only case (too large for the interpreter)")
    ok, why = prov.available()
    if not ok:
        return skip_all(why)

    torch.manual_seed(seed)
    try:
        inputs = spec.inputs(case, device)
        snapshot = {k: v.clone() for k, v in _tensors(inputs).items()}
        storages = _storage_snapshot(inputs)
        ref = as_outputs(spec.reference(**upcast(inputs)))
        base = as_outputs(spec.reference(**copies(inputs)))
        not_tensors = sorted({type(o).__name__ for o in (*ref, *base) if not isinstance(o, torch.Tensor)})
        if not_tensors:
            raise TypeError(f"the reference returned {', '.join(not_tensors)}, expected tensors")
    except Exception as e:  # the spec's own side failed: this case cannot be judged, the others still can
        for r in results.values():
            r.problems.append(f"the spec's inputs or reference raised {type(e).__name__}: {e}")
        return list(results.values())
    tol = spec.case_tolerance(case)

    if "fwd" in results:
        res, t0 = results["fwd"], time.perf_counter()
        try:
            with fresh_memory_poisoned(device):
                first = snapshot_outputs(as_outputs(prov.fn(**inputs)))
                second = as_outputs(prov.fn(**inputs))
        except NotImplementedError as e:
            res.skipped = f"unsupported: {e}"
        except Exception as e:  # a provider crash is a failed check, reported with its message
            res.problems.append(f"raised {type(e).__name__}: {e}")
        else:
            if len(first) != len(ref):
                res.problems.append(f"returned {len(first)} output(s), the reference {len(ref)}")
            if len(second) != len(first):
                res.problems.append(f"two runs on the same inputs returned {len(first)} and {len(second)} output(s)")
            for i, (o, r, b) in enumerate(zip(first, ref, base)):
                label = "out" if len(ref) == 1 else f"out[{i}]"
                res.comparisons.append(compare(label, o, r, b, tol, expected_dtype=b.dtype))
                if (spec.deterministic and isinstance(o, torch.Tensor) and i < len(second)
                        and not bitwise_equal(o, second[i])):
                    res.problems.append(f"{label}: two runs on the same inputs differ (race or nondeterminism)")
            res.problems += _modified_inputs(inputs, snapshot, storages)
        res.seconds = time.perf_counter() - t0

    if "bwd" in results:
        res, t0 = results["bwd"], time.perf_counter()
        names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)]
        if not prov.supports_backward:
            res.skipped = "provider has no backward"
        else:
            grad_outs = [torch.randn(r.shape, dtype=torch.float64, device=device) for r in ref
                         if r.is_floating_point()]
            try:
                ref_g = gradients(spec.reference, upcast(inputs), names, grad_outs)
                base_g = gradients(spec.reference, copies(inputs), names, grad_outs)
                with fresh_memory_poisoned(device):
                    g1 = snapshot_outputs(gradients(prov.fn, inputs, names, grad_outs))
                    g2 = gradients(prov.fn, inputs, names, grad_outs)
            except NotImplementedError as e:
                res.skipped = f"unsupported: {e}"
            except Exception as e:
                res.problems.append(f"raised {type(e).__name__}: {e}")
            else:
                for n, a, r, b, a2 in zip(names, g1, ref_g, base_g, g2):
                    res.comparisons.append(compare(f"grad {n}", a, r, b, spec.gradient_tolerance(case, n),
                                                   expected_dtype=b.dtype))
                    if spec.deterministic and not bitwise_equal(a, a2):
                        res.problems.append(f"grad {n}: two runs differ (race or nondeterminism)")
                res.problems += _modified_inputs(inputs, snapshot, storages, " by the forward or the backward")
        res.seconds = time.perf_counter() - t0

    # Last, as the fresh-values probe rewrites the inputs in place (the same tensors the provider has seen).
    if (probes or adversarial) and "fwd" in results and results["fwd"].passed:
        from kernelworks.check.adversarial import probe

        res, t0 = results["fwd"], time.perf_counter()
        try:
            res.problems += probe(spec, case, prov.fn, device, seed, inputs, res.notes, every=adversarial)
        except Exception as e:
            res.problems.append(f"adversarial probe: the provider raised {type(e).__name__}: {e}")
        res.seconds += time.perf_counter() - t0
    return list(results.values())


def select_cases(spec: OpSpec, cases: Iterable[str] | None = None, tags: Iterable[str] | None = None) -> list[Case]:
    """The check cases of ``spec`` named in ``cases`` (all when None) that carry one of ``tags`` (any when
    None). Case ``i`` of this list is checked with seed ``seed + i``, by the checklist and the sanitizer alike."""
    chosen = spec.find_cases(cases, bench=False)
    if tags is not None:
        wanted = set(tags)
        chosen = [c for c in chosen if c.tags & wanted]
    return chosen


def run_check(spec: OpSpec, cases: Iterable[str] | None = None, *, provider: str | None = None,
              device: torch.device | None = None, seed: int = 0, tags: Iterable[str] | None = None,
              progress: bool = False, probes: bool = True, adversarial: bool = False) -> list[CaseResult]:
    """Check every (selected) case of ``spec``; ``tags`` keeps only cases carrying one of them; ``probes``
    (default) and ``adversarial`` as in :func:`check_case`."""
    chosen = select_cases(spec, cases, tags)
    iterator: Iterable[tuple[int, Case]] = enumerate(chosen)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(list(iterator), desc=f"check {spec.name}", unit="case", leave=False)
    out: list[CaseResult] = []
    for i, c in iterator:
        out.extend(check_case(spec, c, provider=provider, device=device, seed=seed + i, probes=probes,
                              adversarial=adversarial))
    return out


def where_checks_run() -> str:
    """A phrase for reports: where kernels ran for this check."""
    if has_gpu() and not interpreter_active():
        return f"GPU ({torch.cuda.get_device_name()})"
    return "CPU, Triton interpreter"
