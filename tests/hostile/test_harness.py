"""The harness classifies known faults correctly (so a pass of the suite means something)."""

from __future__ import annotations

import pytest
import torch

from .cases_selftest import CASES, OPS
from .harness import guard_tensor, names_arg, run_case
from .table import isolated_outcomes

WANT = {  # case name -> the class the harness must give it
    "fine": "correct", "fine-guarded": "correct", "documented": "documented", "documented-broken": "wrong",
    "wrong": "wrong", "nan": "wrong", "mutate": "wrong", "overrun": "crash", "raise_runtime": "unclear_error",
    "raise_unnamed": "unclear_error", "raise_named": "error", "raise_signature": "unclear_error",
}


@pytest.mark.parametrize("name", list(WANT))
def test_classifies_in_process(name):
    case = next(c for c in CASES if c.name == name)
    assert run_case(case, OPS[0]).cls == WANT[name]


def test_dead_subprocess_is_a_crash_and_the_rest_still_run():
    results = isolated_outcomes("selftest")
    assert results["double-abort"].cls == "crash", results["double-abort"]
    assert results["double-after_abort"].cls == "correct", results["double-after_abort"]


@pytest.mark.parametrize("view", ["contiguous", "strided", "expanded", "transposed"])
def test_guard_keeps_shape_strides_and_values(view):
    t = torch.arange(12.0).reshape(3, 4)
    t = {"contiguous": t, "strided": t[:, ::2], "expanded": t[:1].expand(3, 4), "transposed": t.t()}[view]
    g, guard = guard_tensor("t", t)
    assert g.shape == t.shape and g.stride() == t.stride() and torch.equal(g, t)
    assert guard.damage() == ""
    guard.buf[0] = 1.0
    assert "guard of 't'" in guard.damage()


@pytest.mark.parametrize("message, names, named", [
    ("q: expected 4 dimension(s)", ("q",), True),
    ("a, b: expected one dtype", ("b",), True),
    ("expected a tensor, got a tensor on meta", ("a",), False),  # 'a' the article is not the argument a
    ("gated_delta_decode: no backward yet, but q require(s) grad", ("q",), True),
    ("block_table: page indices", ("context_lens",), False),
])
def test_names_arg(message, names, named):
    assert names_arg(message, names) == named
