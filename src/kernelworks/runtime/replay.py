"""Replay of an op's launches for a repeated call signature: the host-time fast path of eager calls.

An op body (the function behind a :class:`~kernelworks.runtime.torch_op.TorchOp`) validates nothing itself but
still plans tiles, builds views, allocates outputs and specialises every launch on each call: 10–20 µs of
Python for a kernel the GPU runs in 3. For a given *signature* — every tensor argument's shape, strides, dtype,
device and pointer alignment, every other argument's type and value, the current device — what the body does is
fixed: the same allocations, the same kernels on the same grids with the same integers, its pointers at the same
byte offsets from the same tensors. So the second call of a signature runs the body once more under a recorder,
and every later call runs a straight-line function generated from that record::

    def replay(a0, a1, a2, a3, a4, a5):
        s = stream(0)
        t0 = empty_strided(c0, c1, dtype=c2, device=c3)
        t1 = empty_strided(c4, c5, dtype=c6, device=c3)
        p0, p1, q0, q1 = a0.data_ptr(), a1.data_ptr(), t0.data_ptr(), t1.data_ptr()
        go0(1, 1, 1, s, (p0, p0, p1, p0, q0, q0, q1, q1, 1, 4096, ..., c8, *c9))
        return (t0, t1)

The recorder sees the body's torch calls through a ``TorchDispatchMode`` (allocations, views, fills: anything
else, a copy or a host sync such as ``.item()``, makes the signature unrecordable and it keeps the ordinary
path) and its launches through :func:`~kernelworks.runtime.launch.launch`. Every tensor a launch receives is
traced to its root — an argument or an allocation of this call, through any chain of views — so arguments that
share one buffer (q, k, v sliced from one projection) each keep their own pointer. Tensors created before the
call (a cached index table) are held and passed as they are.

The contract of a replayable body: its allocations and launches depend on the signature only (no random seeds,
no reads of tensor values, no launch outside ``runtime.launch``). Calls under the interpreter, while planning
for ``kw inspect``, with ``poison_outputs`` on, with a launch hook (a profiler) set, or with an argument this
module cannot key (a list of tensors, a tensor subclass) take the ordinary path.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelworks.runtime import alloc, indices, launch, torch_op

MAX_SIGNATURES = 4096
"""Signatures remembered per op; past this the table is cleared (shape-polymorphic traffic, e.g. growing
sequence lengths, re-records instead of growing without bound)."""
RECORD_TRIES = 3
"""Recordings tried per signature before it is left on the ordinary path for good (a call that fills a cache
on its first run is unrecordable once, then records)."""

_enabled = True
_SCALARS = frozenset({int, float, bool, str, type(None), torch.dtype})
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_any_autocast = torch._C._is_any_autocast_enabled  # no argument to parse: a third of is_autocast_enabled("cuda")


def set_enabled(enabled: bool) -> bool:
    """Turn replay on or off process-wide (on by default); returns the previous setting. Off, every call takes
    the ordinary path; the recorded signatures are kept."""
    global _enabled
    previous, _enabled = _enabled, enabled
    return previous


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Within the block every call takes the ordinary path (and records nothing): for state a body reads
    besides its arguments, such as the forced launch plans of sweeps and tests."""
    global _enabled
    before, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = before


def _key(a: object, grad: bool) -> object:
    """One argument's part of the signature; ``_UNKEYABLE`` for what cannot be keyed. ``grad`` (a public op's
    call in grad mode): a tensor's ``requires_grad`` is part of it, so calls that record an autograd graph
    have signatures of their own (``runtime.replay_grad``)."""
    kind = type(a)
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        # data_ptr & 15: Triton specialises on 16-byte alignment, and a view's offset keeps it or not
        if grad and a.requires_grad:
            if _functorch_wrapped(a):  # no storage to key; Function.apply unwraps it or runs the transform
                return _UNKEYABLE
            return (a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15, True)
        return (a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15)
    if kind in _SCALARS:
        return (kind, a)  # the type too: 1, 1.0 and True are equal keys in Python
    if (kind is tuple or kind is list) and all(type(v) in _SCALARS for v in a):
        return (kind, tuple(a))
    return _UNKEYABLE


_UNKEYABLE = object()


def _signature(args: tuple, kwargs: dict, grad: bool, extra: object) -> tuple | None:
    """The key a call's behaviour is a function of (with the current device and ``extra``), or None."""
    key: list = [launch._current_device(), extra]
    for a in args:  # _key's common cases inline: this runs on every call
        kind = type(a)
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            if not (grad and a.requires_grad):
                key.append((a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15))
            elif _functorch_wrapped(a):
                return None
            else:
                key.append((a.shape, a.stride(), a.dtype, a.device, a.data_ptr() & 15, True))
        elif kind in _SCALARS:
            key.append((kind, a))
        else:
            k = _key(a, grad)
            if k is _UNKEYABLE:
                return None
            key.append(k)
    for name, a in kwargs.items():
        k = _key(a, grad)
        if k is _UNKEYABLE:
            return None
        key.append(name)
        key.append(k)
    return tuple(key)


def _records_graph(args: tuple, kwargs: dict) -> bool:
    """Some tensor argument requires grad (grad mode being on): the call records an autograd graph."""
    return any(type(a) in _PLAIN and a.requires_grad for a in (*args, *kwargs.values()))


class Replayable:
    """``fn`` with its launches replayed per signature, as described above. ``whole_call``: ``fn`` is a public
    op (validation, dispatch and body); a call of it that records an autograd graph replays its TorchOp calls
    instead (``runtime.replay_grad``). Otherwise ``fn`` is an op body, which never records a graph."""

    def __init__(self, fn: Callable[..., Any], *, whole_call: bool = False) -> None:
        self.fn = fn
        self.whole_call = whole_call
        self._memo: dict[tuple, Any] = {}
        self.refusals: dict[str, int] = {}
        """Why signatures could not be recorded, with counts (``kernelworks.runtime.replay.report()``)."""
        functools.update_wrapper(self, fn)
        _REGISTRY.append(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _enabled or launch._observer is not None or not launch.fast_launch_active() or alloc._POISON.get() \
                or torch_op.forward_ad_active() or torch_op._functorch_active():
            # a tangent is no part of the signature, and a transform's tensors have no storage: the ordinary path
            return self.fn(*args, **kwargs)
        if self.whole_call:  # a public op also reads the autocast state (through the torch ops it calls)
            if torch_op._observer is not None and torch_op._observer.thread == threading.get_ident():
                # called by a public op whose autograd call is being recorded: the recorder must see this op's
                # TorchOp calls, which its own replay would make unseen
                return self.fn(*args, **kwargs)
            grad = torch.is_grad_enabled()
            key = _signature(args, kwargs, grad, _any_autocast() and torch.is_autocast_enabled("cuda"))
        else:
            grad = False
            key = _signature(args, kwargs, False, None)
        if key is None:
            return self.fn(*args, **kwargs)
        entry = self._memo.get(key)
        if callable(entry):
            # A profiler's launch hook wants Triton's own path; and a replay recorded with validation off must
            # not skip the host checks the body makes when it is on.
            if launch._launch_hooks() or (indices._validate and not entry.validates):
                return self.fn(*args, **kwargs)
            return entry(*args, **kwargs)
        if entry is None:  # first call: kernels compile and caches fill on the ordinary path
            if len(self._memo) >= MAX_SIGNATURES:
                self._memo.clear()
            self._memo[key] = 0
            return self.fn(*args, **kwargs)
        if entry >= RECORD_TRIES:
            return self.fn(*args, **kwargs)
        if grad and _records_graph(args, kwargs):
            from kernelworks.runtime import replay_grad  # imports this module

            out, replay, why = replay_grad.record(self.fn, args, kwargs)
        else:
            out, replay, why = _record(self.fn, args, kwargs)
        self._memo[key] = replay if replay is not None else entry + 1
        if why:
            self.refusals[why] = self.refusals.get(why, 0) + 1
        return out

    def clear(self) -> None:
        """Forget every recorded signature of this body."""
        self._memo.clear()
        self.refusals.clear()


_REGISTRY: list[Replayable] = []


def clear() -> None:
    """Forget every op's recorded signatures (after changing something a body reads besides its arguments: a
    launch plan, a tuned table)."""
    for r in _REGISTRY:
        r.clear()


def report() -> dict[str, dict[str, Any]]:
    """Per op body: how many signatures replay, how many are waiting or left on the ordinary path, and why
    recordings failed: ``{"norm.<locals>._forward": {"replayed": 2, "pending": 1, "refusals": {...}}}``."""
    out = {}
    for r in _REGISTRY:
        if r._memo or r.refusals:
            replayed = sum(callable(v) for v in r._memo.values())
            out[r.fn.__module__ + "." + r.fn.__qualname__] = {
                "replayed": replayed, "pending": len(r._memo) - replayed, "refusals": dict(r.refusals)}
    return out


def replayable(fn: Callable[..., Any]) -> Replayable:
    """Wrap an op body so repeated signatures replay its launches (see the module docstring)."""
    return fn if isinstance(fn, Replayable) else Replayable(fn)


_F = TypeVar("_F", bound=Callable[..., Any])


def replayed_op(fn: _F) -> _F:
    """Decorate a public op so a repeated inference call replays everything it does — validation, dispatch
    and launches — from one signature (its checks passed for that signature before; the body's own host
    checks are handled as for any body). A repeated call that records an autograd graph replays the op's
    TorchOp calls, skipping its validation the same way (``runtime.replay_grad``). Calls under
    ``torch.compile`` (which traces ``fn`` itself) take ``fn``. The result is a plain function with ``fn``'s
    name, signature and docstring."""
    whole = Replayable(fn, whole_call=True)

    @functools.wraps(fn)
    def op(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        return whole(*args, **kwargs)

    op.replay = whole  # type: ignore[attr-defined]
    return op  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------- recording

# The recording in progress is ``launch._observer`` (one at a time; nested replayable bodies run plainly while
# it lasts, so their launches are recorded as the outer body's).
_record_lock = threading.Lock()


_SAME_AS_TORCH = {
    "aten.mm.default": torch.mm, "aten.mm.out": torch.mm, "aten.addmm.default": torch.addmm,
    "aten.addmm_.default": torch.Tensor.addmm_, "aten.add.Tensor": torch.add, "aten.add_.Tensor": torch.Tensor.add_,
    "aten.mul.Tensor": torch.mul, "aten.t.default": torch.t, "aten.transpose.int": torch.transpose,
    "aten.view.default": torch.Tensor.view, "aten.unsqueeze.default": torch.unsqueeze,
    "aten.permute.default": torch.permute, "aten.clone.default": torch.clone, "aten.copy_.default": torch.Tensor.copy_,
    "aten.zero_.default": torch.Tensor.zero_, "aten.sum.dim_IntList": torch.sum,
}
"""Overloads whose torch function or Tensor method, given the same positional and keyword arguments, calls
exactly that overload: a replay calls them that way, ~0.5–1 µs a call cheaper than through the OpOverload."""


def callable_for(func: torch._ops.OpOverload) -> Callable[..., Any]:
    """What a generated replay calls to make ``func`` again, from the top of the dispatcher."""
    return _SAME_AS_TORCH.get(str(func)) or getattr(func, "_op", func)


class NotRecordableError(Exception):
    """The body did something a replay cannot repeat; the signature keeps the ordinary path."""


_ALLOC = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
_ALIAS = {"detach", "alias", "_unsafe_view"}  # alias their input's storage without being flagged views
_HOST_READS = {"_local_scalar_dense", "item", "equal", "is_nonzero", "allclose"}
"""Ops whose result is a host value: what the body does next may depend on it, so no recording survives."""
_SHAPE_FROM_VALUES = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


class _Recorder(TorchDispatchMode):
    """Traces each tensor of one body call to its root, and records its allocations, other torch ops and
    launches."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__()
        self.thread = threading.get_ident()
        self.roots: dict[int, tuple] = {}  # id(tensor) -> ("in", i) | ("alloc", j) | ("op", k) | ("const", t)
        # Traced tensors are not kept alive: a body's temporaries must be freed when it drops them, as on the
        # ordinary path (holding them raised a recorded call's peak memory by every buffer the body frees
        # early, a GB at an LM head). A weak reference forgets a dead tensor's id before it can be reused.
        self._alive: dict[int, weakref.ref] = {}
        self.root_geometry: dict[tuple, tuple] = {}  # root -> (shape, strides, data_ptr, dtype, storage offset)
        self.actions: list[tuple] = []
        self.allocs = self.ops = 0
        self.muted = False  # set by launch() around a launch: its scratch buffers are the launcher's own
        self.failed: str | None = None  # why the call cannot be replayed, once known
        for root, a in [*((("in", i), a) for i, a in enumerate(args)),
                        *((("kw", name), a) for name, a in kwargs.items())]:
            if isinstance(a, torch.Tensor):
                if id(a) in self.roots:
                    # The signature does not tell one tensor passed twice from two: a replay recorded with
                    # swiglu(g, g) would pass g's pointer for both arguments of every swiglu(g, u).
                    self.failed = "one tensor passed as two arguments"
                self._trace(a, root)

    def _trace(self, t: torch.Tensor, root: tuple) -> None:
        key = id(t)
        self.roots[key] = root
        if root not in self.root_geometry:
            self.root_geometry[root] = (t.shape, t.stride(), t.data_ptr(), t.dtype, t.storage_offset())
        if key not in self._alive:
            self._alive[key] = weakref.ref(t, functools.partial(self._forget, key))

    def _forget(self, key: int, _ref: weakref.ref) -> None:
        """A traced tensor died: its id may now be another tensor's."""
        self.roots.pop(key, None)
        self._alive.pop(key, None)

    def root_of(self, t: torch.Tensor) -> tuple:
        """The root ``t`` was derived from; a tensor from before the call is its own constant root, held."""
        root = self.roots.get(id(t))
        if root is None:
            if type(t) not in _PLAIN:
                raise NotRecordableError(f"a {type(t).__name__} reached the body")
            root = ("const", t)
            self._trace(t, root)
        return root

    def ref(self, t: torch.Tensor) -> tuple:
        """``(root, byte offset of t's first element from the root's)``: how a launch finds ``t``."""
        root = self.root_of(t)
        return root, t.data_ptr() - self.root_geometry[root][2]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.muted or self.failed:
            return out
        try:
            self._dispatched(func, args, kwargs or {}, out)
        except NotRecordableError as e:
            self.failed = str(e)  # the call goes on unrecorded: it runs exactly once, whatever it did
        return out

    def _dispatched(self, func, args: tuple, kwargs: dict, out: object) -> None:
        name = func.overloadpacket.__name__
        if name in _ALLOC and isinstance(out, torch.Tensor):
            j = self.allocs
            self.allocs += 1
            self.actions.append(("alloc", j, tuple(out.shape), out.stride(), out.dtype, out.device))
            self._trace(out, ("alloc", j))
        elif func.is_view or name in _ALIAS:
            root = self.root_of(args[0])
            for t in out if isinstance(out, (list, tuple)) else (out,):
                self._trace(t, root)
        elif name in _HOST_READS or any(tag in func.tags for tag in _SHAPE_FROM_VALUES):
            raise NotRecordableError(f"the body calls {func}, whose result depends on tensor values")
        else:
            # any other op is called again on replay, on the same roots: a reduction, a cast, a copy, a fill
            outs = out if isinstance(out, (list, tuple)) else (out,)
            if not all(isinstance(t, torch.Tensor) for t in outs):
                raise NotRecordableError(f"the body calls {func}, which returns a host value")
            k = self.ops
            self.ops += 1
            self.actions.append(("op", k, func, self._template(args), self._template(kwargs),
                                 isinstance(out, (list, tuple))))
            for i, t in enumerate(outs):
                if self.roots.get(id(t)) is None:  # in-place ops return their (already traced) argument
                    self._trace(t, ("op", k, i))

    def _template(self, value: object) -> object:
        """An op's argument with its tensors replaced by ``("tensor", root, view)``."""
        if isinstance(value, torch.Tensor):
            return ("tensor", *self._geometry(value))
        if isinstance(value, (list, tuple)):
            return (type(value), [self._template(v) for v in value])
        if isinstance(value, dict):
            return (dict, {k: self._template(v) for k, v in value.items()})
        return ("value", value)

    def _geometry(self, t: torch.Tensor) -> tuple:
        """``(root, view)``: view None when ``t`` is its root, else ``(shape, strides, storage offset from the
        root's)``."""
        root = self.root_of(t)
        shape, stride, data_ptr, dtype, storage_offset = self.root_geometry[root]
        if t.shape == shape and t.stride() == stride and t.data_ptr() == data_ptr and t.dtype == dtype:
            return root, None
        if t.dtype != dtype:
            raise NotRecordableError("a view with another dtype than its root")
        return root, (tuple(t.shape), t.stride(), t.storage_offset() - storage_offset)

    def launched(self, grid: tuple, args: tuple, tail: tuple, direct: Callable[..., None] | None) -> None:
        """Called by ``launch()`` (on the recording thread) for each launch of the body, with the cached
        kernel's direct launcher, or None when the launch took Triton's ordinary path (a first compile)."""
        if self.failed:
            return
        try:
            if direct is None:
                raise NotRecordableError("a launch on Triton's ordinary path")
            refs = []
            for a in args:
                if isinstance(a, torch.Tensor):
                    refs.append(("ptr", *self.ref(a)))
                elif type(a) in _SCALARS:
                    refs.append(("const", a))
                else:
                    raise NotRecordableError(f"a launch argument of type {type(a).__name__}")
            self.actions.append(("launch", direct, (*grid, 1, 1)[:3], tuple(refs), tail))
        except NotRecordableError as e:
            self.failed = str(e)

    def result(self, out: object) -> object:
        """The template of the body's return value: tensors as ``("tensor", root, view)``."""
        if isinstance(out, torch.Tensor):
            if self.root_of(out)[0] == "const":
                raise NotRecordableError("the body returns a tensor from before the call")
            return ("tensor", *self._geometry(out))
        if type(out) in (tuple, list):
            return (type(out), [self.result(o) for o in out])
        if type(out) in _SCALARS:
            return ("value", out)
        raise NotRecordableError(f"the body returns a {type(out).__name__}")


def _record(fn: Callable[..., Any], args: tuple,
            kwargs: dict) -> tuple[Any, Callable[..., Any] | None, str | None]:
    """Run ``fn(*args, **kwargs)`` under a recorder: ``(its result, the replay function or None, why not)``."""
    if not _record_lock.acquire(blocking=False):  # another thread is recording: not this time
        return fn(*args, **kwargs), None, None
    try:
        recorder = _Recorder(args, kwargs)
        launch._observer = recorder
        try:
            with recorder:
                out = fn(*args, **kwargs)
        finally:
            launch._observer = None
        if recorder.failed:
            return out, None, recorder.failed
        try:
            replay = _generate(recorder, len(args), recorder.result(out))
            # Host validation syncs (.item()), which no recording survives: a body recorded with it on has no
            # host checks for this signature, so its replay serves both modes.
            replay.validates = indices._validate and not _capturing()
            return out, replay, None
        except NotRecordableError as e:
            return out, None, str(e)
    finally:
        _record_lock.release()


def _capturing() -> bool:
    """A CUDA graph is being captured on the current stream (host checks are skipped there)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def forbid(why: str) -> None:
    """Called by a body that does something with effects a recording cannot see (bumping a tensor's version
    counter, say): the signature being recorded, if any, keeps the ordinary path."""
    recorder = launch._observer
    if recorder is not None and recorder.thread == threading.get_ident() and not recorder.failed:
        recorder.failed = why


# ------------------------------------------------------------------------------------------------ codegen


class Source:
    """A generated replay function in the making: the names it reads (``const``) and, at the end, the function
    compiled from its body lines (``build``)."""

    def __init__(self, names: dict[str, object]) -> None:
        self.names = dict(names)
        self._count = 0

    def const(self, value: object) -> str:
        """How the source spells ``value``: a literal for ints, bools and None, else a name bound to it."""
        if type(value) is int or value is None or type(value) is bool:
            return repr(value)
        name = f"c{self._count}"
        self._count += 1
        self.names[name] = value
        return name

    def build(self, n_args: int, body: list[str], filename: str) -> Callable[..., Any]:
        """``def replay(a0, …, a{n_args-1}, **kw)`` with ``body``, compiled; its source kept as ``.source``
        (for tests and debugging)."""
        params = ", ".join([*(f"a{i}" for i in range(n_args)), "**kw"])
        source = f"def replay({params}):\n" + "\n".join(body) + "\n"
        namespace = dict(self.names)
        exec(compile(source, filename, "exec"), namespace)  # the source is generated from a record
        replay = namespace["replay"]
        replay.source = source
        return replay


def _generate(rec: _Recorder, n_args: int, template: object) -> Callable[..., Any]:
    """A straight-line function of the body's arguments that repeats ``rec``'s actions (module docstring)."""
    src = Source({"empty_strided": torch.empty_strided, "stream": launch._current_stream})
    const = src.const

    multi: set[int] = {a[1] for a in rec.actions if a[0] == "op" and a[5]}  # ops returning several tensors

    def root_name(root: tuple) -> str:
        kind = root[0]
        if kind == "in":
            return f"a{root[1]}"
        if kind == "kw":
            return f"kw[{root[1]!r}]"
        if kind == "alloc":
            return f"t{root[1]}"
        if kind == "op":
            return f"o{root[1]}[{root[2]}]" if root[1] in multi else f"o{root[1]}"
        if getattr(root[1], "_kernelworks_counters", False):  # the current stream's, not the recording's
            return f"{const(alloc.arrival_counters)}({const(root[1].device)}, {root[1].numel()})"
        return const(root[1])

    pointers: dict[tuple, str] = {}

    def pointer(root: tuple) -> str:
        key = (root[0], id(root[1])) if root[0] == "const" else root
        if key not in pointers:
            pointers[key] = f"p{len(pointers)}"
            body.append(f"    {pointers[key]} = {root_name(root)}.data_ptr()")
        return pointers[key]

    def view(root: tuple, geometry: tuple | None) -> str:
        if geometry is None:
            return root_name(root)
        shape, strides, offset = geometry
        name = root_name(root)
        return f"{name}.as_strided({const(shape)}, {const(strides)}, {name}.storage_offset() + {offset})"

    def emit(t: object) -> str:
        if t[0] == "tensor":
            return view(t[1], t[2])
        if t[0] == "value":
            return const(t[1])
        kind, items = t
        if kind is dict:
            return "{" + ", ".join(f"{k!r}: {emit(v)}" for k, v in items.items()) + "}"
        inner = ", ".join(emit(i) for i in items)
        return f"({inner},)" if kind is tuple else f"[{inner}]"

    def roots_in(t: object) -> Iterator[tuple]:
        """The roots a template refers to."""
        if t[0] == "tensor":
            yield t[1]
        elif t[0] != "value":
            for item in (t[1].values() if t[0] is dict else t[1]):
                yield from roots_in(item)

    def local(root: tuple) -> str | None:
        """The local variable holding a root made by the body (``t3``, ``o5``), None for arguments/constants."""
        return root_name(root).split("[")[0] if root[0] in ("alloc", "op") else None

    # A local is deleted right after the last action that uses it, as the body drops it on the ordinary path:
    # a replay that held every buffer until it returned would raise the call's peak by each temporary freed
    # early (the blocks of kw.gated_mlp's backward, the logits chunk of the fused loss). The GPU work already
    # enqueued keeps the memory safe: the caching allocator reuses a block only in stream order.
    returned = {local(r) for r in roots_in(template)}
    last_use: dict[str, int] = {}
    for i, action in enumerate(rec.actions):
        if action[0] == "alloc":
            used = [("alloc", action[1])]
        elif action[0] == "op":
            used = [("op", action[1], 0), *roots_in(action[3]), *roots_in(action[4])]
        else:
            used = [ref[1] for ref in action[3] if ref[0] == "ptr"]
        for root in used:
            name = local(root)
            if name is not None:
                last_use[name] = i
    dead_after: dict[int, list[str]] = {}
    for name, i in last_use.items():
        if name not in returned:
            dead_after.setdefault(i, []).append(name)
    # An allocation nothing reads, writes or returns (a body's empty placeholder for an output it did not make)
    # is not repeated: on a GPU each costs a caching-allocator call from Python.
    unused = {i for i, action in enumerate(rec.actions)
              if action[0] == "alloc" and last_use.get(f"t{action[1]}") == i and f"t{action[1]}" not in returned}

    # the device is part of the signature (``_signature``'s first item): the replay's device is a constant
    body = [f"    s = stream({int(launch._current_device())})"]
    for i, action in enumerate(rec.actions):
        if i in unused:
            continue
        if action[0] == "alloc":
            _, j, shape, strides, dtype, device = action
            body.append(f"    t{j} = empty_strided({const(shape)}, {const(strides)}, dtype={const(dtype)}, "
                        f"device={const(device)})")
        elif action[0] == "op":
            _, k, func, args, kwargs, _ = action
            call_args = ", ".join([*(emit(a) for a in args[1]),
                                   *(f"{name}={emit(v)}" for name, v in kwargs[1].items())])
            body.append(f"    o{k} = {const(callable_for(func))}({call_args})")
        else:
            _, direct, grid, refs, tail = action
            items = []
            for ref in refs:
                if ref[0] == "ptr":
                    p = pointer(ref[1])
                    items.append(f"{p} + {ref[2]}" if ref[2] else p)
                else:
                    items.append(const(ref[1]))
            items.extend(const(v) for v in tail)
            body.append(f"    {const(direct)}({grid[0]}, {grid[1]}, {grid[2]}, s, ({', '.join(items)},))")
        if i in dead_after:
            body.append(f"    del {', '.join(sorted(dead_after[i]))}")

    body.append(f"    return {emit(template)}")
    return src.build(n_args, body, "<kernelworks replay>")
