"""Launch plans forced from outside an op: what ``kw tune`` (through a spec's ``configured``), sweeps and tests
use to make an op launch a given plan instead of its own choice; and the op's own choice, observed (where a
pattern search starts)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from kernelworks.runtime import context, launch, replay

_P = TypeVar("_P")
_T = TypeVar("_T")
_observed: ContextVar[list[dict[str, Any]] | None] = ContextVar("kernelworks_observed_plans", default=None)
_consulted: ContextVar[list[tuple[str, Any]] | None] = ContextVar("kernelworks_consulted_plans", default=None)


@contextmanager
def _collecting(var: ContextVar[list[_T] | None]) -> Iterator[list[_T]]:
    """A fresh list in ``var`` for the block (a :func:`~kernelworks.runtime.context.scope`: backward passes
    add to it too)."""
    items: list[_T] = []
    token = var.set(items)
    try:
        with context.scope():
            yield items
    finally:
        var.reset(token)


def observed() -> AbstractContextManager[list[dict[str, Any]]]:
    """Within the block, the plans ops choose through :meth:`ForcedPlan.apply` are collected, each as a dict
    of its knobs, before any forced knob replaces them: ``kw tune`` starts a pattern search at the declared
    config closest to them, where a space's knobs are no kernel's constexpr names (a backward's ``KV_N``)."""
    return _collecting(_observed)


def consulted() -> AbstractContextManager[list[tuple[str, Any]]]:
    """Within the block, every time an op's launcher asks a :class:`ForcedPlan` (:meth:`ForcedPlan.get` or
    :meth:`ForcedPlan.apply`) is collected as ``(op, the forced plan or None)``. ``kw tune`` checks that a
    config's hook reached the op: an op that asked and was never answered with the config ran its own plan, so
    timing it would time that plan under the config's name (as every candidate of the first GPU backward
    tunes did, the forced plan not reaching autograd's own thread)."""
    return _collecting(_consulted)


class ForcedPlan(Generic[_P]):
    """One op's forced launch plan, per context (thread, task). The op's launcher asks :meth:`get` before
    planning; None means "plan as usual"::

        FORCED = ForcedPlan[dict]("cross_entropy")
        opts = FORCED.get() or plan(n_cols)          # in the launcher
        with FORCED.forced({"TILE": 8192, ...}):     # in a tuner, a sweep or a test
            op(...)
    """

    def __init__(self, op: str, knobs: Sequence[str] = ()) -> None:
        """``knobs``: when given, the names a forced plan (a mapping) may set; any other raises ``ValueError``
        as the block is entered."""
        self._op, self._knobs = op, tuple(knobs)
        self._plan: ContextVar[_P | None] = ContextVar(f"kernelworks_{op}_forced_plan", default=None)

    def get(self) -> _P | None:
        """The plan forced in this context, None when there is none."""
        forced = self._plan.get()
        log = _consulted.get()
        if log is not None:
            log.append((self._op, forced))
        return forced

    def apply(self, plan: _P) -> _P:
        """The plan to launch: the op's own ``plan`` (a dataclass) with the knobs forced in this context put in
        (a forced mapping), or the forced plan itself (a whole plan). ``plan`` is what :func:`observed`
        collects."""
        seen = _observed.get()
        if seen is not None and dataclasses.is_dataclass(plan):
            seen.append(dataclasses.asdict(plan))
        forced = self.get()
        if not forced:
            return plan
        return dataclasses.replace(plan, **forced) if isinstance(forced, Mapping) else forced

    @contextmanager
    def forced(self, plan: _P) -> Iterator[None]:
        """Within the block the op launches ``plan``. Replays are paused there: a call replayed from a record
        made outside would not read the forced plan. A plan that does not fit the GPU's shared memory raises
        (``launch.exact_stages``) rather than run with fewer stages under the forced plan's name."""
        if self._knobs and isinstance(plan, Mapping):
            bad = set(plan) - set(self._knobs)
            if bad:
                raise ValueError(f"{self._op}: unknown knobs {sorted(bad)}; expected some of {self._knobs}")
        token = self._plan.set(plan)
        try:
            with replay.paused(), launch.exact_stages(), context.scope():
                yield
        finally:
            self._plan.reset(token)
