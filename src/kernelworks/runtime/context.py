"""Settings scoped with ``ContextVar`` s (forced launch plans, plan observers, poisoned outputs) that must also
reach a backward pass.

Autograd runs a GPU graph's backward on a thread of its own per device, where the ``ContextVar`` s set by the
thread that called ``backward()`` are unset: a plan forced around ``loss.backward()`` (``kw tune --mode bwd``)
would silently not apply. ``torch.autograd.backward`` hands that thread a copy of the caller's context
(:func:`~kernelworks.runtime.compat.backward_caller_context`); while any block that sets such a variable is
open (:func:`scope`), a :class:`~kernelworks.runtime.torch_op.TorchOp`'s backward runs in that copy
(:func:`in_caller_context`). With no block open it costs the backward one global read.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

open_blocks = 0
"""How many :func:`scope` blocks are open, in any thread."""
_lock = threading.Lock()
_running = threading.local()


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Marks a block that sets a ``ContextVar`` a backward must see: backward passes run in their caller's
    context while it is open."""
    global open_blocks
    with _lock:
        open_blocks += 1
    try:
        yield
    finally:
        with _lock:
            open_blocks -= 1


def in_caller_context(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in the context of the thread that started the running backward pass; directly when there is
    no such context or this thread already runs in it (a node's backward inside another's)."""
    from kernelworks.runtime.compat import backward_caller_context

    caller = backward_caller_context()
    if caller is None or getattr(_running, "active", False):
        return fn(*args)
    _running.active = True
    try:
        return caller.run(fn, *args)
    finally:
        _running.active = False
