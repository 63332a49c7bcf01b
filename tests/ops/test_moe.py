"""moe_sort / moe_permute / moe_unpermute: the specs' checklists (fp32/fp16/bf16, int32 and strided index
views, padded rows, top-1 to top-8), agreement with Hugging Face's own expert loop, index values that are
out of range (zero rows, nothing else touched; validation mode names them), experts out of range dropped by
``moe_sort``, bad input, torch.compile and opcheck. CPU: Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

import kernelworks as kw
from kernelworks.check.engine import check_case
from kernelworks.ops.moe import api
from kernelworks.ops.moe.spec import MOE_PERMUTE_SPEC, MOE_UNPERMUTE_SPEC
from kernelworks.runtime.alloc import poison_outputs
from kernelworks.runtime.device import default_device

DEVICE = default_device()
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SPECS = (MOE_PERMUTE_SPEC, MOE_UNPERMUTE_SPEC)


def _routing(t=6, k=2, e=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    top_k_index = torch.rand(t, e, generator=g).argsort(dim=-1)[:, :k].to(DEVICE)
    weights = torch.rand(t, k, generator=g).softmax(-1).to(DEVICE)
    return top_k_index, weights


@pytest.mark.parametrize("spec, case", [(s, c) for s in SPECS for c in s.check_cases if "gpu" not in c.tags],
                         ids=lambda x: getattr(x, "name", None) or str(x))
def test_spec_checklist(spec, case):
    """``kw check moe_permute`` / ``moe_unpermute``, case by case: float64 reference, NaN-poisoned outputs, two
    runs bit for bit, inputs untouched, forward and gradients."""
    for r in check_case(spec, case, device=DEVICE, probes=False):
        bad = [f"{c.output}: {c.max_abs:.3g} > {c.allowed:.3g} {c.problem}" for c in r.comparisons if not c.passed]
        assert r.passed, f"{r.mode}: {r.problems + bad}"


def test_sort_groups_pairs_by_expert_stably():
    top_k_index, _ = _routing(t=9, k=3, e=5)
    order, inverse, sizes = kw.moe_sort(top_k_index, 5)
    flat = top_k_index.reshape(-1)
    assert torch.equal(flat[order], flat.sort(stable=True).values)
    assert torch.equal(order, flat.argsort(stable=True))  # stable: tokens keep their order in an expert
    assert torch.equal(inverse[order], torch.arange(27, device=DEVICE))
    assert torch.equal(sizes.long(), torch.bincount(flat, minlength=5))
    assert sizes.dtype == torch.int32


def test_experts_out_of_range_are_dropped():
    """A pair routed to an expert outside [0, E) sorts last, is in no group, and adds nothing to its token."""
    top_k_index = torch.tensor([[0, 1], [2, 7], [-1, 1]], device=DEVICE)
    order, inverse, sizes = kw.moe_sort(top_k_index, 3)
    assert sizes.tolist() == [1, 2, 1]
    assert set(order[4:].tolist()) == {3, 4}  # the pairs (1, slot 1) and (2, slot 0), after every group
    hidden = torch.randn(3, 8, device=DEVICE)
    w = torch.randn(3, 8, 4, device=DEVICE)
    y = kw.grouped_matmul(kw.moe_permute(hidden, order, inverse), w, sizes)
    out = kw.moe_unpermute(y, torch.ones(3, 2, device=DEVICE), order, inverse)
    expected = torch.stack([hidden[0] @ w[0] + hidden[0] @ w[1], hidden[1] @ w[2], hidden[2] @ w[1]])
    torch.testing.assert_close(out, expected)


def test_matches_hugging_face_expert_loop():
    """The dispatch, two grouped products and the combine give HF's Qwen3-MoE expert loop, with gradients
    for the tokens, the experts and the routing weights."""
    torch.manual_seed(1)
    t, k, e, h, inner = 7, 2, 4, 16, 8
    top_k_index, weights = _routing(t, k, e, seed=2)
    hidden = torch.randn(t, h, device=DEVICE)
    w_up = torch.randn(e, inner, h, device=DEVICE) * h ** -0.5
    leaves = [x.clone().requires_grad_() for x in (hidden, w_up, weights)]

    def ours(hidden, w_up, weights):
        order, inverse, sizes = kw.moe_sort(top_k_index, e)
        y = kw.grouped_matmul(kw.moe_permute(hidden, order, inverse), w_up.transpose(1, 2), sizes)
        return kw.moe_unpermute(y, weights, order, inverse)

    def hf(hidden, w_up, weights):
        out = torch.zeros_like(hidden[:, :inner])
        for expert in range(e):
            token, slot = torch.where(top_k_index == expert)
            out = out.index_add(0, token, (hidden[token] @ w_up[expert].T) * weights[token, slot, None])
        return out

    a, b = ours(*leaves), hf(*[x.detach().clone().requires_grad_() for x in (hidden, w_up, weights)])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(a)
    grads_a = torch.autograd.grad(a, leaves, g)
    b_leaves = [x.detach().clone().requires_grad_() for x in (hidden, w_up, weights)]
    grads_b = torch.autograd.grad(hf(*b_leaves), b_leaves, g)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(ga, gb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [10**6, -3, 12], ids=["huge", "negative", "just_past"])
def test_index_values_out_of_range_read_as_zero_rows(bad):
    """A bad ``order`` entry gives a zero row (and, in the combine's backward, no ``dw``); a bad ``inverse``
    entry adds nothing. Rows with good indices are unchanged. Validation mode names the argument."""
    top_k_index, weights = _routing(t=6, k=2, e=4, seed=3)
    order, inverse, _ = kw.moe_sort(top_k_index, 4)
    with kw.validation(False):  # the suite runs in validation mode; users' default is off
        hidden = torch.randn(6, 40, device=DEVICE)
        good = kw.moe_permute(hidden, order, inverse)
        order_bad = order.clone()
        order_bad[5] = bad
        x = kw.moe_permute(hidden, order_bad, inverse)
        assert torch.equal(x[5], torch.zeros_like(x[5]))
        assert torch.equal(torch.cat([x[:5], x[6:]]), torch.cat([good[:5], good[6:]]))

        inverse_bad = inverse.clone()
        inverse_bad[2 * 3 + 1] = bad  # token 3's second pair
        y = torch.randn(12, 40, device=DEVICE)
        out = kw.moe_unpermute(y, weights, order, inverse_bad)
        expected = weights[3, 0] * y[inverse[6]]
        torch.testing.assert_close(out[3], expected)

        y_leaf, w_leaf = y.clone().requires_grad_(), weights.clone().requires_grad_()
        out = kw.moe_unpermute(y_leaf, w_leaf, order_bad, inverse)
        with poison_outputs():  # an unwritten gradient would be NaN
            dy, dw = torch.autograd.grad(out, (y_leaf, w_leaf), torch.ones_like(out))
        assert torch.equal(dy[5], torch.zeros_like(dy[5]))
        kept = torch.arange(12, device=DEVICE) != order[5]  # the pair whose position reads out of range
        torch.testing.assert_close(dw.reshape(-1)[kept], y[inverse].sum(-1)[kept])
        assert dw.reshape(-1)[order[5]] == 0  # a zero gradient there, not whatever the memory held

    with kw.validation(True):
        with pytest.raises(ValueError, match="order"):
            kw.moe_permute(hidden, order_bad, inverse)
        repeated = order.clone()
        repeated[5] = order[4]  # in range, but not a permutation
        with pytest.raises(ValueError, match="inverse permutations"):
            kw.moe_permute(hidden, repeated, inverse)
        with pytest.raises(ValueError, match="inverse"):
            kw.moe_unpermute(y, weights, order, inverse_bad)


@pytest.mark.parametrize("call, match", [
    (lambda h, o, i, y, w: kw.moe_permute(h, o[:-1], i), "one length"),
    (lambda h, o, i, y, w: kw.moe_permute(h[:5], o, i), "multiple of 5"),
    (lambda h, o, i, y, w: kw.moe_permute(h, o.float(), i), "dtype"),
    (lambda h, o, i, y, w: kw.moe_permute(h[0], o, i), "dimension"),
    (lambda h, o, i, y, w: kw.moe_permute(h.long(), o, i), "dtype"),
    (lambda h, o, i, y, w: kw.moe_unpermute(y, w[:, :1], o, i), "y, weights"),
    (lambda h, o, i, y, w: kw.moe_unpermute(y[:-1], w, o, i), "y, weights"),
    (lambda h, o, i, y, w: kw.moe_unpermute(y[:6], w[:3], o, i), "order, weights"),
    (lambda h, o, i, y, w: kw.moe_unpermute(y, w.long(), o, i), "dtype"),
    (lambda h, o, i, y, w: kw.moe_sort(o.view(-1, 2), 0), "num_experts"),
    (lambda h, o, i, y, w: kw.moe_sort(o.float().view(-1, 2), 4), "dtype"),
], ids=["lengths", "not_a_multiple", "float_order", "hidden_1d", "int_hidden", "weights_shape", "y_rows",
        "weights_tokens", "int_weights", "no_experts", "float_index"])
def test_bad_input(call, match):
    top_k_index, weights = _routing(t=6, k=2, e=4)
    order, inverse, _ = kw.moe_sort(top_k_index, 4)
    hidden, y = torch.randn(6, 8, device=DEVICE), torch.randn(12, 8, device=DEVICE)
    with pytest.raises((TypeError, ValueError), match=match):
        call(hidden, order, inverse, y, weights)


def test_torch_compile_fullgraph(compile_graphs):
    """Sort, dispatch and combine trace into one graph (the custom ops in it) and agree with eager bit for bit."""
    backend, graphs = compile_graphs
    top_k_index, weights = _routing(t=5, k=2, e=3, seed=4)

    def f(hidden, weights):
        order, inverse, _ = kw.moe_sort(top_k_index, 3)
        x = kw.moe_permute(hidden, order, inverse)
        return kw.moe_unpermute(x * 2, weights, order, inverse)

    hidden = torch.randn(5, 24, device=DEVICE)
    results = []
    for fn in (torch.compile(f, backend=backend, fullgraph=True), f):
        leaves = [hidden.clone().requires_grad_(), weights.clone().requires_grad_()]
        out = fn(*leaves)
        results.append((out, *torch.autograd.grad(out, leaves, torch.ones_like(out))))
    assert any("kernelworks.moe_permute" in g and "kernelworks.moe_unpermute" in g for g in graphs)
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_backward_fakes_are_laid_out_as_the_real_gradients():
    """Under torch.compile the fake backward's strides must be the real one's: the kernels return contiguous
    gradients whatever the inputs' layout (a transposed ``y`` or ``weights`` once failed inductor's check)."""
    top_k_index, weights = _routing(t=4, k=2, e=3, seed=6)
    order, _, _ = kw.moe_sort(top_k_index, 3)
    y = torch.randn(16, 8, device=DEVICE).t()  # [8, 16] transposed
    w = weights.t().contiguous().t()
    dout = torch.randn(4, 16, device=DEVICE)
    real = api._unpermute_backward(dout, y, w, order, True, True)
    fake = api._unpermute_backward_fake(dout, y, w, order, True, True)
    assert [t.stride() for t in real] == [t.stride() for t in fake]
    assert [t.shape for t in real] == [t.shape for t in fake]


def test_double_backward_raises_instead_of_treating_gradients_as_constants():
    top_k_index, weights = _routing(t=4, k=2, e=3, seed=7)
    order, inverse, _ = kw.moe_sort(top_k_index, 3)
    y = torch.randn(8, 16, device=DEVICE, requires_grad=True)
    w = weights.clone().requires_grad_()
    out = kw.moe_unpermute(y, w, order, inverse)
    with pytest.raises(RuntimeError, match="moe_unpermute kernels have no double backward"):
        torch.autograd.grad(out.square().sum(), (w,), create_graph=True)


def test_opcheck():
    top_k_index, weights = _routing(t=4, k=2, e=3, seed=5)
    order, inverse, _ = kw.moe_sort(top_k_index, 3)
    hidden = torch.randn(4, 16, device=DEVICE, requires_grad=True)
    y = torch.randn(8, 16, device=DEVICE, requires_grad=True)
    torch.library.opcheck(api._permute.custom_op, (hidden, order, inverse))
    torch.library.opcheck(api._unpermute.custom_op, (y, weights.requires_grad_(), order, inverse))


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_gpu_spec_cases(spec):
    for case in spec.check_cases:
        for r in check_case(spec, case, device=torch.device("cuda")):
            assert r.passed, (case.name, r.mode, r.problems, [c for c in r.comparisons if not c.passed])
