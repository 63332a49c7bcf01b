"""The probes of ``kw check``: answers that pass a fixed-input check while cheating.

A kernel can match the reference on the inputs a check hands it and still be wrong: it returns a result it
cached from an earlier call (keyed by shape, or by the input's address), its output does not depend on an
input it should read, it computes in a lower precision than its dtype promises (hidden under the tolerance's
absolute floor when outputs are small), or it only works for the shapes it was shown. Each probe asks the
provider a question whose answer the reference knows:

- ``fresh values``: new random values written into the SAME input tensors (same addresses, shapes and
  strides), then compared with the reference on them: catches results cached by pointer or by shape;
- ``precision``: the output's normwise error ‖out − ref‖/‖ref‖ against the float64 reference, set between
  what the case's dtype promises (the tolerance's ``rtol`` + ``factor`` × PyTorch's own error in that dtype,
  or its ``max_rel_l2``) and the error of the same math on inputs rounded to a lower precision (tf32/fp16's
  10 significand bits for fp32, bf16's 7, fp8's 3), or of the reference's output so rounded: catches fp32
  ops computed through bf16/fp16/tf32, or written through a 16-bit buffer (:func:`precision_problems`);
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

The two cheapest, :data:`DEFAULT_PROBES` (fresh values, fresh tensors), run in every ``kw check``: one more
forward call of the provider each per case, and two of the reference (float64 and the case dtype); ``kw
check --no-probes`` turns them off. ``kw check --adversarial`` runs all five: a few more provider calls per
case (one per floating-point input, one to a few for other shapes) and one to three more float64 reference
calls (precision). Forward only; each reuses the case's tolerance rule.

Inputs with a zero stride (expanded views: one element seen many times) are neither refilled nor perturbed:
writing them in place is not defined, and a dense copy would change the layout under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from kernelworks.check.compare import bitwise_equal, first_failure
from kernelworks.check.engine import as_outputs, upcast
from kernelworks.spec import Case, Inputs, OpSpec, Tolerance, dtype_name

SIGNIFICAND_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
"""Explicit significand (mantissa) bits of the dtypes the precision probe knows."""

LOWER_PRECISIONS = ((23, "fp32"), (10, "tf32/fp16"), (7, "bf16"), (3, "fp8 e4m3"))
"""The precisions a computation may be downgraded to, finest first: (significand bits, name)."""

DEFAULT_PROBES = ("fresh values in the same tensors", "fresh tensors")
"""The probes every ``kw check`` runs (one provider call each per case); the others need ``--adversarial``."""

PRECISION_GAP = 4.0
"""The precision probe runs on an output only where the downgraded computation's error is at least this
many times what the dtype promises; it flags errors beyond the geometric mean of the two (so never below
twice the promise)."""


def _truth(spec: OpSpec, inputs: Mapping[str, Any]) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The float64 reference's outputs and PyTorch's in the inputs' own dtypes (the error scale)."""
    return as_outputs(spec.reference(**upcast(inputs))), as_outputs(spec.reference(**inputs))


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


# ------------------------------------------------------------------------------------------- precision


def round_significand(t: torch.Tensor, bits: int) -> torch.Tensor:
    """``t`` in float64 with its significand rounded to ``bits`` explicit bits (half to even) and its
    exponent range unlimited: the value a ``bits``-bit format would hold, without that format's overflow or
    underflow (so a probe measures lost precision, never lost range). Non-finite values pass unchanged."""
    x = t.detach().to(torch.float64)
    significand, exponent = torch.frexp(x)  # x = significand · 2^exponent, |significand| in [0.5, 1)
    scale = float(2 ** (bits + 1))
    return torch.where(torch.isfinite(x), torch.ldexp(torch.round(significand * scale) / scale, exponent), x)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float | None:
    """‖out − ref‖ / ‖ref‖ over the elements finite in both (float64); None when that ‖ref‖ is 0."""
    o, r = out.detach().to(torch.float64), ref.detach().to(device=out.device, dtype=torch.float64)
    ok = torch.isfinite(o) & torch.isfinite(r)
    norm = float(r[ok].norm())
    return float((o[ok] - r[ok]).norm()) / norm if norm > 0 else None


def _rounded_inputs(inputs: Mapping[str, Any], bits: int) -> Inputs:
    """Every floating-point tensor input rounded to ``bits`` significand bits, in float64."""
    return {k: round_significand(v, bits) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}


def precision_problems(spec: OpSpec, case: Case, tol: Tolerance, inputs: Mapping[str, Any],
                       out: Sequence[torch.Tensor], ref: Sequence[torch.Tensor],
                       base: Sequence[torch.Tensor]) -> list[str]:
    """The precision probe on one provider output ``out`` for ``inputs`` (``ref``: the float64 reference's
    outputs, ``base``: PyTorch's in the case dtype). Per floating-point output, with e(·) = ‖· − ref‖/‖ref‖:

    - the promise is ``max(tol.rtol + tol.factor · e(base), tol.max_rel_l2)``: the tolerance rule read
      without its absolute floor ``atol``, which is what lets small outputs hide a coarser computation;
    - a downgrade's error is the smaller of e(reference on inputs rounded to b bits) and e(ref rounded to b
      bits), for the finest precision b below the case dtype's where it is ≥ :data:`PRECISION_GAP` × the
      promise (none: the dtype promises nothing a lower precision would break; the output is not probed);
    - the output is flagged when e(out) exceeds the geometric mean of the promise and that error.

    An honest computation at the case dtype's precision stays near e(base); one through b bits lands near
    the downgrade's error. Cases in dtypes without a known precision (fp8, integers) are not probed."""
    bits = SIGNIFICAND_BITS.get(case.dtype)
    if bits is None:
        return []
    lower = [(b, name) for b, name in LOWER_PRECISIONS if b < bits]
    downgraded: dict[int, tuple[torch.Tensor, ...]] = {}

    def reference_at(b: int) -> tuple[torch.Tensor, ...]:
        if b not in downgraded:
            downgraded[b] = as_outputs(spec.reference(**_rounded_inputs(inputs, b)))
        return downgraded[b]

    problems = []
    for i, (o, r, h) in enumerate(zip(out, ref, base)):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point() and r.is_floating_point()):
            continue
        err, honest = rel_l2(o, r), rel_l2(h, r)
        if err is None or honest is None:
            continue
        promise = max(tol.rtol + tol.factor * honest, tol.max_rel_l2 or 0.0)
        for b, name in lower:
            lowered = rel_l2(reference_at(b)[i], r)
            coarse = [e for e in (lowered, rel_l2(round_significand(r, b), r)) if e is not None
                      and e >= PRECISION_GAP * promise]
            if not coarse:
                continue
            bar = math.sqrt(promise * min(coarse))
            if err > bar:
                label = "out" if len(ref) == 1 else f"out[{i}]"
                problems.append(
                    f"adversarial (precision): {label} ‖out−ref‖/‖ref‖ = {err:.3g}, beyond {bar:.3g} — "
                    f"{dtype_name(case.dtype)} promises {promise:.3g} (rtol + factor × PyTorch's "
                    f"{honest:.3g}), the same math through {name} ({b} significand bits) errs {min(coarse):.3g}: "
                    "computed in a lower precision?")
            break
    return problems


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
    them); the fresh-values probe rewrites them in place. ``every``: all five probes, else only
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
    elif every:
        problems += precision_problems(spec, case, tol, inputs, out, ref, base)

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
