"""The probes of ``kw check``: answers that pass a fixed-input check while cheating.

A kernel can match the reference on the inputs a check hands it and still be wrong: it returns a result it
cached from an earlier call (keyed by shape, or by the input's address), its output does not depend on an
input it should read, or it only works for the shapes it was shown. Each probe asks the provider a question
whose answer the reference knows:

- ``fresh values``: new random values written into the SAME input tensors (same addresses, shapes and
  strides), then compared with the reference on them: catches results cached by pointer or by shape;
- ``fresh tensors``: new inputs in new tensors (new addresses), compared likewise: catches results cached by
  shape and stale outputs reused across calls;
- ``dependence``: each floating-point input perturbed in turn (every element, by a few percent), and the
  provider's output compared with the reference's on the perturbed inputs: catches outputs that ignore an
  input (a bias dropped, a scale hard-coded). Judged by the tolerance rule, so an input the op does not
  read, or reads too faintly to show in the output's precision, is never blamed;
- ``other shapes``: the case with its sizes changed (every size param +1, else one at a time +1, else ×2),
  built by the spec's own input maker, compared likewise: catches hard-coded sizes and work done only on
  the rows a case has (:func:`other_shape_problems`). A variant the spec, the reference or the provider
  rejects (raises) is skipped, with a note when none is left.

A computation in a lower precision than the dtype promises (fp32 through bf16, hidden under the tolerance's
absolute floor when outputs are small) needs no probe: the tolerance rule's normwise half fails it on the
checklist's own inputs (:mod:`kernelworks.check.compare`). A fifth probe did that job until session 19.

The two cheapest, :data:`DEFAULT_PROBES` (fresh values, fresh tensors), run in every ``kw check``: one more
forward call of the provider each per case, and two of the reference (float64 and the case dtype); ``kw
check --no-probes`` turns them off. ``kw check --adversarial`` runs all four: a few more provider calls per
case (one per floating-point input, one to a few for other shapes). Forward only; each reuses the case's
tolerance rule.

Inputs with a zero stride (expanded views: one element seen many times) are neither refilled nor perturbed:
writing them in place is not defined, and a dense copy would change the layout under test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from kernelworks.check.compare import bitwise_equal, first_failure
from kernelworks.check.engine import as_outputs, copies, upcast
from kernelworks.spec import Case, Inputs, OpSpec, Tolerance

DEFAULT_PROBES = ("fresh values in the same tensors", "fresh tensors")
"""The probes every ``kw check`` runs (one provider call each per case); the others need ``--adversarial``."""


def _truth(spec: OpSpec, inputs: Mapping[str, Any]) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The float64 reference's outputs and PyTorch's in the inputs' own dtypes (the error scale)."""
    return as_outputs(spec.reference(**upcast(inputs))), as_outputs(spec.reference(**copies(inputs)))


def _mismatch(out: tuple[torch.Tensor, ...], inputs: Mapping[str, Any], spec: OpSpec,
              tol: Tolerance) -> str | None:
    """Why ``out`` fails against the reference on ``inputs``, else None."""
    ref, base = _truth(spec, inputs)
    return first_failure(out, ref, base, tol)


def _probed(v: Any) -> bool:
    """A floating-point tensor input the probes may rewrite (not empty, no zero stride)."""
    return isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 0 and 0 not in v.stride()


def _refill(inputs: Mapping[str, Any], fresh: Mapping[str, Any]) -> None:
    """Write ``fresh``'s floating-point values into ``inputs``' tensors in place (same addresses)."""
    for k, v in inputs.items():
        if _probed(v) and isinstance(fresh.get(k), torch.Tensor):
            v.copy_(fresh[k])


def _perturbed(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(t.shape, generator=generator, dtype=torch.float32).to(t.device)
    return (t.float() * (1 + 0.05 * noise) + 0.05 * noise).to(t.dtype)


# ---------------------------------------------------------------------------------------- other shapes


def _bump(value: Any, how: str) -> Any:
    """``value`` with every int in it (inside tuples and lists too; bools excepted) +1 or ×2."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value + 1 if how == "+1" else value * 2
    if isinstance(value, (tuple, list)):
        return type(value)(_bump(v, how) for v in value)
    return value


def _shapes(inputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def other_shape_problems(spec: OpSpec, case: Case, fn: Callable[..., Any], device: torch.device, seed: int,
                         notes: list[str]) -> list[str]:
    """The other-shapes probe: the case with changed sizes, judged by the tolerance rule.

    A size param is one (an int, or ints in a tuple/list) whose +1 changes an input tensor's shape under the
    spec's input maker. Variants, tried in turn until one runs: every size +1 at once, then each size +1
    alone, then each ×2 alone; a variant is skipped when the input maker, the reference or the provider
    raises (a kernel may reject shapes it does not support). Problems come from the first variant that runs;
    ``notes`` gets why the probe was skipped when none does."""

    def build(params: Mapping[str, Any]) -> tuple[Case, Inputs]:
        variant = replace(case, name=f"{case.name}~", params=dict(params))
        torch.manual_seed(seed + 404)
        return variant, spec.inputs(variant, device)

    torch.manual_seed(seed + 404)
    shapes = _shapes(spec.inputs(case, device))
    sizes = []
    for key, value in case.params.items():
        if _bump(value, "+1") == value:
            continue
        try:
            _, moved = build({**case.params, key: _bump(value, "+1")})
        except Exception:
            continue
        if _shapes(moved) != shapes:
            sizes.append(key)
    if not sizes:
        notes.append("adversarial (other shapes): skipped — no case param changes an input's shape")
        return []

    candidates = [{k: _bump(case.params[k], "+1") for k in sizes}]
    if len(sizes) > 1:
        candidates += [{k: _bump(case.params[k], "+1")} for k in sizes]
    candidates += [{k: _bump(case.params[k], "×2")} for k in sizes]
    rejected = []
    for change in candidates:
        what = ", ".join(f"{k}={v}" for k, v in change.items())
        try:
            variant, inputs = build({**case.params, **change})
            ref, base = _truth(spec, inputs)
        except Exception as e:
            rejected.append(f"{what}: the spec raised {type(e).__name__}")
            continue
        try:
            out = as_outputs(fn(**inputs))
        except Exception as e:
            rejected.append(f"{what}: the provider raised {type(e).__name__}")
            continue
        bad = first_failure(out, ref, base, spec.case_tolerance(variant))
        if bad is None:
            return []
        return [f"adversarial (other shapes): with {what}, {bad} — sizes hard-coded, or only the rows of the "
                "declared case computed?"]
    notes.append("adversarial (other shapes): skipped — no other shape runs (" + "; ".join(rejected) + ")")
    return []


# ---------------------------------------------------------------------------------------------- probe


def probe(spec: OpSpec, case: Case, fn: Callable[..., Any], device: torch.device, seed: int, inputs: Inputs,
          notes: list[str] | None = None, *, every: bool = True) -> list[str]:
    """Run the probes on one case; returns the problems found (empty when none). ``inputs``: the case's
    inputs, which ``fn`` has already been called on (the checklist's own runs, as a cheater's cache would see
    them); the fresh-values probe rewrites them in place. ``every``: all four probes, else only
    :data:`DEFAULT_PROBES`. ``notes`` (when given) receives why a probe could not run."""
    notes = [] if notes is None else notes

    def make_inputs(s: int) -> Inputs:
        torch.manual_seed(s)
        return spec.inputs(case, device)

    problems: list[str] = []
    tol = spec.case_tolerance(case)

    _refill(inputs, make_inputs(seed + 101))
    out = tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in as_outputs(fn(**inputs)))
    ref, base = _truth(spec, inputs)
    bad = first_failure(out, ref, base, tol)
    if bad is not None:
        problems.append(f"adversarial (fresh values in the same tensors): {bad} — a result cached by address "
                        "or by shape?")

    fresh = make_inputs(seed + 202)
    bad = _mismatch(as_outputs(fn(**fresh)), fresh, spec, tol)
    if bad is not None:
        problems.append(f"adversarial (fresh tensors): {bad} — a result cached by shape, or a stale output?")
    if not every:
        return problems

    generator = torch.Generator().manual_seed(seed + 303)
    base_out = tuple(o.clone() for o in as_outputs(fn(**inputs)))
    for name, value in inputs.items():
        if not _probed(value):
            continue
        moved = {**inputs, name: _perturbed(value, generator)}
        out = as_outputs(fn(**moved))
        bad = _mismatch(out, moved, spec, tol)
        if bad is not None:
            unchanged = all(bitwise_equal(o, b) for o, b in zip(out, base_out))
            problems.append(f"adversarial (dependence): with input {name!r} perturbed, {bad}"
                            + (" — the output did not change: the input is ignored" if unchanged else ""))

    problems += other_shape_problems(spec, case, fn, device, seed, notes)
    return problems
