"""The checklist engine must catch each class of bug it claims to: every test here plants one."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernelworks.check import check_case, check_table, run_check, summarize
from kernelworks.runtime import empty_like
from kernelworks.spec import Case, Cost, OpSpec, Provider, randn

CASE = Case("small", {"rows": 5, "cols": 33}, torch.float16)


def _spec(fn, *, grad: bool = False, deterministic: bool = True) -> OpSpec:
    return OpSpec(
        name="t_gelu",
        reference=lambda x: torch.nn.functional.gelu(x),
        inputs=lambda case, device: {"x": randn((case["rows"], case["cols"]), case, device)},
        check_cases=[CASE, Case("big", {"rows": 2, "cols": 3}, torch.float32, frozenset({"gpu"}))],
        bench_cases=[],
        cost=lambda case, mode: Cost(),
        providers={"p": Provider("p", fn)},
        subject="p",
        grad_inputs=("x",) if grad else (),
        deterministic=deterministic,
        baselines=("torch",),
    )


def _fwd(spec: OpSpec):
    (res,) = [r for r in check_case(spec, CASE) if r.mode == "fwd"]
    return res


def test_correct_provider_passes():
    res = _fwd(_spec(torch.nn.functional.gelu))
    assert res.passed, check_table([res])
    assert res.comparisons[0].max_abs < 1e-2


def test_wrong_values_fail():
    res = _fwd(_spec(lambda x: torch.nn.functional.gelu(x) * 1.02))
    assert not res.passed
    assert "beyond tolerance" in res.comparisons[0].problem


def test_unwritten_element_is_caught_by_poisoning():
    def leaves_last(x):
        y = empty_like(x)
        y.view(-1)[:-1] = torch.nn.functional.gelu(x).reshape(-1)[:-1]
        return y

    res = _fwd(_spec(leaves_last))
    assert not res.passed
    assert "NaN where the reference is finite" in res.comparisons[0].problem
    assert "(4, 32)" in res.comparisons[0].problem  # names the position


def test_unwritten_element_of_a_plain_torch_empty_is_caught():
    """A user kernel allocating with ``torch.empty_like`` (not ours): on a GPU the dirtied caching allocator, on
    the CPU the poisoning dispatch mode, hands it NaN where it never writes (a large fresh CPU block is zero
    pages: a kernel that skips writing its zeros would otherwise pass)."""
    def skips_zeros(x):
        y = torch.empty_like(x)
        keep = x > 0
        y[keep] = x[keep]
        return y

    spec = dataclasses.replace(_spec(skips_zeros), reference=torch.relu)
    res = _fwd(spec)
    assert not res.passed and "NaN where the reference is finite" in res.comparisons[0].problem


def test_provider_returning_none_fails_with_a_message():
    res = _fwd(_spec(lambda x: None))
    assert not res.passed and res.comparisons[0].problem == "expected a tensor, got NoneType"


def test_moving_result_is_reported_as_race():
    res = _fwd(_spec(lambda x: torch.nn.functional.gelu(x) + 1e-4 * torch.rand_like(x), deterministic=True))
    assert any("two runs" in p for p in res.problems)


def test_a_race_into_a_kept_output_buffer_is_reported():
    """A provider may keep its output buffer between calls; two runs that write different values into it must
    still be told apart (the first run's values are copied before the second overwrites them)."""
    kept: dict[str, torch.Tensor] = {}

    def racy_into_kept(x):
        out = kept.setdefault("out", torch.empty_like(x)).copy_(torch.nn.functional.gelu(x))
        return out.add_(1e-4 * torch.rand_like(x))

    res = _fwd(_spec(racy_into_kept))
    assert any("two runs" in p for p in res.problems)


def test_an_honest_kept_output_buffer_passes():
    kept: dict[str, torch.Tensor] = {}

    def into_kept(x):
        return kept.setdefault("out", torch.empty_like(x)).copy_(torch.nn.functional.gelu(x))

    res = _fwd(_spec(into_kept))
    assert res.passed, check_table([res])


def test_a_different_number_of_outputs_on_the_second_run_fails():
    calls = []

    def flaky(x):
        calls.append(1)
        y = torch.nn.functional.gelu(x)
        return (y,) if len(calls) == 1 else (y, y)

    res = _fwd(_spec(flaky))
    assert any("returned 1 and 2 output(s)" in p for p in res.problems)


def test_a_write_around_a_strided_input_view_is_reported():
    """An input that is a view of a larger allocation (padded rows): writing the padding is writing a neighbour's
    memory, and must fail even though the input's own values are untouched."""
    def padded(case, device):
        full = randn((case["rows"], case["cols"] + 7), case, device)
        return {"x": full[:, :case["cols"]]}

    def writes_padding(x):
        full = torch.as_strided(x, (x.shape[0], x.stride(0)), (x.stride(0), 1))
        full[:, x.shape[1]:] = 0
        return torch.nn.functional.gelu(x)

    res = _fwd(dataclasses.replace(_spec(writes_padding), inputs=padded))
    assert any("memory around its view" in p for p in res.problems), res.problems
    assert _fwd(dataclasses.replace(_spec(torch.nn.functional.gelu), inputs=padded)).passed


def test_modified_input_is_reported():
    def clobbers(x):
        y = torch.nn.functional.gelu(x)
        x.mul_(2)
        return y

    res = _fwd(_spec(clobbers))
    assert any("input 'x' was modified" in p for p in res.problems)


def test_wrong_dtype_fails():
    res = _fwd(_spec(lambda x: torch.nn.functional.gelu(x.float())))
    assert not res.passed and "dtype fp32, want fp16" in res.comparisons[0].problem


def test_provider_exception_is_a_failure_not_a_crash():
    def boom(x):
        raise RuntimeError("kernel exploded")

    res = _fwd(_spec(boom))
    assert not res.passed and "kernel exploded" in res.problems[0]


class _WrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x)

    @staticmethod
    def backward(ctx, g):
        return g  # forgets the derivative of gelu


def test_wrong_gradient_fails_backward_only():
    results = {r.mode: r for r in check_case(_spec(lambda x: _WrongGrad.apply(x), grad=True), CASE)}
    assert results["fwd"].passed
    assert not results["bwd"].passed
    assert results["bwd"].comparisons[0].output == "grad x"


def test_right_gradient_passes():
    results = check_case(_spec(torch.nn.functional.gelu, grad=True), CASE)
    assert [r.mode for r in results] == ["fwd", "bwd"]
    assert all(r.passed for r in results), check_table(results)


class _Clobber(_WrongGrad):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = torch.ops.aten.gelu_backward(g, x)
        x.zero_()  # the bug: scratch space taken from a saved input
        return grad


def test_backward_that_overwrites_an_input_is_reported():
    results = {r.mode: r for r in check_case(_spec(lambda x: _Clobber.apply(x), grad=True, deterministic=False),
                                             CASE)}
    assert results["fwd"].passed
    assert "input 'x' was modified by the forward or the backward" in results["bwd"].problems


def test_gpu_cases_skip_on_cpu_and_summary_counts():
    results = run_check(_spec(torch.nn.functional.gelu), device=torch.device("cpu"))
    assert summarize(results) == (1, 0, 1)
    assert "GPU-only" in results[1].skipped


def test_unknown_case_name_is_a_clear_error():
    with pytest.raises(KeyError, match="no check case named"):
        run_check(_spec(torch.nn.functional.gelu), ["nope"])


def test_reference_crash_fails_the_case_not_the_run():
    def broken_reference(x):
        raise RuntimeError("reference exploded")

    spec = _spec(lambda x: torch.nn.functional.gelu(x))
    spec.reference = broken_reference
    (res,) = check_case(spec, CASE)
    assert not res.passed and "reference exploded" in res.problems[0]


def test_relative_l2_bound_passes_only_what_it_bounds():
    from kernelworks.check.compare import compare
    from kernelworks.spec import Tolerance

    ref = torch.ones(1000, dtype=torch.float64)
    out = ref.clone()
    out[0] = 1.1  # one element 0.1 off: past the element rule, 0.1 / √1000 ≈ 3.2e-3 in relative L2
    strict, bounded = Tolerance(atol=1e-3), Tolerance(atol=1e-3, max_rel_l2=5e-3)
    assert not compare("o", out, ref, ref, strict).passed
    assert compare("o", out, ref, ref, bounded).passed
    assert not compare("o", out, ref, ref, Tolerance(atol=1e-3, max_rel_l2=1e-3)).passed
    out[1] = float("nan")  # an unwritten element fails whatever the bound
    assert not compare("o", out, ref, ref, bounded).passed


# ------------------------------------------------------------------------ session 21: the workbench probe

def _generic(name: str, reference, inputs, fn, *, grad_inputs=(), case=CASE) -> OpSpec:
    return OpSpec(name=name, reference=reference, inputs=inputs, check_cases=[case], bench_cases=[],
                  cost=lambda case, mode: Cost(), providers={"p": Provider("p", fn)}, subject="p",
                  grad_inputs=grad_inputs)


def _rowmax_inputs(case, device):
    return {"x": randn((case["rows"], 400), case, device)}


def test_an_index_output_off_by_one_fails():
    """Integer outputs are compared exactly: under the bf16/fp16 tolerance (scaled by |ref|) an argmax off by
    one passed once the index reached ~125 (bf16) or ~1000 (fp16)."""
    def argmax_off_by_one(x):
        i = x.argmax(-1)
        return torch.where(i > 200, i + 1, i)

    res = _fwd(_generic("t_argmax", lambda x: x.argmax(-1), _rowmax_inputs, argmax_off_by_one))
    assert not res.passed and "compared exactly" in res.comparisons[0].problem
    assert _fwd(_generic("t_argmax_ok", lambda x: x.argmax(-1), _rowmax_inputs, lambda x: x.argmax(-1))).passed


def test_a_reference_working_in_place_does_not_blame_the_provider():
    """The reference runs on copies: one written in place (``x.mul_(2)``) used to change the inputs the
    provider was then checked on, and the provider was reported as wrong and as modifying ``x``."""
    res = _fwd(_generic("t_inplace_ref", lambda x: x.mul_(2), lambda case, device: {
        "x": randn((case["rows"], case["cols"]), case, device)}, lambda x: x * 2))
    assert res.passed, check_table([res])


def test_tensors_inside_a_list_input_are_upcast_and_watched():
    """A list of tensors is upcast for the float64 truth like a tensor input (an exactly rounded sum of 32
    fp16 tensors failed against a truth that kept fp16's rounding), and a write into one is reported."""
    def inputs(case, device):
        return {"ys": [randn((case["rows"], case["cols"]), case, device) for _ in range(32)]}

    def exact_sum(ys):
        return torch.stack(ys).double().sum(0).to(ys[0].dtype)

    def reference(ys):
        return torch.stack(ys).sum(0)

    assert _fwd(_generic("t_listsum", reference, inputs, exact_sum)).passed

    def clobbers(ys):
        out = exact_sum(ys)
        ys[1].zero_()
        return out

    res = _fwd(_generic("t_listsum_clobber", reference, inputs, clobbers))
    assert any("input 'ys[1]' was modified" in p for p in res.problems)


def test_a_provider_without_a_gradient_is_named():
    """A provider whose output does not require grad (no autograd path) fails with a reason, not autograd's
    "appears to not have been used in the graph"."""
    spec = _generic("t_nograd", lambda x: x * 2, lambda case, device: {
        "x": randn((case["rows"], case["cols"]), case, device)}, lambda x: (x * 2).detach(), grad_inputs=("x",))
    (bwd,) = [r for r in check_case(spec, CASE) if r.mode == "bwd"]
    assert any("no output requires grad" in p for p in bwd.problems), bwd.problems
