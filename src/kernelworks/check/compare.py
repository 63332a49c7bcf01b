"""The one comparison rule and the one mismatch report.

``out`` passes against the float64 reference ``ref`` when both

    max(|out − ref| − rtol·|ref|)  ≤  factor · max|baseline − ref|  +  atol        (every element)
    ‖out − ref‖ / ‖ref‖  ≤  factor · ‖baseline − ref‖ / ‖ref‖  +  rtol            (the whole output)

hold, where ``baseline`` is PyTorch doing the same math in the input dtype (the normwise half needs one, a
reference that is not all zeros, and ``rtol > 0`` or a ``max_rel_l2``: a rule with ``rtol = 0`` is absolute,
element-wise alone). The element rule's absolute floor ``atol`` keeps near-zero elements from demanding more
than the dtype can hold, but on an output of small magnitude it also hides a systematic error (a bf16 output
of values ~0.1, scaled by 1.02, passes it): the normwise rule has no absolute floor, so such an error shows
against PyTorch's own (:func:`l2_promise`).
An op whose algorithm rounds differently from the reference's (``max_rel_l2``) passes either rule within
that bound. Non-finite values must agree exactly in place (NaN where the reference is finite means an
unwritten or broken element: outputs are NaN-poisoned before each run). Integer and bool outputs must equal
the reference exactly. The report gives the first offending positions with both values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelworks.spec import Tolerance, dtype_name


@dataclass(frozen=True)
class Comparison:
    """How one output tensor compares with the reference."""

    output: str
    max_abs: float
    max_rel: float
    rel_l2: float
    baseline_abs: float
    allowed: float
    passed: bool
    problem: str = ""
    baseline_rel_l2: float = float("nan")
    """PyTorch's own normwise error in the case dtype; nan where the normwise half did not run (no baseline,
    an all-zero reference, or a rule without relative slack)."""


def l2_promise(tol: Tolerance, baseline_rel_l2: float) -> float:
    """The normwise error an output may have when PyTorch's own, in the same dtype, is ``baseline_rel_l2``:
    ``factor`` times it plus ``rtol`` (the tolerance rule read without its absolute floor), or the op's
    ``max_rel_l2`` where that is larger: the bound of the rule's normwise half."""
    return max(tol.rtol + tol.factor * baseline_rel_l2, tol.max_rel_l2 or 0.0)


def _finite_abs_err(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    both = torch.isfinite(a) & torch.isfinite(ref)
    return torch.where(both, (a - ref).abs(), torch.zeros_like(ref))


COMPARE_BLOCK = 1 << 25
"""Elements compared at once (in float64): large outputs (a 410k-token attention output is 1.7 G elements)
stream through in blocks instead of holding several float64 copies of the whole tensor."""


def _positions(flat_idx: list[int], count: int, out: torch.Tensor, ref: torch.Tensor) -> str:
    parts = []
    for i in flat_idx:
        pos = tuple(int(x) for x in torch.unravel_index(torch.tensor(i), out.shape)) if out.dim() else ()
        parts.append(f"{pos}: got {float(out[pos]):.6g}, want {float(ref[pos]):.6g}")
    more = count - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _blocks(*tensors: torch.Tensor | None):
    """``(start, float64 blocks…)`` over the flattened tensors, :data:`COMPARE_BLOCK` elements at a time."""
    flat = [t.detach().reshape(-1) if t is not None else None for t in tensors]
    dev = flat[0].device
    for s in range(0, flat[0].numel(), COMPARE_BLOCK):
        yield (s, *(f[s:s + COMPARE_BLOCK].to(device=dev, dtype=torch.float64) if f is not None else None
                    for f in flat))


def _first(mask: torch.Tensor, start: int, found: list[int], limit: int = 3) -> int:
    """Append up to ``limit`` flat positions of ``mask`` (a block starting at ``start``); return its count."""
    if len(found) < limit:
        found += (mask.nonzero()[: limit - len(found), 0] + start).tolist()
    return int(mask.sum())


def _exact(name: str, out: torch.Tensor, ref: torch.Tensor) -> Comparison:
    """Integer and bool outputs (indices, counts, masks) must equal the reference exactly: a float tolerance
    scaled by ``|ref|`` would pass an index off by one once it is large enough (bf16's rtol: from ~125)."""
    wide = torch.float64 if ref.dtype.is_floating_point else torch.int64
    o, r = out.detach().reshape(-1).to(wide), ref.detach().reshape(-1).to(wide)
    wrong = o != r
    n_wrong = int(wrong.sum())
    max_abs = float((o - r).abs().max()) if n_wrong else 0.0
    if not n_wrong:
        return Comparison(name, 0.0, 0.0, 0.0, 0.0, 0.0, True)
    found = wrong.nonzero()[:3, 0].tolist()
    return Comparison(name, max_abs, float("nan"), float("nan"), 0.0, 0.0, False,
                      f"{n_wrong} element(s) differ (integer output: compared exactly): "
                      f"{_positions(found, n_wrong, out, ref)}")


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, baseline: torch.Tensor | None,
            tol: Tolerance, expected_dtype: torch.dtype | None = None) -> Comparison:
    """Compare ``out`` with ``ref`` under ``tol``; ``baseline`` (same math, low precision) sets the scale."""

    def fail(problem: str) -> Comparison:
        nan = float("nan")
        return Comparison(name, nan, nan, nan, nan, nan, False, problem)

    if not isinstance(out, torch.Tensor):
        return fail(f"expected a tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(ref.shape):
        return fail(f"shape {tuple(out.shape)}, want {tuple(ref.shape)}")
    if expected_dtype is not None and out.dtype != expected_dtype:
        return fail(f"dtype {dtype_name(out.dtype)}, want {dtype_name(expected_dtype)}")
    ref = ref.to(out.device)
    if not (out.dtype.is_floating_point or out.dtype.is_complex):
        return _exact(name, out, ref)
    if baseline is not None and tuple(baseline.shape) != tuple(ref.shape):
        baseline = None

    baseline_abs, baseline_sq, baseline_ref_sq = 0.0, None, 0.0
    if baseline is not None and baseline.numel():
        baseline_sq = 0.0
        for _, b, r in _blocks(baseline.to(out.device), ref):
            b_err = _finite_abs_err(b, r)
            baseline_abs = max(baseline_abs, float(b_err.max()))
            baseline_sq += float(b_err.square().sum())
            # ‖ref‖ over the same elements as the baseline's error (both finite): an element the baseline
            # overflowed on must not shrink PyTorch's relative error, and with it the bound
            baseline_ref_sq += float(torch.where(torch.isfinite(b) & torch.isfinite(r), r, 0.0).square().sum())
    allowed = tol.factor * baseline_abs + tol.atol

    max_abs = max_rel = err_sq = ref_sq = 0.0
    nonfinite, bad = [], []
    n_nonfinite = n_bad = 0
    unwritten = False
    for start, o, r in _blocks(out, ref):
        finite_o, finite_r = torch.isfinite(o), torch.isfinite(r)
        mismatch = (finite_o != finite_r) | (~finite_o & ~finite_r & ~((o == r) | (o.isnan() & r.isnan())))
        n_nonfinite += _first(mismatch, start, nonfinite)
        unwritten |= bool((o.isnan() & finite_r).any())
        err = _finite_abs_err(o, r)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float((err / (r.abs() + tol.atol)).max()))
        err_sq += float(err.square().sum())
        ref_sq += float(torch.where(finite_r, r, torch.zeros_like(r)).square().sum())
        n_bad += _first(err - tol.rtol * r.abs() > allowed, start, bad)
    rel_l2 = err_sq ** 0.5 / ref_sq ** 0.5 if ref_sq > 0 else max_abs
    # the normwise half runs with a baseline, a reference that is not all zeros, and some slack: rtol (a rule
    # with rtol 0 is an absolute one, its element half alone) or the op's max_rel_l2
    normwise = (baseline_sq is not None and ref_sq > 0 and baseline_ref_sq > 0
                and (tol.rtol > 0 or tol.max_rel_l2 is not None))
    base_l2 = baseline_sq ** 0.5 / baseline_ref_sq ** 0.5 if normwise else float("nan")

    def result(passed: bool, problem: str = "") -> Comparison:
        return Comparison(name, max_abs, max_rel, rel_l2, baseline_abs, allowed, passed, problem, base_l2)

    if n_nonfinite:
        what = "NaN where the reference is finite (unwritten or broken elements)" if unwritten \
            else "non-finite values differ from the reference"
        return result(False, f"{what}: {_positions(nonfinite, n_nonfinite, out, ref)}")
    if n_bad and not (tol.max_rel_l2 is not None and rel_l2 <= tol.max_rel_l2):
        return result(False, f"{n_bad} element(s) beyond tolerance: {_positions(bad, n_bad, out, ref)}")
    if normwise and rel_l2 > (promise := l2_promise(tol, base_l2)):
        scale = f"rtol {tol.rtol:g} + {tol.factor:g} × PyTorch's {base_l2:.3g}"
        why = scale if promise > (tol.max_rel_l2 or 0.0) else f"the op's max_rel_l2; {scale} is less"
        return result(False, f"‖out − ref‖/‖ref‖ = {rel_l2:.3g} beyond {promise:.3g} ({why}) while every "
                             "element is within tolerance")
    return result(True)


def first_failure(outs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor], bases: Sequence[torch.Tensor],
                  tol: Tolerance | Sequence[Tolerance]) -> str | None:
    """Why the first output that fails :func:`compare` against its reference fails (a count mismatch
    included), or None when every output passes: the one-line verdict of the tuner and the adversarial
    probes. ``tol``: one rule for every output, or one per output (gradients: ``OpSpec.gradient_tolerance``)."""
    if len(outs) != len(refs):
        return f"returned {len(outs)} output(s), the reference {len(refs)}"
    rules = [tol] * len(refs) if isinstance(tol, Tolerance) else list(tol)
    for i, (o, r, b, rule) in enumerate(zip(outs, refs, bases, rules)):
        cmp = compare("out" if len(refs) == 1 else f"out[{i}]", o, r, b, rule, expected_dtype=b.dtype)
        if not cmp.passed:
            return cmp.problem or f"{cmp.output}: max abs error {cmp.max_abs:.3g} > allowed {cmp.allowed:.3g}"
    return None


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same bits (NaN equal to NaN), for the race and determinism checks."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())
