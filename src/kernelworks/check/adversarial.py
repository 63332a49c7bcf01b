"""Adversarial probes of ``kw check --adversarial``: answers that pass a fixed-input check while cheating.

A kernel can match the reference on the inputs a check hands it and still be wrong: it returns a result it
cached from an earlier call (keyed by shape, or by the input's address), or its output does not depend on
an input it should read. Each probe asks the provider a question whose answer the reference knows:

- ``fresh values``: new random values written into the SAME input tensors (same addresses, shapes and
  strides), then compared with the reference on them: catches results cached by pointer or by shape;
- ``fresh tensors``: new inputs in new tensors (new addresses), compared likewise: catches results cached by
  shape and stale outputs reused across calls;
- ``dependence``: each floating-point input perturbed in turn (every element, by a few percent), and the
  provider's output compared with the reference's on the perturbed inputs: catches outputs that ignore an
  input (a bias dropped, a scale hard-coded). Judged by the tolerance rule, so an input the op does not
  read, or reads too faintly to show in the output's precision, is never blamed.

Inputs with a zero stride (expanded views: one element seen many times) are neither refilled nor perturbed:
writing them in place is not defined, and a dense copy would change the layout under test.

The probes reuse the case's tolerance rule. They cost three to a few more provider and reference calls per
case (forward only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from kernelworks.check.compare import bitwise_equal, first_failure
from kernelworks.check.engine import as_outputs, upcast
from kernelworks.spec import Case, OpSpec, Tolerance


def _mismatch(out: tuple[torch.Tensor, ...], inputs: Mapping[str, Any], spec: OpSpec,
              tol: Tolerance) -> str | None:
    """Why ``out`` fails against the reference on ``inputs``, else None."""
    ref = as_outputs(spec.reference(**upcast(inputs)))
    return first_failure(out, ref, as_outputs(spec.reference(**inputs)), tol)


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


def probe(spec: OpSpec, case: Case, fn: Callable[..., Any], make_inputs: Callable[[int], dict[str, Any]],
          seed: int) -> list[str]:
    """Run the probes on one case; returns the problems found (empty when none)."""
    problems: list[str] = []
    tol = spec.case_tolerance(case)
    inputs = make_inputs(seed)
    fn(**inputs)  # a first call, as a cheater's cache would see it

    _refill(inputs, make_inputs(seed + 101))
    bad = _mismatch(as_outputs(fn(**inputs)), inputs, spec, tol)
    if bad is not None:
        problems.append(f"adversarial (fresh values in the same tensors): {bad} — a result cached by address "
                        "or by shape?")

    fresh = make_inputs(seed + 202)
    bad = _mismatch(as_outputs(fn(**fresh)), fresh, spec, tol)
    if bad is not None:
        problems.append(f"adversarial (fresh tensors): {bad} — a result cached by shape, or a stale output?")

    generator = torch.Generator().manual_seed(seed + 303)
    base_out = as_outputs(fn(**inputs))
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
    return problems
