"""``kernelworks.tune(spec)``: correctness-gated search over the configs a spec declares.

A spec is tunable when it declares ``configs`` (the search space: one mapping of knobs per candidate, the
simplest first) and ``configured(config)``, a context manager under which its subject provider runs that
config; its backward pass when it declares ``bwd_configs`` and ``bwd_configured`` (``mode="bwd"``: each
candidate's gradients are checked, and the backward alone is timed on a graph built once, as ``kw bench``
times it). For each case:

1. every candidate runs twice on fresh copies of the case's inputs (in-place arguments restored), its fresh
   memory NaN-poisoned as ``kw check`` poisons it (so an element it never writes fails), and is compared with
   the float64 reference under the spec's tolerance rule; the two runs must agree bit for bit (for a
   deterministic spec), the inputs must come back unchanged, and a third run on other values of the same
   shapes must be right too (what an output buffer kept between calls holds from an earlier run cannot
   pass). A candidate that raises (a failed compile included) or is wrong is recorded with why and never
   timed, never chosen;
2. the right ones are timed (``time_fn``: CUDA events, warm-up, median of many, L2 flushed); the op's own
   choice (no config forced, shown as ``default``) is always the first candidate, so a winner is measured
   against what the op does today, in the same run;
3. the fastest three are re-timed interleaved, round-robin, so drift hits them alike; the fastest wins only
   if it beats the runner-up by more than their measured spread (the p20–p80 band), else the simpler of
   the two (the one declared first) does.

Before a candidate runs, the compile gate (:mod:`kernelworks.tune.gate`) compiles it for the GPU's target
in parallel worker processes, each compile under a time-out, and turns away — recorded, never run — a
config that fails to compile, times out, needs more shared memory than the GPU has, or spills more than
``spill_limit`` bytes per thread. Without a GPU the gate is skipped unless a ``target`` (``"sm_90"``) is
named: it then compiles for that GPU while the runs go through the interpreter.

Strategies (:mod:`kernelworks.tune.search`): ``exhaustive`` (every config, in order), ``random`` (a seeded
random order until the budget runs out), ``pattern`` (a pattern search from the config closest to the op's
own choice: one knob at a time to its adjacent values, moving to the best, restarting under the budget) and
``auto`` (the default: ``pattern`` on spaces of more than :data:`~kernelworks.tune.search.PATTERN_ABOVE`
configs, else ``exhaustive``). Candidates are tried in batches, compiled together. Winners are cached per
GPU, triton version, the source of the spec's module and the case (:mod:`kernelworks.tune.cache`); a stale
entry is never used; ``kw tune --write`` also writes them into the op's shipped per-GPU table
(:mod:`kernelworks.tune.tables`), which the op reads at plan time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelworks.check.compare import bitwise_equal, first_failure
from kernelworks.check.engine import as_outputs, copies, fresh_memory_poisoned, gradients, snapshot_outputs, upcast
from kernelworks.runtime.device import default_device
from kernelworks.runtime.plans import consulted, observed
from kernelworks.spec import Case, OpSpec
from kernelworks.tune.gate import COMPILE_TIMEOUT_S, SPILL_LIMIT_BYTES, CompileGate, current_target, default_workers
from kernelworks.tune.search import Grid, Ordered, Pattern, resolve

FINALISTS = 3
"""Candidates re-timed against each other, interleaved, before the winner is named."""
ROUNDS = 3
"""Interleaved rounds of the finalists' re-timing."""

Timer = Callable[[Callable[[], object]], tuple[float, float, float]]
"""``timer(fn) -> (median_ms, p20_ms, p80_ms)`` of repeated calls of ``fn``."""


@dataclass
class Candidate:
    """One config's verdict on one case: ``ok`` (then timed), ``wrong`` or ``error`` (from its run), ``not
    applied`` (it ran, but no launcher of the op took the forced config: never timed), or the compile gate's
    ``compile error``, ``compile timeout``, ``out of shared memory`` or ``spills`` (never run)."""

    config: dict[str, Any]
    """The knobs forced; empty for the op's own (default) choice."""
    verdict: str
    detail: str = ""
    ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    order: int = 0
    """0 for the default, else 1 + the position in the spec's ``configs`` (lower is simpler: the tie-break)."""
    registers: int | None = None
    """Registers per thread of its kernels (the most), when the compile gate compiled it."""
    spill_bytes: int | None = None
    """Spilled bytes per thread (stack + local, the most of its kernels), when the compile gate compiled it."""


@dataclass
class CaseTuning:
    """The search on one case: every candidate tried, the winner and why it won."""

    op: str
    case: str
    candidates: list[Candidate] = field(default_factory=list)
    winner: dict[str, Any] | None = None
    reason: str = ""
    seconds: float = 0.0
    strategy: str = ""
    target: str | None = None
    """The compile gate's target (``sm_90``), None when it was skipped."""
    mode: str = "fwd"
    """The pass tuned: ``fwd`` or ``bwd``."""
    complete: bool = True
    """False when the budget or ``max_trials`` stopped the search before its strategy was done: such a winner is
    reported but not cached, so a later, longer search is not answered with it."""

    @property
    def best_so_far(self) -> list[float | None]:
        """The best time after each candidate tried (None until one is right): the search's curve."""
        out: list[float | None] = []
        best: float | None = None
        for c in self.candidates:
            if c.ms is not None and (best is None or c.ms < best):
                best = c.ms
            out.append(best)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "case": self.case, "mode": self.mode, "winner": self.winner, "reason": self.reason,
                "seconds": self.seconds, "strategy": self.strategy, "target": self.target, "complete": self.complete,
                "candidates": [vars(c) for c in self.candidates]}


def _gpu_timer(fn: Callable[[], object]) -> tuple[float, float, float]:
    from kernelworks.bench.timing import time_fn

    t = time_fn(fn)
    return t.median_ms, t.p20_ms, t.p80_ms


def _fresh(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs with every tensor cloned: a candidate that writes in place leaves the next one untouched."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


class _Truth:
    """What a candidate's results are judged against on one case: the float64 reference (``ref``) and the
    reference in the inputs' dtype (``base``, the error scale) — of the outputs for ``fwd``, of the gradients
    of ``grad_outs`` for ``bwd``."""

    def __init__(self, spec: OpSpec, case: Case, inputs: Mapping[str, Any], mode: str,
                 device: torch.device) -> None:
        self.mode, self.device, self.deterministic = mode, device, spec.deterministic
        tol = spec.case_tolerance(case)
        if mode == "fwd":
            self.ref = as_outputs(spec.reference(**upcast(inputs)))
            self.base = as_outputs(spec.reference(**copies(inputs)))
            self.tol = tol
            return
        self.names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)]
        outs = as_outputs(spec.reference(**upcast(inputs)))
        self.grad_outs = [torch.randn(o.shape, dtype=torch.float64, device=o.device) for o in outs
                          if o.is_floating_point()]
        self.ref = gradients(spec.reference, upcast(inputs), self.names, self.grad_outs)
        self.base = gradients(spec.reference, copies(inputs), self.names, self.grad_outs)
        self.tol = [spec.gradient_tolerance(case, n) for n in self.names]

    def _once(self, fn: Callable[..., Any], inputs: Mapping[str, Any]) -> tuple[Sequence[Any], str | None]:
        """A candidate's outputs (``fwd``) or gradients (``bwd``) on fresh copies of the inputs, its fresh memory
        poisoned; and the name of an input it modified (None: none)."""
        fresh = _fresh(inputs)
        with fresh_memory_poisoned(self.device):
            out = as_outputs(fn(**fresh)) if self.mode == "fwd" else gradients(fn, fresh, self.names,
                                                                               self.grad_outs)
        out = snapshot_outputs(out)  # a provider may hand back one buffer it keeps: its next call rewrites it
        touched = next((k for k, v in fresh.items() if isinstance(v, torch.Tensor)
                        and not bitwise_equal(v.detach(), inputs[k])), None)
        return out, touched

    def verdict(self, fn: Callable[..., Any], inputs: Mapping[str, Any],
                fresh: tuple[_Truth, Mapping[str, Any]] | None = None) -> tuple[str, str]:
        """``("ok", "")`` or ``("wrong" | "error", why)``: right against the reference, the same twice, the
        inputs untouched; and, given ``fresh`` (another truth and its inputs, other values of the same shapes),
        right on those too — a config that leaves part of an output it keeps between calls unwritten would
        otherwise pass on what an earlier candidate wrote there for the same inputs."""
        try:
            out, touched = self._once(fn, inputs)
            again, _ = self._once(fn, inputs) if self.deterministic else (out, None)
            other = fresh[0]._once(fn, fresh[1])[0] if fresh is not None else None
        except Exception as e:  # a failed compile or launch is a verdict, not the end of the search
            return "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        if touched is not None:
            return "wrong", f"input {touched!r} was modified"
        bad = first_failure(out, self.ref, self.base, self.tol)
        if bad is None and (len(out) != len(again) or any(isinstance(a, torch.Tensor) and not bitwise_equal(a, b)
                                                          for a, b in zip(out, again))):
            bad = "two runs on the same inputs differ (race or nondeterminism)"
        if bad is None and fresh is not None:
            bad = first_failure(other, fresh[0].ref, fresh[0].base, fresh[0].tol)
            bad = None if bad is None else f"on other input values: {bad}"
        return ("ok", "") if bad is None else ("wrong", bad)


def _start(spec: OpSpec, case: Case, grid: Grid, capability: tuple[int, int], mode: str = "fwd") -> int:
    """The declared config closest to the op's own choice: most knob values in common with the plans the
    default chooses (``runtime.plans.observed``) and the constexprs and launch options of the launches it makes
    (captured as ``kw inspect`` does); the first config when they cannot be captured."""
    from kernelworks.inspect.capture import capture_op

    try:
        with observed() as plans:
            launches = capture_op(spec, case, mode=mode, capability=capability)
    except Exception:  # a launcher that needs real values or a GPU: start from the simplest config
        return 1
    values: dict[str, Any] = {}
    for plan in plans:
        for k, v in plan.items():
            values.setdefault(k, v)
    for launch in launches:
        for k, v in (*launch.args.items(), *launch.options.items()):
            values.setdefault(k, v)
    return grid.closest(values)


def _context(hook: Callable[[Mapping[str, Any]], AbstractContextManager[Any]],
             config: Mapping[str, Any]) -> AbstractContextManager[Any]:
    """The search space's hook around a config; the default (empty config) forces nothing."""
    return hook(config) if config else nullcontext()


def _pick(finalists: list[Candidate], timer: Timer, run: Callable[[Candidate], Callable[[], object]]
          ) -> tuple[Candidate, str]:
    """Re-time the finalists interleaved and name the winner (the simpler one unless clearly faster)."""
    samples: dict[int, list[tuple[float, float, float]]] = {id(c): [] for c in finalists}
    for _ in range(ROUNDS):
        for c in finalists:
            samples[id(c)].append(timer(run(c)))
    for c in finalists:
        got = sorted(samples[id(c)])
        c.ms, c.p20_ms, c.p80_ms = got[len(got) // 2]
    ranked = sorted(finalists, key=lambda c: c.ms)
    if len(ranked) == 1:
        return ranked[0], "the only right config"
    best, second = ranked[0], ranked[1]
    spread = max(best.p80_ms - best.p20_ms, second.p80_ms - second.p20_ms)
    gap = second.ms - best.ms
    if gap > spread or best.order < second.order:
        return best, (f"{gap / second.ms:.1%} faster than the runner-up (spread {spread:.4f} ms)"
                      if gap > spread else "fastest and the simpler of the two")
    return second, (f"within the spread of the fastest ({gap:.4f} ≤ {spread:.4f} ms): the simpler config wins")


def tune_case(spec: OpSpec, case: Case, *, strategy: str = "auto", budget_s: float | None = None,
              max_trials: int | None = None, device: torch.device | None = None, timer: Timer | None = None,
              seed: int = 0, on_candidate: Callable[[Candidate], None] | None = None, target: Any = "auto",
              spill_limit: int = SPILL_LIMIT_BYTES, compile_timeout_s: float = COMPILE_TIMEOUT_S,
              compile_workers: int | None = None, mode: str = "fwd") -> CaseTuning:
    """Search ``spec.configs`` (``mode="bwd"``: ``spec.bwd_configs``) on one case (see the module
    docstring); returns the record of the search.

    ``budget_s`` / ``max_trials`` bound the search (seconds, compiles included / candidates tried; the
    default always runs). ``target``: the compile gate's target — ``"auto"`` this machine's GPU (skipped
    without one), ``"sm_90"`` and the like, or None to skip it; ``spill_limit`` (bytes per thread),
    ``compile_timeout_s`` and ``compile_workers`` set the gate (:mod:`kernelworks.tune.gate`)."""
    configs, hook = spec.search_space(mode)
    if not configs or hook is None:
        what = "`bwd_configs` and `bwd_configured`" if mode == "bwd" else "`configs` and `configured`"
        raise ValueError(f"spec {spec.name!r} is not tunable{' in its backward' if mode == 'bwd' else ''}: "
                         f"it needs {what}")
    strategy = resolve(strategy, len(configs))
    device = device or default_device()
    timer = timer or _gpu_timer
    fn = spec.providers[spec.subject].fn
    result = CaseTuning(spec.name, case.id, strategy=strategy, mode=mode)
    t_start = time.perf_counter()
    gate_target = current_target() if target == "auto" else target
    workers = compile_workers or default_workers()
    gate = None if gate_target is None else CompileGate(spec, case, gate_target, spill_limit=spill_limit,
                                                        timeout_s=compile_timeout_s, workers=workers, mode=mode)
    result.target = None if gate is None else gate.target.name
    if strategy == "pattern":
        grid = Grid(configs)
        start = _start(spec, case, grid, divmod(gate.target.arch, 10) if gate is not None else (9, 0), mode)
        search: Ordered | Pattern = Pattern(configs, start, seed)
    else:
        # exhaustive: every config to the compile gate at once, so its workers never wait at a batch's slowest
        # compile (H100, rms_norm's 33 candidates: 73 s in batches of 16, 34 s in one); random: batches, so a
        # budget stops the compiles too
        search = Ordered(len(configs), strategy, seed,
                         len(configs) + 1 if strategy == "exhaustive" else 2 * workers)
    torch.manual_seed(seed + 1)
    other_inputs = spec.inputs(case, device)
    other = (_Truth(spec, case, other_inputs, mode, device), other_inputs)
    torch.manual_seed(seed)
    inputs = spec.inputs(case, device)
    truth = _Truth(spec, case, inputs, mode, device)

    def run(c: Candidate) -> Callable[[], object]:
        """The call timed: the forward, or the backward alone on a graph the forward built once."""
        from kernelworks.bench.engine import timed_call

        with _context(hook, c.config):  # a backward config's hook is harmless around the forward
            timed = timed_call(spec, mode, fn, _fresh(inputs))

        def call() -> object:
            with _context(hook, c.config):
                return timed()
        return call

    def spent() -> bool:
        if not result.candidates:
            return False
        return (budget_s is not None and time.perf_counter() - t_start > budget_s) or \
            (max_trials is not None and len(result.candidates) >= max_trials)

    times: dict[int, float | None] = {}
    stopped = False  # the budget or max_trials ended the search while its strategy had candidates left
    while batch := search.next_batch(times):
        if spent():
            stopped = True
            break
        chosen = [dict(configs[i - 1]) if i else {} for i in batch]
        checks = gate.check(chosen) if gate is not None else [None] * len(batch)
        for i, config, check in zip(batch, chosen, checks):
            if spent():  # candidates of this batch left untried
                stopped = True
                break
            cand = Candidate(config, "", order=i)
            if check is not None:
                cand.registers, cand.spill_bytes = check.registers, check.spill_bytes
            if check is not None and not check.passed and i != 0:  # the op's own choice always runs
                cand.verdict, cand.detail = check.verdict, check.detail
            else:
                with _context(hook, cand.config), consulted() as asked:
                    cand.verdict, cand.detail = truth.verdict(fn, inputs, other)
                if cand.config and cand.verdict == "ok" and asked and not any(forced for _, forced in asked):
                    # the op asked for a forced plan and got none: it ran its own plan, and timing it would time
                    # that plan under the config's name
                    cand.verdict = "not applied"
                    cand.detail = (f"the op asked for a forced plan {len(asked)} times and never got this config: "
                                   "the hook does not reach the op")
                if cand.verdict == "ok":
                    cand.ms, cand.p20_ms, cand.p80_ms = timer(run(cand))
            times[i] = cand.ms
            result.candidates.append(cand)
            if on_candidate is not None:
                on_candidate(cand)
    result.complete = not stopped
    if gate is not None:
        _unapplied_configs(result.candidates, gate)
    right = sorted((c for c in result.candidates if c.verdict == "ok"), key=lambda c: c.ms)
    if not right:
        result.reason = "no config was right"
    else:
        winner, result.reason = _pick(right[:FINALISTS], timer, run)
        result.winner = winner.config
    result.seconds = time.perf_counter() - t_start
    return result


def _unapplied_configs(candidates: Sequence[Candidate], gate: Any) -> None:
    """When every config tried launches exactly what the op's own choice launches (the same compiled kernels,
    grids and scalar arguments), the ``configured`` hook reaches no launch (a user spec's hook that sets nothing
    the launch reads): the configs are marked "not applied" rather than timed as if they differed (a winner
    would be noise). One config equal to the op's own plan is normal; all of them are not."""
    default = gate.launches({})
    others = [c for c in candidates if c.config]
    if not default or len(others) < 2 or any(gate.launches(c.config) != default for c in others):
        return
    for c in others:
        c.verdict = "not applied"
        c.detail = ("every config launches what the op's own choice launches (kernels, grids, scalar arguments): "
                    "the spec's `configured` hook reaches no launch (it must set what the launch reads)")


def tune(spec: OpSpec | str, cases: Iterable[str] | None = None, *, strategy: str = "auto",
         budget_s: float | None = None, device: torch.device | None = None, timer: Timer | None = None,
         progress: bool = True, use_cache: bool = True, write_cache: bool = True, mode: str = "fwd",
         **options: Any) -> list[CaseTuning]:
    """Tune ``spec``'s forward (or, ``mode="bwd"``, its backward) on its bench cases (or the named ones): one
    :class:`CaseTuning` per case. ``spec``: an :class:`OpSpec`, a registered op's name or ``FILE.py:SPEC``.
    Candidates are timed on a GPU; without one a ``timer`` must be given (tests pass a stand-in), else this
    raises at once rather than after running the cases in the interpreter.

    ``budget_s`` bounds each case's search. A cached winner for this GPU, triton version and spec source is
    returned without searching when ``use_cache`` (``reason`` says so); new winners are cached when
    ``write_cache``. ``options`` go to :func:`tune_case` (``max_trials``, ``target``, ``spill_limit``,
    ``compile_timeout_s``, ``compile_workers``, ``seed``).

    Example:
        >>> results = kernelworks.tune("matmul", ["llama3_8b-qkv-M64"], budget_s=120)   # on a GPU
        >>> results[0].winner, results[0].reason
    """
    from kernelworks.spec import load_spec
    from kernelworks.tune import cache

    if isinstance(spec, str):
        spec = load_spec(spec)
    if not isinstance(spec, OpSpec):
        raise TypeError(f"spec: expected an OpSpec, an op name or FILE.py:SPEC, got {type(spec).__name__}")
    if timer is None and not torch.cuda.is_available():
        raise RuntimeError("kernelworks.tune times its candidates on a GPU, and none is visible (pass timer= to "
                           "search without one)")
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s: expected seconds > 0, got {budget_s}")
    max_trials = options.get("max_trials")
    if max_trials is not None and (isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1):
        raise ValueError(f"max_trials: expected an int >= 1, got {max_trials!r}")
    chosen = spec.find_cases(cases, bench=True) if spec.bench_cases else spec.find_cases(cases, bench=False)
    n_configs = len(spec.search_space(mode)[0])
    out: list[CaseTuning] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(chosen) * (n_configs + 1), desc=f"kw tune {spec.name}" + (" bwd" if mode == "bwd" else ""),
                   unit="config")
    for case in chosen:
        hit = cache.lookup(spec, case, mode) if use_cache else None
        if hit is not None:
            out.append(CaseTuning(spec.name, case.id, winner=hit, reason="cached (same GPU, triton and source)",
                                  mode=mode))
            if bar is not None:
                bar.update(n_configs + 1)
            continue
        res = tune_case(spec, case, strategy=strategy, budget_s=budget_s, device=device, timer=timer, mode=mode,
                        on_candidate=(lambda _c: bar.update(1)) if bar is not None else None, **options)
        if bar is not None:
            bar.update(n_configs + 1 - len(res.candidates))
        if write_cache and res.winner is not None and res.complete:
            cache.store(spec, case, res.winner, mode)
        elif res.winner is not None and not res.complete:
            res.reason += " (search cut short by the budget or max_trials: not cached)"
        out.append(res)
    if bar is not None:
        bar.close()
    return out
