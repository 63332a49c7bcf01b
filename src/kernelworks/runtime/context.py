"""Settings scoped with ``ContextVar`` s (forced launch plans, plan observers, poisoned outputs) that must also
reach a backward pass.

Autograd runs a GPU graph's backward on a thread of its own per device, where the ``ContextVar`` s set by the
thread that called ``backward()`` are unset: a plan forced around ``loss.backward()`` (``kw tune --mode bwd``)
would silently not apply (on the H100 every backward candidate of a tune timed the op's own plan that way).
So every block that sets such a variable is a :func:`scope`, and while one is open a
:class:`~kernelworks.runtime.torch_op.TorchOp` keeps the context its forward ran in, and its backward runs in
the caller's context (:func:`in_caller_context`): the copy ``torch.autograd.backward`` hands its threads where
this torch does (:func:`~kernelworks.runtime.compat.backward_caller_context`), else the context of the forward
that built the node. Each graph's backward thus sees its own caller's settings, never another thread's. With no
scope open it costs a forward and a backward one global read each. Not covered: a compiled graph's backward
(``torch.compile``, through the custom ops), which runs in whatever context torch gives it; forced plans are a
tool of eager tuning, sweeps and tests.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

open_blocks = 0
"""How many :func:`scope` blocks are open, in any thread."""
_lock = threading.Lock()
_running = threading.local()


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Marks a block that sets a ``ContextVar`` a backward must see: while it is open, backward passes run in
    their caller's context."""
    global open_blocks
    with _lock:
        open_blocks += 1
    try:
        yield
    finally:
        with _lock:
            open_blocks -= 1


def in_caller_context(forward_context: contextvars.Context | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in the context of the thread that started the running backward pass, or else in
    ``forward_context`` (the context the node's forward ran in); directly when there is neither or this thread
    already runs in one (a node's backward inside another's). A copy is entered, so threads running backward
    nodes at once never share one."""
    from kernelworks.runtime.compat import backward_caller_context

    caller = backward_caller_context() or forward_context
    if caller is None or getattr(_running, "active", False):
        return fn(*args)
    _running.active = True
    try:
        return caller.copy().run(fn, *args)
    finally:
        _running.active = False
