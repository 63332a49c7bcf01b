from __future__ import annotations

import pytest
import torch

from kernelworks.check import bitwise_equal, compare
from kernelworks.spec import Tolerance

TOL = Tolerance(atol=1e-3, rtol=0.0, factor=2.0)


def test_error_scale_follows_the_baseline():
    ref = torch.linspace(-1, 1, 11, dtype=torch.float64)
    base = ref + 0.01  # PyTorch in low precision is off by 0.01
    assert compare("o", ref + 0.015, ref, base, TOL).passed  # within 2 × 0.01 + 1e-3
    bad = compare("o", ref + 0.03, ref, base, TOL)
    assert not bad.passed and bad.allowed == pytest.approx(2 * 0.01 + 1e-3)


def test_metrics():
    ref = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    c = compare("o", torch.tensor([1.0, 2.0, 5.0]), ref, None, TOL)
    assert c.max_abs == 1.0
    assert abs(c.rel_l2 - 1.0 / ref.norm().item()) < 1e-12
    assert not c.passed


def test_matching_infinities_pass_and_nan_mismatch_fails():
    ref = torch.tensor([float("-inf"), 0.5], dtype=torch.float64)
    assert compare("o", torch.tensor([float("-inf"), 0.5]), ref, None, TOL).passed
    c = compare("o", torch.tensor([float("nan"), 0.5]), ref, None, TOL)
    assert not c.passed and "non-finite" in c.problem


def test_blocked_comparison_matches_one_block(monkeypatch):
    """Large outputs stream through in blocks: the metrics, the baseline's scale and the reported
    positions (in the output's own shape) are those of the one-block comparison."""
    import importlib

    module = importlib.import_module("kernelworks.check.compare")

    torch.manual_seed(0)
    ref = torch.randn(5, 7, 3, dtype=torch.float64)
    base = ref + 0.01 * torch.randn_like(ref)
    out = (ref + 0.004 * torch.randn_like(ref)).float()
    out[4, 6, 1] += 1.0
    out[2, 0, 0] = float("nan")
    whole = compare("o", out, ref, base, TOL)
    monkeypatch.setattr(module, "COMPARE_BLOCK", 8)
    blocked = compare("o", out, ref, base, TOL)
    assert blocked.baseline_abs == whole.baseline_abs and blocked.max_abs == whole.max_abs
    assert blocked.rel_l2 == pytest.approx(whole.rel_l2, rel=1e-12)
    relative = Tolerance(atol=1e-3, rtol=1e-3)  # TOL has no relative slack: its normwise half does not run
    base_l2 = compare("o", out, ref, base, relative).baseline_rel_l2
    monkeypatch.setattr(module, "COMPARE_BLOCK", 1 << 25)
    assert base_l2 == pytest.approx(compare("o", out, ref, base, relative).baseline_rel_l2, rel=1e-12)
    monkeypatch.setattr(module, "COMPARE_BLOCK", 8)
    assert not blocked.passed and blocked.problem == whole.problem and "(2, 0, 0)" in blocked.problem
    out[2, 0, 0] = ref[2, 0, 0]
    bad = compare("o", out, ref, base, TOL)
    assert not bad.passed and "1 element(s)" in bad.problem and "(4, 6, 1)" in bad.problem


def test_a_systematic_error_under_the_absolute_floor_fails():
    """bf16 outputs of magnitude ~0.1 scaled by 1.02: every element is within bf16's atol (8e-3), so the element
    rule alone passes it; the output's normwise error (2e-2) is 12× PyTorch's own and fails."""
    from kernelworks.spec import default_tolerance

    torch.manual_seed(0)
    ref = torch.randn(4096, dtype=torch.float64) * 0.1
    base, tol = ref.to(torch.bfloat16), default_tolerance(torch.bfloat16)
    honest = compare("o", ref.to(torch.bfloat16), ref, base, tol)
    assert honest.passed and honest.baseline_rel_l2 == pytest.approx(honest.rel_l2)
    scaled = compare("o", (ref * 1.02).to(torch.bfloat16), ref, base, tol)
    assert scaled.max_abs < tol.atol  # the element rule cannot see it
    assert not scaled.passed and "every element is within tolerance" in scaled.problem
    # an op whose algorithm rounds differently declares a bound (max_rel_l2): it holds for the norm too
    from dataclasses import replace

    assert compare("o", (ref * 1.02).to(torch.bfloat16), ref, base, replace(tol, max_rel_l2=0.03)).passed


def test_the_normwise_half_reads_the_baseline_where_it_is_finite_and_needs_relative_slack():
    """PyTorch's error is measured over the elements where its output is finite (an overflowed baseline does
    not shrink the bound), and a rule with ``rtol = 0`` (an absolute one) keeps the element half alone."""
    torch.manual_seed(1)
    ref = torch.randn(1000, dtype=torch.float64)
    base = ref + 0.02 * torch.randn_like(ref)
    tol = Tolerance(atol=1.0, rtol=1e-3)
    out = ref + 0.03 * torch.randn_like(ref)
    whole = compare("o", out, ref, base, tol)
    base[100:] = float("nan")  # PyTorch overflowed on 90% of the elements: its error on the rest is the same
    part = compare("o", out, ref, base, tol)
    assert whole.passed and part.passed
    assert part.baseline_rel_l2 == pytest.approx(whole.baseline_rel_l2, rel=0.2)
    absolute = compare("o", ref + 1e-4, ref, ref.clone(), Tolerance(atol=1e-3))  # exact baseline, rtol 0
    assert absolute.passed and absolute.baseline_rel_l2 != absolute.baseline_rel_l2  # nan: not run
    zeros = torch.zeros(5, dtype=torch.float64)
    assert compare("o", zeros + 1e-4, zeros, zeros, TOL).passed


def test_shape_mismatch():
    c = compare("o", torch.zeros(3), torch.zeros(4, dtype=torch.float64), None, TOL)
    assert not c.passed and "shape" in c.problem


def test_bitwise_equal_treats_nan_as_equal():
    a = torch.tensor([1.0, float("nan")])
    assert bitwise_equal(a, a.clone())
    assert not bitwise_equal(a, torch.tensor([1.0, 2.0]))
