"""kernelworks.nn.loss: CrossEntropyLoss / FusedLinearCrossEntropyLoss over the functional ops — same values
and gradients as torch.nn.CrossEntropyLoss (and an unfused LM head), options validated at construction,
readable repr, torch.compile. CPU: the Triton interpreter."""

from __future__ import annotations

import pytest
import torch

from kernelworks.nn.loss import CrossEntropyLoss, FusedLinearCrossEntropyLoss
from kernelworks.ops.cross_entropy import reference
from kernelworks.runtime.device import default_device

DEVICE = default_device()


def _data(n=6, v=33, h=16):
    torch.manual_seed(0)
    t = torch.randint(0, v, (n,), device=DEVICE)
    t[1] = -100
    return torch.randn(n, h, device=DEVICE), torch.randn(v, h, device=DEVICE) * h ** -0.5, t


@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.1, "reduction": "sum"}, {"reduction": "none"}],
                         ids=["mean", "smoothing-sum", "none"])
def test_cross_entropy_loss_matches_torch_module(options):
    hidden, weight, t = _data()
    logits = hidden @ weight.T
    ours_x, theirs_x = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    ours = CrossEntropyLoss(**options)(ours_x, t)
    theirs = torch.nn.CrossEntropyLoss(**options)(theirs_x, t)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    ours.sum().backward()
    theirs.sum().backward()
    torch.testing.assert_close(ours_x.grad, theirs_x.grad, rtol=1e-5, atol=1e-7)


def test_fused_module_matches_unfused_head_with_bias():
    hidden, weight, t = _data()
    bias = torch.randn(weight.shape[0], device=DEVICE)
    loss_fn = FusedLinearCrossEntropyLoss(z_loss=1e-3, softcap=5.0, chunk_size=4)
    leaves = [v.clone().requires_grad_(True) for v in (hidden, weight, bias)]
    refs = [v.double().requires_grad_(True) for v in (hidden, weight, bias)]
    ours = loss_fn(leaves[0], leaves[1], t, leaves[2])
    want = reference.fused_linear_cross_entropy(refs[0], refs[1], t, bias=refs[2], z_loss=1e-3, softcap=5.0)
    torch.testing.assert_close(ours.double(), want, rtol=1e-5, atol=1e-6)
    ours.backward()
    want.backward()
    for a, b in zip(leaves, refs):
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-5, atol=1e-6)
    assert not list(loss_fn.parameters())


def test_options_are_validated_at_construction():
    with pytest.raises(ValueError, match="reduction"):
        CrossEntropyLoss(reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        CrossEntropyLoss(label_smoothing=2.0)
    with pytest.raises(TypeError, match="inplace_backward"):
        CrossEntropyLoss(inplace_backward="yes")
    with pytest.raises(ValueError, match="softcap"):
        FusedLinearCrossEntropyLoss(softcap=-1.0)
    with pytest.raises(ValueError, match="chunk_size"):
        FusedLinearCrossEntropyLoss(chunk_size=0)
    with pytest.raises(TypeError, match="accum_dtype"):
        FusedLinearCrossEntropyLoss(accum_dtype="fp32")


def test_loss_dtype_option():
    """The modules return the fp32 loss by default (bf16 logits), ``loss_dtype`` on request, and refuse a
    non-float dtype at construction."""
    hidden, weight, t = _data()
    logits = (hidden @ weight.T).to(torch.bfloat16)
    assert CrossEntropyLoss()(logits, t).dtype == torch.float32
    assert CrossEntropyLoss(loss_dtype=torch.bfloat16)(logits, t).dtype == torch.bfloat16
    h, w = hidden.to(torch.bfloat16), weight.to(torch.bfloat16)
    assert FusedLinearCrossEntropyLoss(chunk_size=4)(h, w, t).dtype == torch.float32
    assert FusedLinearCrossEntropyLoss(loss_dtype="bfloat16")(h, w, t).dtype == torch.bfloat16
    assert "loss_dtype=torch.bfloat16" in repr(CrossEntropyLoss(loss_dtype=torch.bfloat16))
    for cls in (CrossEntropyLoss, FusedLinearCrossEntropyLoss):
        with pytest.raises(TypeError, match="loss_dtype"):
            cls(loss_dtype=torch.int64)
        with pytest.raises(ValueError, match="ignore_index"):
            cls(ignore_index=2**64)


def test_repr_names_the_options():
    assert "label_smoothing=0.1" in repr(CrossEntropyLoss(label_smoothing=0.1))
    assert "softcap=30.0" in repr(CrossEntropyLoss(softcap=30.0))
    text = repr(FusedLinearCrossEntropyLoss(chunk_size=1024, accum_dtype=torch.bfloat16))
    assert "chunk_size=1024" in text and "bfloat16" in text


def test_modules_under_torch_compile():
    hidden, weight, t = _data()
    ce, fused = CrossEntropyLoss(label_smoothing=0.1), FusedLinearCrossEntropyLoss(chunk_size=4)

    def step(h, w):
        return ce(h @ w.T, t) + fused(h, w, t)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    a = [v.clone().requires_grad_(True) for v in (hidden, weight)]
    b = [v.clone().requires_grad_(True) for v in (hidden, weight)]
    compiled(*a).backward()
    step(*b).backward()
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-6, atol=1e-7)
