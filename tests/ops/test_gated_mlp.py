"""``gated_mlp``: the unfused composition's values and gradients, the activation not saved for the backward,
frozen weights' GEMMs skipped, bad inputs, torch.compile (one graph) and opcheck. CPU: Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

import kernelworks as kw
from kernelworks.ops.activation import mlp, reference
from kernelworks.runtime.device import default_device

DEVICE = default_device()
TOKENS, HIDDEN, INNER = 6, 16, 40


def _inputs(dtype=torch.float32, tokens=(TOKENS,), grad=(True, True, True, True)):
    g = torch.Generator().manual_seed(0)

    def make(*shape, scale=1.0, requires_grad=True):
        t = (scale * torch.randn(shape, generator=g)).to(dtype).to(DEVICE)
        return t.requires_grad_(requires_grad)

    return (make(*tokens, HIDDEN, requires_grad=grad[0]), make(INNER, HIDDEN, scale=HIDDEN ** -0.5,
            requires_grad=grad[1]), make(INNER, HIDDEN, scale=HIDDEN ** -0.5, requires_grad=grad[2]),
            make(HIDDEN, INNER, scale=INNER ** -0.5, requires_grad=grad[3]))


def _grads(fn, tensors, grad_y, **options):
    out = fn(*tensors, **options)
    out.backward(grad_y)
    grads = [None if t.grad is None else t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("blocked", [False, True], ids=["one-block", "blocked"])
@pytest.mark.parametrize(("activation", "approximate"), [("swiglu", "tanh"), ("geglu", "tanh"), ("geglu", "none")])
@pytest.mark.parametrize("tokens", [(TOKENS,), (2, 3)], ids=["2d", "3d"])
def test_matches_composition(activation, approximate, tokens, blocked, monkeypatch):
    """Both backward paths: the whole intermediate at once (small temporaries, the tiny shapes' default) and
    blocks of the layer's width with grad_x summed in fp32 (``ONE_BLOCK_BYTES`` 0 forces them here)."""
    if blocked:
        monkeypatch.setattr(mlp, "ONE_BLOCK_BYTES", 0)
    tensors = _inputs(tokens=tokens)
    grad_y = torch.randn(*tokens, HIDDEN, device=DEVICE)
    out, grads = _grads(kw.gated_mlp, tensors, grad_y, activation=activation, approximate=approximate)
    ref, ref_grads = _grads(reference.gated_mlp, tensors, grad_y, activation=activation, approximate=approximate)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for name, got, want in zip(("x", "gate", "up", "down"), grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"grad {n}: {m}")


def _saved_bytes(fn, tensors) -> int:
    """Bytes autograd keeps for the backward of ``fn(*tensors)``, the inputs themselves excluded."""
    inputs = {t.data_ptr() for t in tensors}
    saved = {}

    def pack(t):
        if t.data_ptr() not in inputs:
            saved[t.data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*tensors)
    return sum(saved.values())


def _with_swiglu_kernel(x, wg, wu, wd):
    """The patch's previous MLP: the model's projections around the fused activation."""
    linear = torch.nn.functional.linear
    return linear(kw.swiglu(linear(x, wg), linear(x, wu)), wd)


def test_activation_is_not_saved():
    """Per [tokens, intermediate] tensor kept for the backward: ours 2 (gate, up); projections around the
    activation kernel 3 (gate, up, h); the plain torch composition 4 (gate, up, silu(gate), h)."""
    tensors = _inputs()
    per_tensor = TOKENS * INNER * 4
    assert _saved_bytes(kw.gated_mlp, tensors) == 2 * per_tensor
    assert _saved_bytes(_with_swiglu_kernel, tensors) == 3 * per_tensor
    assert _saved_bytes(reference.gated_mlp, tensors) == 4 * per_tensor


def _token_contractions(monkeypatch, grad) -> int:
    """GEMMs of one forward+backward that sum over tokens (``K = tokens``): the weight gradients."""
    x, wg, wu, wd = _inputs(grad=grad)
    calls = []
    real_mm = torch.mm
    with monkeypatch.context() as patched:
        patched.setattr(mlp.torch, "mm", lambda a, b, **kw_: calls.append(a.shape[1]) or real_mm(a, b, **kw_))
        kw.gated_mlp(x, wg, wu, wd).sum().backward()
    return sum(k == TOKENS for k in calls)


def test_backward_blocks_only_large_temporaries():
    """One step over the intermediate dimension where a ``[tokens, inner]`` temporary is small (the issue's
    small model: hidden 1024, intermediate 2816, 8192 tokens, 46 MB); blocks of the layer's width where it is
    not (Llama-3-8B at 8192 tokens: 235 MB, four blocks of 4096)."""
    assert mlp.inner_block(8192, 1024, 2816, 2) == 2816
    assert mlp.inner_block(8192, 4096, 14336, 2) == 4096
    assert mlp.inner_block(8192, 4096, 14336, 2) * 8192 * 2 <= mlp.ONE_BLOCK_BYTES < 8192 * 14336 * 2


def test_frozen_weights_get_no_gradient_and_no_gemm(monkeypatch):
    monkeypatch.setattr(mlp, "ONE_BLOCK_BYTES", 0)  # the blocked backward: its weight GEMMs counted per block
    x, wg, wu, wd = _inputs(grad=(True, False, False, False))
    kw.gated_mlp(x, wg, wu, wd).sum().backward()
    assert wg.grad is None and wu.grad is None and wd.grad is None and x.grad is not None
    ref = _inputs(grad=(True, False, False, False))
    reference.gated_mlp(*ref).sum().backward()
    torch.testing.assert_close(x.grad, ref[0].grad, rtol=1e-5, atol=1e-5)
    blocks = -(-INNER // mlp.inner_block(TOKENS, HIDDEN, INNER, 4))
    assert blocks > 1  # the tiny shapes walk several blocks, so the blocked backward is what is tested
    assert _token_contractions(monkeypatch, (True, False, False, False)) == 0
    assert _token_contractions(monkeypatch, (True, True, False, True)) == 2 * blocks


@pytest.mark.parametrize(
    ("change", "exc", "words"),
    [
        (lambda t: (t[0], t[1][:, :-1], t[2], t[3]), ValueError, ["gate_weight", "expected shape"]),
        (lambda t: (t[0], t[1], t[2], t[3].t()), ValueError, ["down_weight", "expected shape"]),
        (lambda t: (t[0], t[1], t[2].double(), t[3]), TypeError, ["up_weight"]),
        (lambda t: (t[0].long(), t[1], t[2], t[3]), TypeError, ["x"]),
    ],
    ids=["gate-shape", "down-transposed", "dtype-mismatch", "int-x"],
)
def test_bad_input(change, exc, words):
    tensors = [t.detach() for t in _inputs()]
    with pytest.raises(exc) as info:
        kw.gated_mlp(*change(tensors))
    for w in words:
        assert w in str(info.value)


def test_bad_activation():
    with pytest.raises(ValueError, match="swiglu"):
        kw.gated_mlp(*[t.detach() for t in _inputs()], activation="relu")


def test_torch_compile_one_graph_matches_eager(compile_graphs):
    backend, graphs = compile_graphs
    tensors = _inputs()
    grad_y = torch.randn(TOKENS, HIDDEN, device=DEVICE)
    compiled = torch.compile(kw.gated_mlp, backend=backend, fullgraph=True)
    out, grads = _grads(compiled, tensors, grad_y)
    assert len(graphs) == 1 and "kernelworks.gated_mlp" in graphs[0]
    out_e, grads_e = _grads(kw.gated_mlp, tensors, grad_y)
    torch.testing.assert_close(out, out_e, rtol=0, atol=0)
    for got, want in zip(grads, grads_e):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("needs", [(True, False, False, False), (False, True, True, False),
                                   (False, False, False, True)], ids=["x-only", "gate-up-weights", "down-weight"])
def test_torch_compile_with_frozen_inputs(needs):
    """Several inputs needing no gradient (frozen weights, a frozen x): the compiled backward's unneeded
    outputs are distinct empty tensors (a custom op's outputs may not alias each other), and the gradients
    that are needed match eager's."""
    torch._dynamo.reset()
    grad_y = torch.randn(TOKENS, HIDDEN, device=DEVICE)
    compiled = torch.compile(kw.gated_mlp, backend="aot_eager", fullgraph=True)
    out, grads = _grads(compiled, _inputs(grad=needs), grad_y)
    out_e, grads_e = _grads(kw.gated_mlp, _inputs(grad=needs), grad_y)
    torch.testing.assert_close(out, out_e, rtol=0, atol=0)
    for got, want, need in zip(grads, grads_e, needs, strict=True):
        assert (got is not None) == need
        if need:
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_opcheck():
    x, wg, wu, wd = [t.detach() for t in _inputs()]
    torch.library.opcheck(mlp._GATED_MLP.custom_op, (x, wg, wu, wd, "silu"))
    y, gate, up = mlp._forward(x, wg, wu, wd, "silu")
    torch.library.opcheck(mlp._GATED_MLP.backward_op,
                          (torch.randn_like(y), x, gate, up, wg, wu, wd, "silu", True, False, True, True))


def test_inspection_runs_no_products(monkeypatch):
    """``kw inspect`` plans a model-sized case on stand-in inputs, and only the Triton launches matter: the
    cuBLAS products around them are skipped (a bf16 product of a Llama-sized stand-in takes many minutes on a
    CPU without bf16 units, and ``kw report`` inspects every op)."""
    from kernelworks.inspect import inspect_op
    from kernelworks.ops.activation.spec import GATED_MLP_SPEC

    calls = []
    real_mm, real_addmm = torch.mm, torch.Tensor.addmm_
    monkeypatch.setattr(torch, "mm", lambda *a, **k: calls.append("mm") or real_mm(*a, **k))
    monkeypatch.setattr(torch.Tensor, "addmm_", lambda *a, **k: calls.append("addmm_") or real_addmm(*a, **k))
    reports = inspect_op(GATED_MLP_SPEC, None, "sm_90", modes=("fwd", "bwd"))
    assert {r.name for r in reports} == {"_activation_fwd_kernel", "_activation_bwd_kernel"}
    assert calls == []
