"""kernelworks.nn.norm: RMSNorm / LayerNorm modules over the functional ops — parameters, state dicts
compatible with torch.nn.LayerNorm, gradients reaching the parameters, residual form. CPU: interpreter."""

from __future__ import annotations

import pytest
import torch

from kernelworks.nn.norm import LayerNorm, RMSNorm
from kernelworks.ops.norm import layer_norm, reference, rms_norm
from kernelworks.runtime.device import default_device

DEVICE = default_device()


def test_layer_norm_matches_torch_module_and_loads_its_state_dict():
    torch.manual_seed(0)
    theirs = torch.nn.LayerNorm(48, eps=1e-5, device=DEVICE)
    with torch.no_grad():
        theirs.weight.normal_(1.0, 0.3)
        theirs.bias.normal_(0.0, 0.3)
    ours = LayerNorm(48, eps=1e-5, device=DEVICE)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 5, 48, device=DEVICE)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    ours(x).square().sum().backward()
    theirs(x).square().sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, rtol=1e-4, atol=1e-4)


def test_layer_norm_options():
    assert LayerNorm(8, bias=False).bias is None
    m = LayerNorm(8, elementwise_affine=False)
    assert m.weight is None and m.bias is None and not list(m.parameters())
    x = torch.randn(3, 8, device=DEVICE)
    torch.testing.assert_close(m.to(DEVICE)(x), torch.nn.functional.layer_norm(x, (8,)), rtol=1e-5, atol=1e-5)
    assert "bias=False" in repr(LayerNorm(8, bias=False))


def test_rms_norm_module_calls_functional_op():
    torch.manual_seed(1)
    m = RMSNorm(64, eps=1e-6, device=DEVICE)
    assert torch.equal(m.weight, torch.ones(64, device=DEVICE))
    with torch.no_grad():
        m.weight.normal_(1.0, 0.3)
    x = torch.randn(4, 64, device=DEVICE)
    assert torch.equal(m(x), rms_norm(x, m.weight, 1e-6))
    m(x).sum().backward()
    assert m.weight.grad is not None and m.weight.grad.shape == (64,)


def test_rms_norm_gemma_offset_starts_as_identity_scale():
    """offset=1 (Gemma): the stored weight starts at 0, so y is the bare normalisation, as offset=0 with
    weight 1."""
    x = torch.randn(3, 32, device=DEVICE)
    gemma, plain = RMSNorm(32, offset=1.0, device=DEVICE), RMSNorm(32, device=DEVICE)
    assert torch.equal(gemma.weight, torch.zeros(32, device=DEVICE))
    torch.testing.assert_close(gemma(x), plain(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gemma(x), reference.rms_norm(x, None, 1e-6), rtol=1e-5, atol=1e-5)
    assert "offset=1.0" in repr(gemma)


@pytest.mark.parametrize("cls", [RMSNorm, LayerNorm])
def test_residual_form(cls):
    torch.manual_seed(2)
    m = cls(40, device=DEVICE)
    x = torch.randn(2, 3, 40, device=DEVICE, requires_grad=True)
    r = torch.randn(2, 3, 40, device=DEVICE, requires_grad=True)
    y, h = m(x, r)
    fn = rms_norm if cls is RMSNorm else layer_norm
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y, fn(x + r, m.weight), rtol=1e-6, atol=1e-6)
    (y.sum() + h.sum()).backward()
    assert x.grad is not None and torch.equal(x.grad, r.grad) and m.weight.grad is not None


def test_mixed_precision_parameters():
    """fp32 parameters with bf16 activations: y and dx in bf16, the parameter gradients in fp32."""
    torch.manual_seed(3)
    m = LayerNorm(64, device=DEVICE)
    x = torch.randn(4, 64, device=DEVICE).to(torch.bfloat16).requires_grad_(True)
    y = m(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and m.weight.grad.dtype == torch.float32
    assert m.bias.grad.dtype == torch.float32


def test_layernorm_positional_arguments_follow_torch():
    ours, theirs = LayerNorm(16, 1e-5, False), torch.nn.LayerNorm(16, 1e-5, False)
    assert ours.weight is None and theirs.weight is None
    assert LayerNorm(16, 1e-5, True, False).bias is None


@pytest.mark.parametrize("cls,theirs", [(LayerNorm, torch.nn.LayerNorm), (RMSNorm, torch.nn.RMSNorm)])
@pytest.mark.parametrize("affine", [True, False])
def test_torch_attributes_are_there(cls, theirs, affine):
    """Code written for torch's modules reads ``normalized_shape`` and ``elementwise_affine``."""
    ours, ref = cls(16, elementwise_affine=affine), theirs(16, elementwise_affine=affine)
    assert ours.normalized_shape == ref.normalized_shape == (16,)
    assert ours.elementwise_affine is ref.elementwise_affine is affine


def test_rmsnorm_offset_without_weight_fails_at_construction():
    with pytest.raises(ValueError, match="offset"):
        RMSNorm(16, offset=1.0, elementwise_affine=False)


@pytest.mark.parametrize("cls", [RMSNorm, LayerNorm])
def test_constructor_arguments_are_validated(cls):
    """Bad sizes and options fail at construction with the argument's name (``RMSNorm(-1)`` and
    ``RMSNorm(2.5)`` used to fail inside ``torch.empty``; a negative eps or a truthy int passed silently)."""
    for bad, exc in ((-1, ValueError), (0, ValueError), (2.5, TypeError), (True, TypeError), ("8", TypeError),
                     ((4, 8), ValueError)):
        with pytest.raises(exc, match="hidden"):
            cls(bad)
    with pytest.raises(ValueError, match="eps"):
        cls(8, eps=-1e-5)
    with pytest.raises(TypeError, match="eps"):
        cls(8, eps="1e-5")
    with pytest.raises(TypeError, match="elementwise_affine"):
        cls(8, elementwise_affine=1)
    with pytest.raises(TypeError, match="dtype"):
        cls(8, dtype=torch.float64)
    assert cls((8,)).hidden_size == 8  # torch.nn.LayerNorm's normalized_shape form


def test_constructor_arguments_are_validated_specific():
    with pytest.raises(TypeError, match="offset"):
        RMSNorm(8, offset="1")
    with pytest.raises(ValueError, match="offset"):
        RMSNorm(8, offset=float("inf"))
    with pytest.raises(TypeError, match="bias"):
        LayerNorm(8, bias=0)


def test_repr_tells_the_affine_forms_apart():
    from kernelworks.nn import LayerNorm, RMSNorm

    assert repr(RMSNorm(8)) != repr(RMSNorm(8, elementwise_affine=False))
    assert "elementwise_affine=False" in repr(LayerNorm(8, elementwise_affine=False))
    assert repr(LayerNorm(8, bias=False)) != repr(LayerNorm(8, elementwise_affine=False))
