"""Whole-call replay of a public op's autograd calls: its validation runs once per signature.

A public op (``@replayed_op``) called with inputs that require grad records an autograd graph, which the
launch-level replay of :mod:`kernelworks.runtime.replay` cannot repeat. What it can skip is everything the
public op does around its custom ops: for one *signature* (the launch-level signature plus each tensor's
``requires_grad``) the validation passed and the same :class:`~kernelworks.runtime.torch_op.TorchOp` s were
called with the same scalars, on the call's own tensors. So the second call of a signature runs the public op
while watching its TorchOp calls, and every later call runs the result::

    def replay(a0, a1, **kw):
        if functorch_active():
            return fn(a0, a1, **kw)
        o0 = c0(a0, a1, None, c1, 0.0, True, c2)   # c0: the norm TorchOp's autograd Function (its C apply)
        return o0[0]

Each TorchOp call takes the path ``TorchOp.__call__`` took for the signature (the autograd Function, or the
body where no input requires grad), called directly; the Function builds the call's graph. The body it runs
(``c2``, the Function's last argument) is the launch replay the body recorded for that signature, bound at
recording, so the body's own signature is not keyed again on every call (~2.5 µs of a 12 µs call on a
development CPU). A call is recorded only if everything the public op did is visible that
way: every torch op it dispatched outside its TorchOp calls (a ``TorchDispatchMode`` sees them) — a view
(``flash_attention``'s ``layout="bhsd"``, ``gated_mlp``'s rows), a cuBLAS product or an add of a patched
decoder layer — is one the replay can call again at the top of the dispatcher, so that autograd records it as
before: positional arguments only, the grad mode of the call, no host read (a validation-mode check) and no
output shaped by values; every tensor an op received is an argument of the call or an output of an earlier
op, every other argument is a plain scalar, and what the public op returns is made of those. Anything else
keeps the ordinary path for the signature, as an unrecordable body does. A public op called by the one being
recorded runs its ordinary path meanwhile (``Replayable``), so that its TorchOp calls are seen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelworks.runtime import indices, torch_op
from kernelworks.runtime.replay import (
    _HOST_READS,
    _PLAIN,
    _SCALARS,
    _SHAPE_FROM_VALUES,
    NotRecordableError,
    Source,
    _capturing,
    _signature,
    callable_for,
)

_functorch_active = torch._C._are_functorch_transforms_active
_lock = threading.Lock()
"""One recording at a time: the TorchOp hook (``torch_op._observer``) is one slot."""


class _CallRecorder(TorchDispatchMode):
    """The TorchOp calls of one public-op call, each argument as a reference to what it was."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.inside = False  # within a TorchOp call: its dispatches are its own
        self.failed: str | None = None
        self.grad_mode = torch.is_grad_enabled()  # an op made under another grad mode would replay differently
        self.calls: list[tuple[Callable[..., Any], list]] = []
        self.op_calls = 0  # of them, TorchOp calls
        self.refs: dict[int, tuple] = {}  # id(object) -> ("in", i) | ("kw", name) | ("out", k, index or None)
        self.keep: list[object] = []  # what refs names stays alive while recording: an id is never reused
        for root, a in [*((("in", i), a) for i, a in enumerate(args)),
                        *((("kw", name), a) for name, a in kwargs.items())]:
            if isinstance(a, torch.Tensor):
                if id(a) in self.refs:  # the signature cannot tell f(x, x) from f(x, y)
                    self.failed = "one tensor passed as two arguments"
                self._name(a, root)

    def _name(self, obj: object, ref: tuple) -> None:
        self.refs.setdefault(id(obj), ref)
        self.keep.append(obj)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self.inside and not self.failed:
            if kwargs or torch.is_grad_enabled() != self.grad_mode:
                self.failed = f"the op calls {func} with keyword arguments or under another grad mode"
            elif func.overloadpacket.__name__ in _HOST_READS or any(tag in func.tags for tag in _SHAPE_FROM_VALUES):
                self.failed = f"the op calls {func}, a host read or an output shaped by values"
            else:
                self._torch_call(func, args, out)
        return out

    def _torch_call(self, func: torch._ops.OpOverload, args: tuple, out: object) -> None:
        """A torch op the public op made outside its TorchOps — a view, a product, an add — on arguments or on
        earlier outputs. The dispatch mode runs below autograd and sees each op that went through it, on the
        very tensor objects the public op holds (a plain tensor keeps its Python object through the
        dispatcher); the replay calls the op again at the top of the dispatcher, so autograd records the same
        node as here, and its output is named for what the public op passes on."""
        try:
            templates = [self._template(a) for a in args]
        except NotRecordableError as e:
            self.failed = str(e)
            return
        if not isinstance(out, torch.Tensor) and not (type(out) in (tuple, list)
                                                      and all(isinstance(t, torch.Tensor) for t in out)):
            self.failed = f"the op calls {func}, which returns no tensor"
            return
        k = len(self.calls)
        self.calls.append((callable_for(func), templates))
        self._name(out, ("out", k, None))
        if type(out) in (tuple, list):
            for i, t in enumerate(out):
                self._name(t, ("out", k, i))

    def op_call(self, op: torch_op.TorchOp, args: tuple) -> Any:
        """Called by ``TorchOp.__call__`` on the recording thread, outside any other TorchOp call."""
        templates: list = []
        if not self.failed:
            try:
                templates = [self._template(a) for a in args]
            except NotRecordableError as e:
                self.failed = str(e)
        # The path TorchOp.__call__ takes for these arguments — plain tensors (``_template`` saw to it), not
        # compiling (no replay then), no functorch transform (checked here and by the replay) — is fixed by the
        # signature: the autograd Function's C apply if grad mode is on (the public op may turn it off around
        # a call) and an argument requires grad, else the body. The replay calls it directly.
        if _functorch_active():
            self.failed = "a functorch transform is active"
        needs_grad = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        self.inside = True
        try:
            out = op(*args)
        finally:
            self.inside = False
        k = len(self.calls)
        self.op_calls += 1
        body = _body_replay(op, args)
        if needs_grad:
            self.calls.append((op._apply_c, [*templates, ("value", body)]))
        else:
            self.calls.append((body, templates))
        self._name(out, ("out", k, None))
        if type(out) in (tuple, list):
            for i, t in enumerate(out):
                self._name(t, ("out", k, i))
        return out

    def _template(self, value: object) -> tuple:
        """``("ref", ref)`` for a tensor named earlier, ``("value", v)`` for a scalar or a tuple/list of them,
        ``(type, [templates])`` for the public op's return value."""
        if isinstance(value, torch.Tensor):
            ref = self.refs.get(id(value))
            if ref is None or type(value) not in _PLAIN:
                raise NotRecordableError("a tensor that is neither an argument nor a TorchOp's output")
            return ("ref", ref)
        if type(value) in _SCALARS:
            return ("value", value)
        if type(value) in (tuple, list):
            if all(type(v) in _SCALARS for v in value):
                return ("value", value)
            return (type(value), [self._template(v) for v in value])
        raise NotRecordableError(f"a {type(value).__name__} passed to a TorchOp or returned")


def _body_replay(op: torch_op.TorchOp, args: tuple) -> Callable[..., Any]:
    """What runs ``op``'s forward body for ``args`` in the replay: the launch replay its body recorded for their
    signature, when there is one usable in every mode this call's replay serves (the public op's replay checks
    launch hooks, replay being on and the validation mode before it runs), else the body itself, which keys
    its signature per call."""
    body = op._forward
    memo = getattr(body, "_memo", None)
    if memo is None:
        return body
    key = _signature(args, {}, False, None)
    entry = memo.get(key) if key is not None else None
    if callable(entry) and (entry.validates or not indices._validate):
        return entry
    return body


def record(fn: Callable[..., Any], args: tuple,
           kwargs: dict) -> tuple[Any, Callable[..., Any] | None, str | None]:
    """Run the public op ``fn(*args, **kwargs)`` watching its TorchOp calls: ``(its result, the replay function
    or None, why not)``."""
    if not _lock.acquire(blocking=False):  # another recording (a nested public op, another thread)
        return fn(*args, **kwargs), None, None
    try:
        recorder = _CallRecorder(args, kwargs)
        torch_op._observer = recorder
        try:
            with recorder:
                out = fn(*args, **kwargs)
        finally:
            torch_op._observer = None
        if not recorder.failed and not recorder.op_calls:
            recorder.failed = "no TorchOp called"
        try:
            if recorder.failed:
                raise NotRecordableError(recorder.failed)
            replay = _generate(fn, recorder.calls, recorder._template(out), len(args))
        except NotRecordableError as e:
            return out, None, str(e)
        # as for launch replays: one recorded with validation off (whose host checks it skipped) is not used
        # while it is on; a validation-mode check (a host read) makes a call unrecordable
        replay.validates = indices._validate and not _capturing()
        return out, replay, None
    finally:
        _lock.release()


def _generate(fn: Callable[..., Any], calls: list, template: tuple, n_args: int) -> Callable[..., Any]:
    """The straight-line function of the call's arguments that makes ``calls`` and returns ``template``
    (``fn``, the public op, under a functorch transform)."""
    src = Source({"fn": fn, "functorch_active": _functorch_active})
    const = src.const

    def ref(r: tuple) -> str:
        if r[0] == "in":
            return f"a{r[1]}"
        if r[0] == "kw":
            return f"kw[{r[1]!r}]"
        return f"o{r[1]}" if r[2] is None else f"o{r[1]}[{r[2]}]"

    def emit(t: tuple) -> str:
        if t[0] == "ref":
            return ref(t[1])
        if t[0] == "value":
            return const(t[1])
        inner = ", ".join(emit(i) for i in t[1])
        return f"({inner},)" if t[0] is tuple else f"[{inner}]"

    def outputs_in(t: tuple) -> Iterator[int]:
        """The calls whose outputs a template refers to."""
        if t[0] == "ref":
            if t[1][0] == "out":
                yield t[1][1]
        elif t[0] != "value":
            for item in t[1]:
                yield from outputs_in(item)

    # Each output is dropped after its last use, as the public op drops its temporaries: a replay holding them
    # to the end would keep memory the ordinary call frees (a layer's pre-projection activations, say).
    returned = set(outputs_in(template))
    last_use = {k: k for k in range(len(calls))}
    for i, (_, templates) in enumerate(calls):
        for t in templates:
            for k in outputs_in(t):
                last_use[k] = i
    params = ", ".join([*(f"a{i}" for i in range(n_args)), "**kw"])
    body = ["    if functorch_active():", f"        return fn({params})"]
    for i, (target, templates) in enumerate(calls):
        body.append(f"    o{i} = {const(target)}({', '.join(emit(a) for a in templates)})")
        dead = sorted(k for k, last in last_use.items() if last == i and k not in returned)
        if dead:
            body.append(f"    del {', '.join(f'o{k}' for k in dead)}")
    body.append(f"    return {emit(template)}")
    return src.build(n_args, body, "<kernelworks autograd replay>")
