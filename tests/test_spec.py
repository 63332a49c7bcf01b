from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelworks.spec import Case, Cost, OpSpec, Provider, dtype_name, load_spec, parse_dtype, randn, registry

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "user_kernel.py"


def test_registry_has_the_first_ops():
    names = set(registry())
    assert {"gelu", "silu", "swiglu", "geglu", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy",
            "fused_linear_cross_entropy"} <= names


def test_every_registered_spec_is_complete():
    for name, spec in registry().items():
        assert spec.check_cases, name
        assert spec.bench_cases, name
        assert "kernelworks" in spec.providers, name
        ids = [c.id for c in spec.check_cases]
        assert len(ids) == len(set(ids)), f"{name}: duplicate check case ids"
        for c in spec.bench_cases:
            for mode in spec.modes:
                cost = spec.cost(c, mode)
                assert cost.bytes > 0, f"{name} {c.id} {mode}: a cost model must count bytes"


def test_quick_subset_exists_for_report():
    for name, spec in registry().items():
        assert any("quick" in c.tags for c in spec.check_cases), name


def test_load_spec_from_file_and_name():
    spec = load_spec(f"{EXAMPLE}:SPEC")
    assert spec.name == "user_leaky_relu" and spec.subject == "mine"
    assert load_spec("softmax").name == "softmax"
    with pytest.raises(KeyError, match="no op named"):
        load_spec("no_such_op")
    with pytest.raises(TypeError, match="expected an OpSpec"):
        load_spec(f"{EXAMPLE}:reference")


def test_a_file_runs_once_and_a_failed_one_is_not_kept(tmp_path):
    runs = tmp_path / "runs.txt"
    f = tmp_path / "once.py"
    f.write_text(f"open({str(runs)!r}, 'a').write('ran\\n')\nA = B = None\n")
    for attr in "AB":
        with pytest.raises(TypeError, match="expected an OpSpec"):
            load_spec(f"{f}:{attr}")
    assert runs.read_text() == "ran\n"
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    for _ in range(2):  # raised again: the half-run module was not kept
        with pytest.raises(ImportError, match=r"bad\.py: running it raised RuntimeError: boom") as info:
            load_spec(f"{bad}:A")
        assert isinstance(info.value.__cause__, RuntimeError)


def test_subject_must_be_a_provider():
    with pytest.raises(ValueError, match="subject"):
        OpSpec("x", torch.relu, lambda c, d: {}, [], [], lambda c, m: Cost(), {"a": Provider("a", torch.relu)},
               subject="b")


def test_derived_baselines():
    spec = load_spec(f"{EXAMPLE}:SPEC")
    assert list(spec.all_providers()) == ["torch", "torch.compile", "mine"]
    assert spec.all_providers()["torch.compile"].gpu_only


def test_randn_padding_makes_a_strided_view():
    c = Case("c", {}, torch.bfloat16)
    t = randn((3, 5), c, "cpu", row_padding=3)
    assert t.shape == (3, 5) and t.stride() == (8, 1) and t.dtype == torch.bfloat16
    assert not t.is_contiguous() and t.abs().sum() > 0


def test_dtype_names_round_trip():
    for d in (torch.float32, torch.float16, torch.bfloat16):
        assert parse_dtype(dtype_name(d)) is d
    with pytest.raises(ValueError):
        parse_dtype("fp7")


def test_python_api_functions_survive_subpackage_imports():
    """``kernelworks.check``/``bench`` are functions; importing their subpackages must not rebind them."""
    import importlib

    import kernelworks

    importlib.import_module("kernelworks.check.engine")
    importlib.import_module("kernelworks.bench.render")
    assert callable(kernelworks.check) and callable(kernelworks.bench)
    results = kernelworks.check(load_spec(f"{EXAMPLE}:SPEC"), ["one_row"], verbose=False)
    assert results and all(r.passed for r in results)


def test_tolerance_gradient_bar():
    """``max_rel_l2_grad`` replaces ``max_rel_l2`` for gradients only; without it gradients keep the output bar."""
    from kernelworks.spec import Tolerance

    tol = Tolerance(atol=1e-3, max_rel_l2=5e-3, max_rel_l2_grad=2e-2)
    assert tol.for_gradients().max_rel_l2 == 2e-2 and tol.max_rel_l2 == 5e-3
    plain = Tolerance(atol=1e-3, max_rel_l2=5e-3)
    assert plain.for_gradients() == plain


def test_a_case_widens_one_gradients_bound():
    """A case's ``max_rel_l2_grads`` param bounds the gradients it names, for that case alone; its other
    gradients and its outputs keep the dtype's rule."""
    import torch

    from kernelworks.spec import registry

    spec = registry()["gated_delta_prefill"]
    default = spec.tolerance(torch.float32)
    sat0 = next(c for c in spec.check_cases if c.id == "b1-t40-sat0-fp32")
    assert spec.case_tolerance(sat0) == default
    assert spec.gradient_tolerance(sat0, "g").max_rel_l2 == 1e-3
    assert spec.gradient_tolerance(sat0, "q") == default.for_gradients()
    other = next(c for c in spec.check_cases if c.id == "b1-t40-sat1-fp32")
    assert spec.gradient_tolerance(other, "g") == default.for_gradients()


def test_grad_inputs_must_name_arguments_of_the_reference():
    """A typo in ``grad_inputs`` silently dropped that gradient's check; it is refused when the spec is made."""
    common = dict(inputs=lambda case, device: {}, check_cases=[Case("c", {}, torch.float32)], bench_cases=[],
                  cost=lambda case, mode: Cost(), providers={"p": Provider("p", lambda x, y: x + y)}, subject="p")
    with pytest.raises(ValueError, match=r"grad_inputs \['Y'\] name no argument"):
        OpSpec(name="t_typo", reference=lambda x, y: x + y, grad_inputs=("x", "Y"), **common)
    with pytest.raises(TypeError, match="tuple of input names"):
        OpSpec(name="t_str", reference=lambda x, y: x + y, grad_inputs="x", **common)
    OpSpec(name="t_kwargs", reference=lambda **kw: kw["x"], grad_inputs=("x",), **common)  # **kwargs: any name


def test_one_case_name_as_a_string_is_one_name():
    spec = registry()["softmax"]
    name = spec.check_cases[0].name
    assert spec.find_cases(name, bench=False) == spec.find_cases([name], bench=False)
