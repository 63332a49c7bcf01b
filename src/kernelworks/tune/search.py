"""Search strategies over a spec's declared configs: which candidates to try next, in batches.

A strategy sees the configs as indices ``1..n`` (0 is the op's own choice, always tried first) and is asked
for the next batch with what it has learnt so far (``times``: index → median ms, or None for a config that
failed); it returns an empty batch to stop. Batches are what the compile gate compiles in parallel.

* ``exhaustive``: every config in declared order.
* ``random``: every config in a seeded random order (a budget stops it).
* ``pattern``: a pattern (compass) search. The configs are points on a grid: one axis per knob, each axis
  the knob's declared values in sorted order (a knob a config lacks is its own value, first). It starts at
  the declared config closest to the op's own choice (the most knob values in common with the launches the
  default makes), polls the neighbours — the declared configs that differ in ONE knob, at most ``step``
  places along that axis on either side, the nearest on each side — and moves to the best of them while
  it improves; when none does, the step halves, and at step 1 the point is a local optimum. It then
  restarts from the best config tried that still has untried neighbours (else a random untried config)
  and stops after :data:`PATIENCE` restarts in a row that found nothing faster, when everything is tried,
  or at the budget. On a structured landscape (time varying smoothly with each knob) it reaches the
  optimum in a few polls of ``2 × knobs`` configs, where random order needs about half the space
  (``tests/tune/test_search.py`` measures both).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

STRATEGIES = ("auto", "exhaustive", "random", "pattern")
PATTERN_ABOVE = 48
"""``auto`` runs ``pattern`` on spaces of more configs than this, ``exhaustive`` on the rest. Declared spaces
of a few dozen configs are sparse — matmul's tiles differ from each other in two or three knobs at once — and a
one-knob step cannot reach across them: on the H100 (session 20) the pattern search over matmul's 33 configs
missed the winner of 8B o at M = 64 (23.2 against 22.1 µs), which the exhaustive search, ~21 s a shape, found."""
PATIENCE = 2
"""Pattern search stops after this many restarts in a row without a faster config."""

Times = Mapping[int, float | None]


def resolve(strategy: str, n_configs: int) -> str:
    """The strategy ``auto`` stands for on a space of ``n_configs``; others unchanged."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: expected one of {STRATEGIES}, got {strategy!r}")
    if strategy == "auto":
        return "pattern" if n_configs > PATTERN_ABOVE else "exhaustive"
    return strategy


class Ordered:
    """``exhaustive`` and ``random``: a fixed order, handed out ``batch`` at a time."""

    def __init__(self, n: int, strategy: str, seed: int, batch: int) -> None:
        rest = list(range(1, n + 1))
        if strategy == "random":
            random.Random(seed).shuffle(rest)
        self.order, self.batch, self.pos = [0, *rest], max(1, batch), 0

    def next_batch(self, times: Times) -> list[int]:
        out = self.order[self.pos:self.pos + self.batch]
        self.pos += len(out)
        return out


def _sort_key(value: Any) -> tuple:
    return (value is not None, type(value).__name__, value if value is not None else 0)


class Grid:
    """The declared configs as points: one axis per knob, each axis the knob's sorted distinct values."""

    def __init__(self, configs: Sequence[Mapping[str, Any]]) -> None:
        self.knobs: list[str] = []
        for c in configs:
            self.knobs += [k for k in c if k not in self.knobs]
        self.axes = [sorted({c.get(k) for c in configs}, key=_sort_key) for k in self.knobs]
        self.points = [tuple(axis.index(c.get(k)) for k, axis in zip(self.knobs, self.axes)) for c in configs]
        self.index = {p: i + 1 for i, p in reversed(list(enumerate(self.points)))}  # first declared wins
        # configs that agree on every knob but one, per (knob, the other knobs' positions)
        self.lines: dict[tuple[int, tuple], list[tuple[int, int]]] = {}
        for p, i in self.index.items():
            for j in range(len(self.knobs)):
                self.lines.setdefault((j, p[:j] + p[j + 1:]), []).append((p[j], i))

    def neighbours(self, i: int, step: int) -> list[int]:
        """Configs differing from config ``i`` in one knob, per knob and side the one farthest away within
        ``step`` places (exactly ``step`` on a full grid; where the declared list has gaps, the nearest
        declared value short of it)."""
        p = self.points[i - 1]
        out = []
        for j in range(len(self.knobs)):
            line = self.lines[(j, p[:j] + p[j + 1:])]
            below = [(p[j] - q, k) for q, k in line if 0 < p[j] - q <= step]
            above = [(q - p[j], k) for q, k in line if 0 < q - p[j] <= step]
            out += [max(side)[1] for side in (below, above) if side]
        return out

    def closest(self, values: Mapping[str, Any]) -> int:
        """The config with the most knob values equal to ``values`` (the first such on a tie)."""
        score = [sum(k in values and values[k] == c for k, c in zip(self.knobs, (ax[q] for ax, q in
                                                                                 zip(self.axes, p))))
                 for p in self.points]
        return 1 + max(range(len(score)), key=lambda i: (score[i], -i))


class Pattern:
    """The pattern search of the module docstring."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], start: int, seed: int) -> None:
        self.grid = Grid(configs)
        self.n = len(configs)
        self.rng = random.Random(seed)
        self.first_step = max(1, max((len(a) for a in self.grid.axes), default=1) // 4)
        self.current: int | None = None
        self.step = self.first_step
        self.start = start
        self.best_at_restart: float | None = None
        self.stale_restarts = 0
        self.asked: set[int] = set()

    def _ms(self, times: Times, i: int) -> float:
        t = times.get(i)
        return float("inf") if t is None else t

    def _best(self, times: Times) -> float:
        return min((t for i, t in times.items() if i and t is not None), default=float("inf"))

    def _ask(self, batch: list[int]) -> list[int]:
        out = [i for i in dict.fromkeys(batch) if i not in self.asked]
        self.asked.update(out)
        return out

    def next_batch(self, times: Times) -> list[int]:
        if not self.asked:
            self.asked.add(0)  # the op's own choice: always measured, never a point of the grid
            return [0, *self._ask([self.start, *self.grid.neighbours(self.start, self.step)])]
        while len(self.asked) < self.n + 1:
            if self.current is None:
                self.current = self.start
            polled = self.grid.neighbours(self.current, self.step)
            new = self._ask([self.current, *polled])
            if new:
                return new
            best = min(polled, key=lambda k: self._ms(times, k), default=None)
            if best is not None and self._ms(times, best) < self._ms(times, self.current):
                self.current = best  # move; the step stays
                continue
            if self.step > 1:
                self.step = max(1, self.step // 2)
                continue
            if not self._restart(times):
                return []
        return []

    def _restart(self, times: Times) -> bool:
        """A local optimum: pick the next start; False to stop (patience spent or nothing left)."""
        best = self._best(times)
        if self.best_at_restart is not None and best >= self.best_at_restart:
            self.stale_restarts += 1
            if self.stale_restarts >= PATIENCE:
                return False
        else:
            self.stale_restarts = 0
        self.best_at_restart = best
        tried = sorted((i for i in self.asked if i and times.get(i) is not None), key=lambda i: times[i])
        for i in tried:
            if any(k not in self.asked for k in self.grid.neighbours(i, 1)):
                self.current, self.step = i, 1
                return True
        untried = [i for i in range(1, self.n + 1) if i not in self.asked]
        if not untried:
            return False
        self.current, self.step = self.rng.choice(untried), self.first_step
        return True
