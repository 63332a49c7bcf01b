"""The one comparison rule and the one mismatch report.

``out`` passes against the float64 reference ``ref`` when

    max(|out − ref| − rtol·|ref|)  ≤  factor · max|baseline − ref|  +  atol

where ``baseline`` is PyTorch doing the same math in the input dtype. Non-finite values must agree exactly
in place (NaN where the reference is finite means an unwritten or broken element: outputs are NaN-poisoned
before each run). The report gives the first offending positions with both values.
"""

from __future__ import annotations

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


def _finite_abs_err(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    both = torch.isfinite(a) & torch.isfinite(ref)
    return torch.where(both, (a - ref).abs(), torch.zeros_like(ref))


def _positions(mask: torch.Tensor, out: torch.Tensor, ref: torch.Tensor, limit: int = 3) -> str:
    idx = mask.nonzero()[:limit]
    parts = [f"{tuple(i.tolist())}: got {out[tuple(i)].item():.6g}, want {ref[tuple(i)].item():.6g}"
             for i in idx]
    more = int(mask.sum()) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


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

    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=o.device, dtype=torch.float64)
    finite_o, finite_r = torch.isfinite(o), torch.isfinite(r)
    nonfinite_mismatch = (finite_o != finite_r) | (~finite_o & ~finite_r & ~((o == r) | (o.isnan() & r.isnan())))
    err = _finite_abs_err(o, r)
    denom = r.abs() + tol.atol
    max_abs = float(err.max()) if err.numel() else 0.0
    max_rel = float((err / denom).max()) if err.numel() else 0.0
    ref_norm = float(torch.where(finite_r, r, torch.zeros_like(r)).norm())
    rel_l2 = float(err.norm()) / ref_norm if ref_norm > 0 else max_abs

    baseline_abs = 0.0
    if baseline is not None and tuple(baseline.shape) == tuple(ref.shape):
        b = baseline.detach().to(device=o.device, dtype=torch.float64)
        baseline_abs = float(_finite_abs_err(b, r).max()) if b.numel() else 0.0
    allowed = tol.factor * baseline_abs + tol.atol

    if bool(nonfinite_mismatch.any()):
        unwritten = bool((o.isnan() & finite_r).any())
        what = "NaN where the reference is finite (unwritten or broken elements)" if unwritten \
            else "non-finite values differ from the reference"
        return Comparison(name, max_abs, max_rel, rel_l2, baseline_abs, allowed, False,
                          f"{what}: {_positions(nonfinite_mismatch, o, r)}")
    excess = err - tol.rtol * r.abs()
    bad = excess > allowed
    if bool(bad.any()) and not (tol.max_rel_l2 is not None and rel_l2 <= tol.max_rel_l2):
        return Comparison(name, max_abs, max_rel, rel_l2, baseline_abs, allowed, False,
                          f"{int(bad.sum())} element(s) beyond tolerance: {_positions(bad, o, r)}")
    return Comparison(name, max_abs, max_rel, rel_l2, baseline_abs, allowed, True)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape and the same bits (NaN equal to NaN), for the race and determinism checks."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())
