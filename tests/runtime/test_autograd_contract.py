"""What every op's autograd promises beyond first-order gradients: a second-order request fails loudly (the
kernels' backward is not differentiable), forward-mode AD is refused rather than dropped, and an op that
updates a tensor in place bumps its version counter, as torch's in-place ops do. Each was a silent wrong
answer before (session 21's probe)."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwd_ad
from torch.nn import functional

import kernelworks as kw
from kernelworks.runtime.device import default_device

DEVICE = default_device()
KERNELS = {"cross_entropy": "cross_entropy", "softmax": "softmax", "log_softmax": "log_softmax",
           "flash_attention": "flash_attention"}
"""The op's kernels as its errors name them (the TorchOp's name)."""


def _penalty(loss_fn, x, w):
    """An input-gradient penalty: ``d/dw |d loss(x @ w) / dx|²`` (the second-order path runs through the op)."""
    (gx,) = torch.autograd.grad(loss_fn(x @ w), x, create_graph=True)
    return torch.autograd.grad(gx.square().sum(), w)


def _attention_loss(z):
    q = z.view(1, 2, 4, 8)
    return kw.flash_attention(q, q, q, causal=True).square().sum()


@pytest.mark.parametrize("name,loss_fn", [
    ("cross_entropy", lambda z: kw.cross_entropy(z, torch.tensor([0, 3, 5, 1], device=DEVICE))),
    ("softmax", lambda z: (kw.softmax(z) * torch.arange(8.0, device=DEVICE)).sum()),
    ("log_softmax", lambda z: kw.log_softmax(z)[:, 0].sum()),
    ("flash_attention", _attention_loss),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_gradient_penalty_through_an_op_raises(name, loss_fn):
    """The op is the loss (its incoming gradient is a constant 1), so ``once_differentiable`` never marked its
    gradients: they came back as constants and the penalty's gradient lost every term through the op
    (softmax: off by 1.34 on values up to 1.67). Now the first backward with ``create_graph=True`` raises."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    w = (0.5 * torch.randn(8, 8, device=DEVICE)).requires_grad_()
    if name == "flash_attention":
        x = torch.randn(8, 8, device=DEVICE, requires_grad=True)
    with pytest.raises(RuntimeError, match=f"kernelworks' {KERNELS[name]} kernels have no double backward"):
        _penalty(loss_fn, x, w)


def test_first_order_gradients_are_unchanged_by_the_guard():
    """A plain backward (grad mode off inside it) still runs: the same gradient as torch's."""
    torch.manual_seed(1)
    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    kw.softmax(x).mul(torch.arange(8.0, device=DEVICE)).sum().backward()
    ref = x.detach().clone().requires_grad_()
    torch.softmax(ref, -1).mul(torch.arange(8.0, device=DEVICE)).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)


@pytest.mark.parametrize("repeat", [1, 3], ids=["first", "replayed"])
def test_forward_mode_ad_is_refused_not_dropped(repeat):
    """A dual tensor has no ``requires_grad``, so the plain path ran and its tangent was lost (softmax's JVP
    came out as 0). Inside a dual level calls take the autograd Function, which refuses forward-mode AD with
    torch's own error — also on a signature the replay has recorded."""
    x = torch.randn(3, 8, device=DEVICE)
    for _ in range(repeat):
        kw.softmax(x)  # the signature replays from the second call on
    with fwd_ad.dual_level():
        dual = fwd_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(NotImplementedError, match="jvp"):
            kw.softmax(dual)


@pytest.mark.parametrize("transform", ["vmap", "grad", "jvp"])
def test_torch_func_transforms_are_refused_by_name(transform):
    """Inside a ``torch.func`` transform the kernels cannot read the batched or wrapped tensors: a clear error
    naming the kernels, where vmap raised "Cannot access storage of BatchedTensorImpl" from the replay key."""
    x = torch.randn(3, 8, device=DEVICE)
    run = {"vmap": lambda: torch.func.vmap(kw.softmax)(x),
           "grad": lambda: torch.func.grad(lambda t: kw.softmax(t).sum())(x),
           "jvp": lambda: torch.func.jvp(kw.softmax, (x,), (torch.ones_like(x),))}[transform]
    kw.softmax(x)
    kw.softmax(x)  # a recorded signature: the replay must not take the transform's tensors either
    with pytest.raises(NotImplementedError, match=r"softmax kernels do not run inside torch\.func transforms"):
        run()


def test_forward_mode_ad_through_an_inference_op_is_refused():
    """gated_delta_decode (forward only) dropped a dual input's tangent silently."""
    step = _decode_inputs()
    pool = torch.randn(2, 2, 16, 16, device=DEVICE)
    with fwd_ad.dual_level():
        step["v"] = fwd_ad.make_dual(step["v"], torch.ones_like(step["v"]))
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            kw.gated_delta_decode(**step, state=pool)


def _decode_inputs(batch=2, heads=2, dim=16):
    torch.manual_seed(2)
    return dict(q=torch.randn(batch, 1, dim, device=DEVICE),
                k=functional.normalize(torch.randn(batch, 1, dim, device=DEVICE), dim=-1),
                v=torch.randn(batch, heads, dim, device=DEVICE),
                g=functional.logsigmoid(torch.randn(batch, heads, device=DEVICE)),
                beta=torch.sigmoid(torch.randn(batch, heads, device=DEVICE)))


@pytest.mark.parametrize("state_as", ["keyword", "positional"])
def test_gated_delta_decode_bumps_the_pool_version(state_as):
    """The step updates the pool in place, so its version counter moves, on every call (replayed ones too)."""
    step = _decode_inputs()
    pool = torch.randn(2, 2, 16, 16, device=DEVICE)
    versions = [pool._version]
    for _ in range(3):
        if state_as == "keyword":
            kw.gated_delta_decode(**step, state=pool)
        else:
            kw.gated_delta_decode(*step.values(), pool)
        versions.append(pool._version)
    assert versions == sorted(set(versions)), versions


def test_a_prefill_backward_after_its_pool_was_stepped_raises():
    """A prefill saved its ``initial_state`` for the backward; a decode step then wrote the same pool. The
    backward read the new values (dq off by up to 1.3); it now fails as it does after ``pool.mul_()``."""
    torch.manual_seed(3)
    b, t, h, d = 2, 6, 2, 16
    q = torch.randn(b, t, 1, d, device=DEVICE, requires_grad=True)
    k = functional.normalize(torch.randn(b, t, 1, d, device=DEVICE), dim=-1)
    v = torch.randn(b, t, h, d, device=DEVICE)
    g = functional.logsigmoid(torch.randn(b, t, h, device=DEVICE) + 2)
    beta = torch.sigmoid(torch.randn(b, t, h, device=DEVICE))
    pool = torch.randn(b, h, d, d, device=DEVICE)
    o, _ = kw.gated_delta_prefill(q, k, v, g, beta, initial_state=pool, chunk_size=16)
    with torch.no_grad():
        kw.gated_delta_decode(**_decode_inputs(b, h, d), state=pool)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.sum().backward()
