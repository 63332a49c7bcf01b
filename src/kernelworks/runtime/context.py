"""Settings scoped with ``ContextVar`` s (forced launch plans, plan observers, poisoned outputs) that must also
reach a backward pass.

Autograd runs a GPU graph's backward on a thread of its own per device, where the ``ContextVar`` s set by the
thread that called ``backward()`` are unset: a plan forced around ``loss.backward()`` (``kw tune --mode bwd``)
would silently not apply (on the H100 every backward candidate of a tune timed the op's own plan that way).
So every block that sets such a variable is a :func:`scope`, and while one is open a
:class:`~kernelworks.runtime.torch_op.TorchOp`'s backward runs in the caller's context
(:func:`in_caller_context`): the copy ``torch.autograd.backward`` hands its threads where this torch does
(:func:`~kernelworks.runtime.compat.backward_caller_context`), else the context of the innermost open scope,
process-wide. The latter means a forced plan reaches every backward run while it is open, from any thread:
tuning, sweeps and tests force plans from one thread. With no scope open it costs a backward one global read.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

open_blocks = 0
"""How many :func:`scope` blocks are open, in any thread."""
_scopes: list[contextvars.Context] = []
"""The open scopes' contexts, innermost last, each copied as its scope opened."""
_lock = threading.Lock()
_running = threading.local()


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Marks a block that has set a ``ContextVar`` a backward must see (set it before entering): backward passes
    run in their caller's context while it is open."""
    global open_blocks
    snapshot = contextvars.copy_context()
    with _lock:
        open_blocks += 1
        _scopes.append(snapshot)
    try:
        yield
    finally:
        with _lock:
            open_blocks -= 1
            # by identity: a Context compares equal to any other with the same variables
            del _scopes[max(i for i, c in enumerate(_scopes) if c is snapshot)]


def in_caller_context(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in the context of the thread that started the running backward pass, or of the innermost
    open scope; directly when there is none or this thread already runs in one (a node's backward inside
    another's). A copy is entered, so threads running backward nodes at once never share one."""
    from kernelworks.runtime.compat import backward_caller_context

    caller = backward_caller_context()
    if caller is None:
        with _lock:
            caller = _scopes[-1] if _scopes else None
    if caller is None or getattr(_running, "active", False):
        return fn(*args)
    _running.active = True
    try:
        return caller.copy().run(fn, *args)
    finally:
        _running.active = False
