"""Search strategies: the pattern search against random sampling on a landscape whose timing is a known
function of the config (a fake timer reads it), the start at the op's own choice, and ``auto``."""

from __future__ import annotations

import importlib.util
import itertools
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from statistics import median

import pytest
import torch

from kernelworks.spec import Case, Cost, OpSpec, Provider
from kernelworks.tune import tune_case
from kernelworks.tune.engine import _start
from kernelworks.tune.search import PATTERN_ABOVE, Grid, Pattern, resolve

_CONFIG: ContextVar[dict | None] = ContextVar("landscape_config", default=None)
_timed: list[dict | None] = []
OPTIMUM = {"A": 5, "B": 2, "C": 6}


@contextmanager
def _configured(config):
    token = _CONFIG.set(dict(config))
    try:
        yield
    finally:
        _CONFIG.reset(token)


def _op(x: torch.Tensor) -> torch.Tensor:
    _timed.append(_CONFIG.get())
    return 2 * x


def _ms(config: dict | None) -> float:
    """A structured landscape: a smooth bowl in each knob (with a coupling), the optimum at OPTIMUM; the op's
    own choice (no config) is middling."""
    if config is None:
        return 30.0
    a, b, c = (config[k] - OPTIMUM[k] for k in "ABC")
    return 1.0 + a * a + 0.5 * b * b + c * c + 0.3 * a * c


def _timer(fn):
    fn()
    ms = _ms(_timed[-1])
    return ms, ms - 1e-3, ms + 1e-3


CONFIGS = [dict(zip("ABC", v)) for v in itertools.product(range(8), repeat=3)]  # 512, the simplest first
SPEC = OpSpec(name="landscape", reference=lambda x: 2 * x,
              inputs=lambda case, device: {"x": torch.randn(8, device=device)},
              check_cases=[Case("c", {}, torch.float32)], bench_cases=[Case("b", {}, torch.float32)],
              cost=lambda case, mode: Cost(bytes=64), providers={"ours": Provider("ours", _op)}, subject="ours",
              baselines=(), configs=CONFIGS, configured=_configured)
CASE = SPEC.bench_cases[0]


def _trials_to_optimum(strategy: str, seed: int = 0) -> tuple[int, object]:
    res = tune_case(SPEC, CASE, strategy=strategy, timer=_timer, seed=seed, target=None)
    found = next(i for i, c in enumerate(res.candidates, 1) if c.config == OPTIMUM)
    return found, res


def test_pattern_finds_the_optimum_in_far_fewer_trials_than_random():
    pattern_trials, res = _trials_to_optimum("pattern")
    assert res.winner == OPTIMUM
    assert len(res.candidates) < len(CONFIGS) // 4, "the pattern search did not stop near the optimum"
    random_trials = [_trials_to_optimum("random", seed)[0] for seed in range(5)]
    # random order reaches a given config after about half the space on average
    assert pattern_trials <= 60, pattern_trials
    assert median(random_trials) > 3 * pattern_trials, (pattern_trials, random_trials)


def test_pattern_polls_one_knob_at_a_time_from_its_start():
    grid = Grid(CONFIGS)
    start = CONFIGS.index({"A": 3, "B": 3, "C": 3}) + 1
    batch = Pattern(CONFIGS, start, seed=0).next_batch({})
    assert batch[0] == 0 and batch[1] == start  # the op's own choice, then the start
    moved = [CONFIGS[i - 1] for i in batch[2:]]
    assert all(sum(c[k] != 3 for k in "ABC") == 1 for c in moved)
    assert len(moved) == 2 * len(grid.knobs)  # both sides of every knob
    assert {abs(c[k] - 3) for c in moved for k in "ABC" if c[k] != 3} == {2}  # the first step: 8 values // 4


def test_pattern_restarts_out_of_a_local_optimum_while_it_improves():
    """A second, deeper bowl far from the start: the first descent ends in the shallow one; the search only
    stops after restarts that find nothing better, so with the whole space it may get there, and it never
    stops before trying the shallow bowl's neighbours."""
    def two_bowls(config):
        if config is None:
            return 30.0
        near = sum((config[k] - 1) ** 2 for k in "ABC") + 5.0
        far = sum((config[k] - 6) ** 2 for k in "ABC") + 1.0
        return min(near, far)

    def timer(fn):
        fn()
        ms = two_bowls(_timed[-1])
        return ms, ms - 1e-3, ms + 1e-3

    res = tune_case(SPEC, CASE, strategy="pattern", timer=timer, target=None)
    tried = [c.config for c in res.candidates]
    assert {"A": 1, "B": 1, "C": 1} in tried  # the first descent's local optimum
    assert len(tried) > 14  # it went on after it (restarts), rather than stopping there


def test_pattern_respects_the_trial_budget():
    res = tune_case(SPEC, CASE, strategy="pattern", timer=_timer, target=None, max_trials=5)
    assert len(res.candidates) == 5 and res.candidates[0].config == {}


def test_auto_is_pattern_on_large_spaces_only():
    assert resolve("auto", PATTERN_ABOVE) == "exhaustive"
    assert resolve("auto", PATTERN_ABOVE + 1) == "pattern"
    assert resolve("random", 1000) == "random"
    with pytest.raises(ValueError, match="strategy"):
        resolve("genetic", 10)
    res = tune_case(SPEC, CASE, timer=_timer, target=None, max_trials=3)
    assert res.strategy == "pattern"


def test_the_search_starts_at_the_config_the_op_would_pick():
    """examples/user_kernel.py launches BLOCK 4096 with 4 warps by default: the captured launch says so."""
    path = Path(__file__).parents[2] / "examples" / "user_kernel.py"
    module_spec = importlib.util.spec_from_file_location("user_kernel_example_search", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    spec = module.SPEC
    start = _start(spec, spec.check_cases[0], Grid(spec.configs), (9, 0))
    assert spec.configs[start - 1] == module.DEFAULT_CONFIG
    assert _start(SPEC, CASE, Grid(CONFIGS), (9, 0)) == 1  # nothing launched: the simplest config
