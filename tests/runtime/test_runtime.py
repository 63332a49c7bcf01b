from __future__ import annotations

import pytest
import torch

from kernelworks.runtime import check_float_tensor, check_same_dtype, check_same_shape, empty, poison_outputs
from kernelworks.runtime.device import default_device
from kernelworks.runtime.launch import row_launch
from kernelworks.runtime.layout import as_rows


def test_validation_messages_name_the_argument():
    with pytest.raises(TypeError, match=r"x: expected a torch.Tensor, got list"):
        check_float_tensor("x", [1.0])
    with pytest.raises(TypeError, match=r"x: expected dtype float32, float16, bfloat16, got int64"):
        check_float_tensor("x", torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"x: expected a non-empty tensor, got shape \(0, 4\)"):
        check_float_tensor("x", torch.ones(0, 4, device=default_device()))
    with pytest.raises(ValueError, match=r"x: expected at least 2 dimension"):
        check_float_tensor("x", torch.ones(4, device=default_device()), min_dim=2)
    with pytest.raises(TypeError, match="gate=float32, up=float16"):
        check_same_dtype(["gate", "up"], [torch.ones(1), torch.ones(1, dtype=torch.float16)])
    with pytest.raises(ValueError, match=r"gate=\(2,\), up=\(3,\)"):
        check_same_shape(["gate", "up"], [torch.ones(2), torch.ones(3)])


def test_as_rows_keeps_the_row_stride_of_a_slice():
    fused = torch.randn(2, 3, 10)
    gate = fused[..., :5]
    rows = as_rows(gate)
    assert rows.shape == (6, 5) and rows.stride() == (10, 1)
    assert rows.data_ptr() == gate.data_ptr()
    assert torch.equal(rows, gate.reshape(6, 5))
    t = torch.randn(5, 4).t()  # unit stride lost: copied on purpose
    assert torch.equal(as_rows(t), t.contiguous())


def test_poison_outputs():
    with poison_outputs():
        assert empty((3,), dtype=torch.float32, device="cpu").isnan().all()
        assert (empty((3,), dtype=torch.int32, device="cpu") == -1).all()


def test_row_launch_packs_short_rows():
    short = row_launch(100, 10_000)
    assert short.BLOCK_N == 128 and short.ROWS >= 8
    long = row_launch(8192, 8192)
    assert long.BLOCK_N == 8192 and long.ROWS == 1


def test_torch_op_paths():
    """Eager without grad: the plain forward; with grad: the autograd Function (named after the op);
    under torch.compile: the custom op in the graph."""
    import kernelworks as kw

    x = torch.randn(3, 40, device=default_device())
    y = kw.softmax(x)
    assert y.grad_fn is None
    xg = x.clone().requires_grad_()
    assert type(kw.softmax(xg).grad_fn).__name__ == "SoftmaxFunctionBackward"
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(kw.softmax, backend=backend, fullgraph=True)(x)
    assert any("kernelworks.softmax" in g for g in graphs)
    torch.testing.assert_close(out, y, rtol=0, atol=0)


def test_torch_op_functorch_wrappers():
    """An autograd call takes the C apply only when ``Function.apply``'s wrapper has nothing to do: a tensor
    leaked from a functorch transform (a dead wrapper) is still unwrapped, and gradients flow as before."""
    import kernelworks as kw

    leaked = []

    def f(x):
        leaked.append(x)
        return (x * x).sum()

    x = torch.randn(3, 40, device=default_device(), requires_grad=True)
    torch.func.grad(f)(x)
    dead = leaked[0]
    assert torch._C._functorch.is_functorch_wrapped_tensor(dead)
    y = kw.softmax(dead)
    assert type(y.grad_fn).__name__ == "SoftmaxFunctionBackward"
    assert not torch._C._functorch.is_functorch_wrapped_tensor(y)  # unwrapped, as Function.apply does
    xg = x.detach().clone().requires_grad_()
    g = torch.randn_like(xg)
    kw.softmax(xg).backward(g)
    expected = torch.softmax(xg.detach(), -1)
    expected = expected * (g - (g * expected).sum(-1, keepdim=True))
    torch.testing.assert_close(xg.grad, expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="compares the interpreter's plan with a GPU plan")
def test_plans_are_keyed_on_where_kernels_run():
    """A plan cached under the interpreter must not leak into planning for a GPU (kw inspect)."""
    from kernelworks.ops.cross_entropy import kernels as ce
    from kernelworks.ops.norm import backward, forward
    from kernelworks.ops.softmax import _plan as softmax_plan
    from kernelworks.runtime.device import planning_for_gpu

    plans = [lambda: forward._plan(4, 1000), lambda: backward._plan(4, 1000, 0), lambda: softmax_plan(4, 1000),
             lambda: ce.plan(1000)]
    interpreted = [p() for p in plans]
    with planning_for_gpu():
        planned = [p() for p in plans]
    for i, (a, b) in enumerate(zip(interpreted, planned)):
        assert a != b, f"plan {i} is the same under the interpreter and for a GPU"


@pytest.mark.parametrize("stash", [True, False], ids=["torch-stash", "no-stash"])
def test_a_backward_on_its_own_thread_sees_the_callers_plans(monkeypatch, stash):
    """Autograd runs a GPU graph's backward on a thread of its own, where the caller's ContextVars (forced
    plans, plan observers: ``kw tune --mode bwd``) are unset. A TorchOp's backward runs in the caller's
    context: the copy torch stashes for that thread, or (torch 2.11 on the H100 showed none there) the one
    its forward ran in. A worker thread with an empty context stands in for autograd's."""
    import contextvars
    import threading

    import kernelworks as kw
    from kernelworks.runtime import compat, plans

    q, k, v = (torch.randn(1, 16, 2, 16, device=default_device(), requires_grad=True) for _ in range(3))
    errors: list[BaseException] = []

    def backward_elsewhere(out: torch.Tensor) -> None:
        try:
            out.sum().backward()
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    with plans.observed() as seen:
        out = kw.flash_attention(q, k, v, causal=True)
        forward_plans = len(seen)
        caller = contextvars.copy_context()  # what torch.autograd.backward stashes for its device threads
        monkeypatch.setattr(compat, "backward_caller_context", lambda: caller if stash else None)
        worker = threading.Thread(target=backward_elsewhere, args=(out,))
        worker.start()
        worker.join()
    assert not errors
    assert q.grad is not None
    assert len(seen) > forward_plans  # the backward's plan choice reached the caller's observer


@pytest.mark.gpu
def test_a_forced_backward_plan_reaches_autograds_device_thread():
    """On a GPU, autograd runs the backward on its own thread: the plan forced around it must still be the one
    launched (before runtime.context, every ``kw tune --mode bwd`` candidate timed the op's own plan)."""
    import threading

    import kernelworks as kw
    from kernelworks.ops.attention import backward

    q, k, v = (torch.randn(1, 256, 2, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    launched: list[tuple[object, bool]] = []
    apply = backward._FORCED_BWD.apply
    main = threading.get_ident()

    def spy(plan):
        chosen = apply(plan)
        launched.append((chosen, threading.get_ident() == main))
        return chosen

    backward._FORCED_BWD.apply = spy  # type: ignore[method-assign]
    try:
        with backward.forced_bwd_plan(KV_N=32, KV_M=16, kv_warps=4, kv_stages=1):
            out = kw.flash_attention(q, k, v, causal=True)
            torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    finally:
        del backward._FORCED_BWD.apply
    (plan, _on_main), = launched
    assert (plan.KV_N, plan.KV_M, plan.kv_warps, plan.kv_stages) == (32, 16, 4, 1)
