"""One definition of an op, two ways in: a ``torch.library`` custom op, and a plain call in eager mode.

``torch.compile`` needs custom ops (fake implementations for tracing, opaque nodes in the graph, registered
autograd). In eager mode the same custom op costs ~100 µs of host time per call on our H100 host (154 µs
for the activation forward op against 51 µs for the bare Triton launch; docs/notes/activation.md), more
than a 8192×8192 bf16 row kernel takes on the GPU. So every op is defined once here and
:meth:`TorchOp.__call__` takes the custom op while tracing and an ``autograd.Function`` running the same
bodies otherwise.

    op = TorchOp("softmax", forward=_fwd, forward_fake=_fwd_fake, backward=_bwd, backward_fake=_bwd_fake,
                 setup_context=_save, input_grads=_grads)
    y = op(x)          # the forward's arguments

- ``forward(*args)`` and ``backward(*bwd_args)`` are annotated functions (``torch.library`` reads their
  schema from the annotations) that launch the kernels;
- ``setup_context(ctx, args, output)`` saves what the backward needs (``ctx.save_for_backward`` + attrs);
- ``input_grads(ctx, grad_outputs, backward)`` calls ``backward`` (the custom op or the plain function,
  whichever path is running) with the saved state and returns one gradient (or None) per forward argument.

Eager calls run the bodies through :mod:`kernelworks.runtime.replay`, so a repeated call signature replays
the body's recorded launches instead of running its Python again.

Forward-only ops (inference kernels, ops that refuse autograd) are :class:`ForwardOp` s: the same dispatch
without the autograd half.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import torch

PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
"""Tensor types the eager paths take; anything else (FakeTensor, other subclasses) goes to the custom op,
whose dispatch knows what to do with it. ``nn.Parameter`` is a plain tensor here: a module's weight must not
send every call down the ~100 µs custom-op path."""


_observer: Any = None
"""The recorder of a public op's autograd call (``runtime.replay_grad``) while one runs: it sees each TorchOp
call made directly by the public op on its thread."""
_functorch_active = torch._C._are_functorch_transforms_active
_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _traced(args: tuple) -> bool:
    """True while ``torch.compile`` traces or when an argument is a tensor subclass (FakeTensor, …): those
    calls take the custom op, whose dispatch knows what to do with them."""
    if torch.compiler.is_compiling():
        return True
    return any(isinstance(a, torch.Tensor) and type(a) not in PLAIN_TENSORS for a in args)


class ForwardOp:
    """A forward-only kernel launch exposed as the ``kernelworks::<name>`` custom op (``fake`` its meta
    implementation, ``mutates_args`` as ``torch.library`` takes it), called directly in eager mode. Call it
    with the forward's arguments::

        _decode = ForwardOp("decode_attention", decode_fwd, fake=_decode_fake)
        o = _decode(q, k_cache, v_cache, block_table, context_lens, scale, softcap)
    """

    def __init__(self, name: str, forward: Callable[..., Any], *, fake: Callable[..., Any],
                 mutates_args: tuple[str, ...] = ()) -> None:
        from kernelworks.runtime.replay import replayable  # imports triton: not before kernelworks sets it up

        self.name = name
        self._forward = replayable(forward)
        self.custom_op = torch.library.custom_op(f"kernelworks::{name}", mutates_args=mutates_args)(forward)
        self.custom_op.register_fake(fake)

    def __call__(self, *args: Any) -> Any:
        if _traced(args):
            return self.custom_op(*args)
        if _functorch_active() and _transformed(args):
            raise NotImplementedError(no_transforms_message(self.name))
        if forward_ad_active() and any(isinstance(a, torch.Tensor) and _forward_ad.unpack_dual(a).tangent is not None
                                       for a in args):
            raise NotImplementedError(f"kernelworks' {self.name} kernels have no forward-mode AD: a dual tensor's "
                                      "tangent would be dropped")
        return self._forward(*args)


def no_double_backward_message(name: str) -> str:
    """Why a backward with ``create_graph=True`` through ``name`` stops: its kernels' backward is not
    differentiable, and gradients handed back as constants would make every second-order result silently
    wrong. Raised at once rather than on the second backward (``once_differentiable``'s way): that wrapper
    marks the gradients only when the incoming gradients require grad, so a gradient penalty through a loss
    (incoming gradient a constant 1) went through unmarked, and a marked gradient whose error node leads to no
    requested input is pruned by the engine, never raising either."""
    return (f"kernelworks' {name} kernels have no double backward: backward with create_graph=True (a gradient "
            f"penalty, a Hessian-vector product) needs the gradient of their gradient; run that part on torch ops")


def _transformed(args: tuple) -> bool:
    """Some argument is a live ``torch.func`` transform's tensor (batched, or tracking a transform's grad)."""
    return any(isinstance(a, torch.Tensor) and _functorch_wrapped(a) for a in args)


def no_transforms_message(name: str) -> str:
    """Why ``name`` stops inside a ``torch.func`` transform: its kernels read raw storage, which vmap's batched
    tensors do not have, and its autograd Function has no vmap or functorch rules."""
    return (f"kernelworks' {name} kernels do not run inside torch.func transforms (vmap, grad, jvp, jacrev, …): "
            f"call the op outside the transform, or run that part on torch ops")


_forward_ad = torch.autograd.forward_ad


def forward_ad_active() -> bool:
    """Inside ``torch.autograd.forward_ad.dual_level()``: an argument may carry a tangent (forward-mode AD),
    which the kernels' plain paths would drop. Calls then take the autograd Function, which refuses
    forward-mode AD with torch's own error."""
    return _forward_ad._current_level >= 0


class TorchOp:
    """A forward/backward kernel pair exposed as ``kernelworks::<name>`` (+ ``<name>_backward``) custom ops
    and as an autograd Function for eager calls. Call it with the forward's arguments."""

    def __init__(self, name: str, *, forward: Callable[..., Any], forward_fake: Callable[..., Any],
                 backward: Callable[..., Any], backward_fake: Callable[..., Any],
                 setup_context: Callable[[Any, tuple, Any], None],
                 input_grads: Callable[[Any, tuple, Callable[..., Any]], tuple]) -> None:
        # these import triton: not before kernelworks sets it up
        from kernelworks.runtime import context
        from kernelworks.runtime.replay import replayable

        self.name = name
        # eager calls run the bodies through runtime.replay: a repeated signature skips their Python
        self._forward = forward = replayable(forward)
        self._backward = backward = replayable(backward)
        self.custom_op = torch.library.custom_op(f"kernelworks::{name}", mutates_args=())(forward.fn)
        self.custom_op.register_fake(forward_fake)
        self.backward_op = torch.library.custom_op(f"kernelworks::{name}_backward", mutates_args=())(backward.fn)
        self.backward_op.register_fake(backward_fake)
        self.custom_op.register_autograd(
            lambda ctx, *grads: input_grads(ctx, grads, self.backward_op), setup_context=setup_context)

        # The Function's last argument is the body to run: ``forward`` (which replays per signature), or, from
        # a replayed autograd call (``runtime.replay_grad``), the launch replay that ``forward`` recorded for the
        # call's signature, so the body's signature is not keyed a second time. Last, so that
        # ``ctx.needs_input_grad[i]`` still indexes the op's own arguments.
        def function_forward(ctx: Any, *args: Any) -> Any:
            body, args = args[-1], args[:-1]
            if context.open_blocks:  # the backward may run on autograd's own thread: it gets this context
                ctx.kernelworks_context = contextvars.copy_context()
            out = body(*args)
            setup_context(ctx, args, out)
            return out

        def plain_backward(ctx: Any, *grads: Any) -> Any:
            if context.open_blocks:  # a forced plan, say, set on the thread that called backward (runtime.context)
                g = context.in_caller_context(getattr(ctx, "kernelworks_context", None), input_grads, ctx, grads,
                                              backward)
            else:
                g = input_grads(ctx, grads, backward)
            return (*g, None) if type(g) is tuple else (g, None)  # g: a tuple, or a one-argument op's gradient

        def function_backward(ctx: Any, *grads: Any) -> Any:
            if torch.is_grad_enabled():  # backward(create_graph=True): grad mode is on only then
                raise RuntimeError(no_double_backward_message(name))
            return plain_backward(ctx, *grads)

        # Built with type() so the class (and its autograd node, e.g. ``SoftmaxFunctionBackward``) is named
        # after the op from the start: autograd names the node when the class is created.
        self.function = type(f"{name.title().replace('_', '')}Function", (torch.autograd.Function,),
                             {"forward": staticmethod(function_forward),
                              "backward": staticmethod(function_backward)})
        # The C apply under ``Function.apply``'s Python wrapper, which without functorch transforms only
        # unwraps dead functorch wrappers (a pytree pass over the args, ~2 µs): __call__ takes it when there
        # is nothing to unwrap.
        self._apply_c = super(torch.autograd.Function, self.function).apply

    def __call__(self, *args: Any) -> Any:
        """The custom op while tracing (``torch.compile``, ``torch.export``) or for tensor subclasses
        (FakeTensor, …); else the plain forward when no autograd graph is being recorded (a 1×4096 softmax
        runs ~3 µs on the GPU: every µs of host time shows); else the autograd Function."""
        if torch.compiler.is_compiling():
            return self.custom_op(*args)
        if _observer is not None and not _observer.inside and _observer.thread == threading.get_ident():
            return _observer.op_call(self, args)
        grad_mode, needs_grad, wrapped = torch.is_grad_enabled(), False, False
        for a in args:  # one pass, no temporaries: this runs on every eager call
            if isinstance(a, torch.Tensor):
                if type(a) not in PLAIN_TENSORS:
                    return self.custom_op(*args)
                if grad_mode:
                    needs_grad = needs_grad or a.requires_grad
                    wrapped = wrapped or _functorch_wrapped(a)
        if _functorch_active() and _transformed(args):
            raise NotImplementedError(no_transforms_message(self.name))
        if not needs_grad and not forward_ad_active():
            return self._forward(*args)
        if wrapped or not needs_grad or _functorch_active():
            # functorch's path (which refuses a Function without setup_context), a dead functorch wrapper
            # unwrapped by Function.apply's Python wrapper, or forward-mode AD refused there
            return self.function.apply(*args, self._forward)
        return self._apply_c(*args, self._forward)
