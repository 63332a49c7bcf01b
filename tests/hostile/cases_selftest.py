"""Synthetic ops with known faults, for test_harness.py: each must land in the class it deserves. Not part
of the suite's table (not in ``table.FAMILIES``)."""

from __future__ import annotations

import os

import torch

from .harness import Case, Op, Run

FAMILY = "selftest"


def _double(x, corrupt=None):
    """``2·x``, with a chosen fault: ``wrong`` (off by one somewhere), ``nan`` (a NaN where the answer is
    finite), ``mutate`` (writes its input), ``overrun`` (writes one element past x), ``raise_*``, ``abort``."""
    if corrupt == "abort":
        os.abort()
    if corrupt == "raise_runtime":
        raise RuntimeError("triton: out of resources")
    if corrupt == "raise_unnamed":
        raise ValueError("expected a tensor")
    if corrupt == "raise_named":
        raise ValueError("x: expected a float tensor")
    if corrupt == "raise_signature":
        raise TypeError("_double() got an unexpected keyword argument 'x'")
    y = 2 * x
    if corrupt == "wrong":
        y.view(-1)[0] += 1
    elif corrupt == "nan":
        y.view(-1)[0] = float("nan")
    elif corrupt == "mutate":
        x.view(-1)[0] = 0.0
    elif corrupt == "overrun":
        x.as_strided((x.numel() + 1,), (1,), x.storage_offset())[-1] = 0.0
    return y


OPS = [Op("double", FAMILY, _double, lambda x, corrupt=None: 2 * x)]


def _base(corrupt=None):
    return lambda: {"x": torch.randn(3, 5), "corrupt": corrupt}


def _holds(r: Run) -> None:
    assert torch.equal(r.outs[0], 2 * r.inputs["x"]), "not 2x"


CASES = [
    Case("double", "fine", _base(), "correct"),
    Case("double", "fine-guarded", _base(), "correct", guard=True),
    Case("double", "documented", _base(), "documented", check=_holds),
    Case("double", "documented-broken", _base("wrong"), "documented", check=_holds),
    Case("double", "wrong", _base("wrong"), "correct"),
    Case("double", "nan", _base("nan"), "correct"),
    Case("double", "mutate", _base("mutate"), "correct"),
    Case("double", "overrun", _base("overrun"), "correct", guard=True),
    Case("double", "raise_runtime", _base("raise_runtime"), "error", "x"),
    Case("double", "raise_unnamed", _base("raise_unnamed"), "error", "x"),
    Case("double", "raise_named", _base("raise_named"), "error", "x"),
    Case("double", "raise_signature", _base("raise_signature"), "error", "x"),
    Case("double", "abort", _base("abort"), "correct", isolate=True),
    Case("double", "after_abort", _base(), "correct", isolate=True),
]
