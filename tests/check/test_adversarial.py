"""The probes of ``kw check`` (two by default, four with ``--adversarial``) on cheating providers (each must be
caught) and honest tricky ones (none may be): y = x·w + b, pure torch, so the probes' logic is what is
tested."""

from __future__ import annotations

import pytest
import torch

from kernelworks.check import run_check
from kernelworks.spec import Case, Cost, OpSpec, Provider


def _reference(x, w, b):
    return x * w + b


def _inputs(case, device):
    n = case["n"]
    return {"x": torch.randn(8, n, device=device), "w": torch.randn(n, device=device),
            "b": torch.randn(n, device=device)}


def _spec(fn) -> OpSpec:
    return OpSpec(name="toy_affine", reference=_reference, inputs=_inputs,
                  check_cases=[Case("c", {"n": 16}, torch.float32)], bench_cases=[],
                  cost=lambda case, mode: Cost(bytes=1), providers={"p": Provider("p", fn)}, subject="p",
                  baselines=())


# ------------------------------------------------------------------------------------------- cheats

def _cache_by_shape():
    memo = {}

    def fn(x, w, b):
        key = (x.shape, w.shape)
        if key not in memo:
            memo[key] = x * w + b
        return memo[key].clone()
    return fn


def _cache_by_pointer():
    memo = {}

    def fn(x, w, b):
        key = (x.data_ptr(), w.data_ptr(), b.data_ptr())
        if key not in memo:
            memo[key] = x * w + b
        return memo[key].clone()
    return fn


def _ignores_bias_after_first_call():
    state = {"b": None}

    def fn(x, w, b):
        if state["b"] is None:
            state["b"] = b.clone()
        return x * w + state["b"]
    return fn


def _half_cached_rows():
    memo = {}

    def fn(x, w, b):
        out = x * w + b
        if x.shape in memo:
            out[4:] = memo[x.shape][4:]  # the second half from the first call
        else:
            memo[x.shape] = out.clone()
        return out
    return fn


CHEATS = {"cache_by_shape": _cache_by_shape, "cache_by_pointer": _cache_by_pointer,
          "ignores_bias_after_first_call": _ignores_bias_after_first_call, "half_cached_rows": _half_cached_rows}


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheats_pass_the_fixed_input_check_and_fail_the_adversarial_one(name):
    plain = run_check(_spec(CHEATS[name]()), probes=False)
    assert all(r.passed for r in plain), "the cheat should fool the fixed-input check (else this proves nothing)"
    probed = run_check(_spec(CHEATS[name]()), adversarial=True)
    assert not probed[0].passed and any(p.startswith("adversarial") for p in probed[0].problems), probed[0].problems


@pytest.mark.parametrize("name", list(CHEATS))
def test_stale_results_fail_the_default_check(name):
    """The default probes (no ``adversarial``) catch every cheat here: each returns a stale answer for the
    same tensors refilled; ``probes=False`` turns them off."""
    (res,) = run_check(_spec(CHEATS[name]()))
    assert any(p.startswith("adversarial (fresh values in the same tensors)") for p in res.problems), res.problems
    assert not any(p.startswith(("adversarial (dependence)", "adversarial (other shapes)")) for p in res.problems)
    (res,) = run_check(_spec(CHEATS[name]()), probes=False)
    assert res.passed, res.problems


def test_the_dependence_probe_names_the_ignored_input():
    (res,) = run_check(_spec(_ignores_bias_after_first_call()), adversarial=True)
    ignored = [p for p in res.problems if p.startswith("adversarial (dependence)") and "input is ignored" in p]
    assert len(ignored) == 1 and "'b'" in ignored[0], res.problems


# ------------------------------------------------------------------------------------------- honest

def _weight_cache_keyed_by_version():
    """Legal caching: a transformed weight kept while the weight's storage and version are unchanged."""
    memo = {}

    def fn(x, w, b):
        key = (w.data_ptr(), w._version)
        if key not in memo:
            memo.clear()
            memo[key] = w.clone()
        return x * memo[key] + b
    return fn


def _reordered(x, w, b):
    return b + w * x  # same math, other order


def _unused_input_spec() -> OpSpec:
    """An op that does not read ``b`` at all: the dependence probe must not blame the provider."""
    return OpSpec(name="toy_scale", reference=lambda x, w, b: x * w, inputs=_inputs,
                  check_cases=[Case("c", {"n": 16}, torch.float32)], bench_cases=[],
                  cost=lambda case, mode: Cost(bytes=1), providers={"p": Provider("p", lambda x, w, b: x * w)},
                  subject="p", baselines=())


@pytest.mark.parametrize("spec", [_spec(_weight_cache_keyed_by_version()), _spec(_reordered), _unused_input_spec()],
                         ids=["weight_cache_by_version", "reordered", "unused_input"])
def test_honest_providers_pass_the_adversarial_check(spec):
    (res,) = run_check(spec, adversarial=True)
    assert res.passed, res.problems


def _counted(fn):
    def counted(**inputs):
        counted.calls += 1
        return fn(**inputs)
    counted.calls = 0
    return counted


def test_the_default_probes_cost_two_forward_calls():
    calls = {}
    for label, kwargs in {"none": {"probes": False}, "default": {}, "all": {"adversarial": True}}.items():
        fn = _counted(_reordered)
        (res,) = run_check(_spec(fn), **kwargs)
        assert res.passed, res.problems
        calls[label] = fn.calls
    assert calls["none"] == 2 and calls["default"] == 4 and calls["all"] > calls["default"] + 3, calls


# ---------------------------------------------------------------------------------------- other shapes


def test_a_bf16_computation_under_the_absolute_floor_fails_the_plain_check():
    """Outputs ~1e-3: a bf16 computation's error (4e-6) passes fp32's atol (1e-5) element by element; the
    rule's normwise half fails it (the precision probe's job until session 19)."""
    spec = _spec(lambda x, w, b: (x.bfloat16() * w.bfloat16() + b.bfloat16()).float())
    spec.inputs = lambda case, device: {k: v * 1e-3 for k, v in _inputs(case, device).items()}
    (plain,) = run_check(spec, probes=False)
    failed = [c for c in plain.comparisons if not c.passed]
    assert failed and all("every element is within tolerance" in c.problem for c in failed), plain.comparisons


def test_other_shapes_probe_skips_with_a_note_when_no_param_is_a_size():
    spec = _spec(_reordered)
    spec.check_cases = [Case("c", {"n": 16, "flag": True}, torch.float32)]
    spec.inputs = lambda case, device: _inputs(Case("c", {"n": 16}), device)  # ignores the case's sizes
    (res,) = run_check(spec, adversarial=True)
    assert res.passed and any("other shapes): skipped" in n for n in res.notes), res.notes


def test_other_shapes_probe_skips_a_shape_the_provider_rejects():
    def only_16(x, w, b):
        if x.shape[-1] != 16:
            raise NotImplementedError("n = 16 only")
        return x * w + b
    (res,) = run_check(_spec(only_16), adversarial=True)
    assert res.passed and any("provider raised NotImplementedError" in n for n in res.notes), res.notes
