"""``kernelworks.tune`` on the CPU: the correctness gate, the winner rule, in-place inputs, the cache and the
budget, with a fake timer (times are a GPU's business; the search logic is not)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.util
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import pytest
import torch

from kernelworks.spec import Case, Cost, OpSpec, Provider
from kernelworks.tune import cache, table, tune, tune_case

_CHOICE: ContextVar[str] = ContextVar("toy_choice", default="slow")  # the op's own choice


def _hook(var: ContextVar[str]):
    """A ``configured`` hook: within it, ``var`` holds the config's name."""
    @contextmanager
    def configured(config):
        token = var.set(config["name"])
        try:
            yield
        finally:
            var.reset(token)
    return configured


_configured = _hook(_CHOICE)


def _toy(x: torch.Tensor) -> torch.Tensor:
    """2·x, unless the config is a broken one."""
    name = _CHOICE.get()
    if name == "crash":
        raise RuntimeError("out of shared memory")
    if name == "wrong":
        return 2 * x + 1e-2
    if name == "scribble":  # writes its input in place (and is wrong): the next candidate must not see it
        x.mul_(3)
        return x
    if name == "half":  # a fresh output whose second half it never writes (a tail tile it never visits)
        out = torch.empty_like(x)
        out[: x.numel() // 2] = 2 * x[: x.numel() // 2]
        return out
    if name in ("keep", "stale"):  # one output buffer kept between calls; "stale" writes only its first half
        buf = _KEPT.setdefault(x.shape, torch.empty_like(x))
        n = x.numel() if name == "keep" else x.numel() // 2
        buf[:n] = 2 * x[:n]
        return buf.clone()
    return 2 * x


_KEPT: dict = {}


def _spec(*names: str) -> OpSpec:
    return OpSpec(name="toy", reference=lambda x: 2 * x,
                  inputs=lambda case, device: {"x": torch.randn(64, device=device, dtype=case.dtype)},
                  check_cases=[Case("c", {}, torch.float32)], bench_cases=[Case("b", {"n": 64}, torch.float32)],
                  cost=lambda case, mode: Cost(bytes=512), providers={"ours": Provider("ours", _toy)},
                  subject="ours", baselines=(), configs=[{"name": n} for n in names], configured=_configured)


_runs: list[str] = []
"""The config of every provider call, in order (the fake timer reads the last to know whose time to give)."""


def _recorded(x: torch.Tensor) -> torch.Tensor:
    _runs.append(_CHOICE.get())
    return _toy(x)


def _timer(times: dict[str, tuple[float, float, float]]):
    """A fake ``time_fn``: runs the call once and returns that config's (median, p20, p80)."""
    def timer(fn):
        fn()
        return times[_runs[-1]]
    return timer


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELWORKS_CACHE", str(tmp_path))
    _runs.clear()


def _spec_spied(*names: str) -> OpSpec:
    return dataclasses.replace(_spec(*names), providers={"ours": Provider("ours", _recorded)})


TIMES = {"slow": (2.00, 1.99, 2.01), "a": (1.00, 0.99, 1.01), "b": (0.50, 0.49, 0.51), "c": (0.98, 0.90, 1.10)}


def test_wrong_and_crashing_configs_are_recorded_never_timed_never_chosen():
    res = tune_case(_spec_spied("crash", "wrong", "scribble", "a", "b"), Case("b", {}, torch.float32),
                    timer=_timer(TIMES))
    assert res.candidates[0].config == {}  # the op's own choice, always tried first
    verdicts = {c.config["name"]: c.verdict for c in res.candidates[1:]}
    assert verdicts == {"crash": "error", "wrong": "wrong", "scribble": "wrong", "a": "ok", "b": "ok"}
    assert "out of shared memory" in next(c.detail for c in res.candidates if c.verdict == "error")
    assert all(c.ms is None for c in res.candidates if c.verdict != "ok")
    assert res.winner == {"name": "b"} and "faster than the runner-up" in res.reason
    assert "| 2 | name=crash | error: RuntimeError: out of shared memory |" in table([res])


def test_configs_that_leave_outputs_unwritten_are_wrong_even_when_fastest():
    """What an unwritten element holds must not pass: a fresh output's garbage is NaN-poisoned (as ``kw check``
    poisons it), and a buffer kept between calls, which holds the previous candidate's right answer for the
    same inputs, is caught by the run on other input values."""
    times = {**TIMES, "half": (0.1, 0.09, 0.11), "keep": (0.9, 0.89, 0.91), "stale": (0.1, 0.09, 0.11)}
    res = tune_case(_spec_spied("keep", "stale", "half"), Case("b", {}, torch.float32), timer=_timer(times))
    verdicts = {c.config["name"]: (c.verdict, c.detail) for c in res.candidates[1:]}
    assert verdicts["keep"][0] == "ok"
    assert verdicts["stale"][0] == "wrong" and "other input values" in verdicts["stale"][1]
    assert verdicts["half"][0] == "wrong" and "NaN" in verdicts["half"][1]
    assert res.winner == {"name": "keep"}


def test_a_search_cut_short_is_reported_not_cached():
    spec = _spec_spied("a", "b")
    exact = tune(spec, timer=_timer(TIMES), progress=False, max_trials=3, use_cache=False, write_cache=False)
    assert exact[0].complete and len(exact[0].candidates) == 3  # every candidate tried: done, not cut short
    short = tune(spec, timer=_timer(TIMES), progress=False, max_trials=2)
    assert not short[0].complete and "not cached" in short[0].reason and short[0].winner == {"name": "a"}
    full = tune(spec, timer=_timer(TIMES), progress=False)
    assert full[0].candidates and full[0].complete and full[0].winner == {"name": "b"}


@pytest.mark.parametrize("options", [{"budget_s": 0.0}, {"budget_s": -60.0}, {"max_trials": 0}, {"max_trials": 1.5}])
def test_budgets_that_allow_nothing_are_refused(options):
    with pytest.raises(ValueError, match=r"budget_s|max_trials"):
        tune(_spec("a"), timer=_timer(TIMES), progress=False, **options)


def test_a_win_inside_the_spread_goes_to_the_simpler_config():
    times = {**TIMES, "a": (0.97, 0.96, 0.98)}
    res = tune_case(_spec_spied("c", "a"), Case("b", {}, torch.float32), timer=_timer(times))
    assert res.winner == {"name": "c"} and "simpler config wins" in res.reason


def test_in_place_candidates_do_not_leak_into_the_next():
    """"scribble" triples its input in place; "a" after it must still see the original and be right."""
    res = tune_case(_spec_spied("scribble", "a"), Case("b", {}, torch.float32), timer=_timer(TIMES))
    assert [c.verdict for c in res.candidates[1:]] == ["wrong", "ok"]


def test_winners_are_cached_and_a_source_or_triton_change_makes_them_stale(monkeypatch):
    spec = _spec_spied("a", "b")
    first = tune(spec, timer=_timer(TIMES), progress=False)
    assert first[0].winner == {"name": "b"} and first[0].candidates
    again = tune(spec, timer=_timer(TIMES), progress=False)
    assert again[0].winner == {"name": "b"} and again[0].reason.startswith("cached") and not again[0].candidates
    monkeypatch.setattr(cache, "source_hash", lambda s: "edited")
    fresh = tune(spec, timer=_timer(TIMES), progress=False)
    assert fresh[0].candidates, "a stale entry was used"


def test_random_strategy_stops_at_the_budget_but_always_tries_the_first_config():
    res = tune_case(_spec_spied("a", "b", "c"), Case("b", {}, torch.float32), strategy="random", budget_s=0.0,
                    timer=_timer(TIMES))
    assert [c.config for c in res.candidates] == [{}]  # the default, then the budget is spent


def test_untunable_spec_and_bad_strategy_raise():
    with pytest.raises(ValueError, match="not tunable"):
        tune_case(dataclasses.replace(_spec("a"), configured=None), Case("b", {}, torch.float32))
    with pytest.raises(ValueError, match="strategy"):
        tune_case(_spec("a"), Case("b", {}, torch.float32), strategy="genetic")


def test_the_documented_example_tunes_end_to_end():
    """examples/user_kernel.py: every BLOCK × num_warps config runs its Triton kernel (the interpreter here),
    is checked, and one wins."""
    path = Path(__file__).parents[2] / "examples" / "user_kernel.py"
    module_spec = importlib.util.spec_from_file_location("user_kernel_example", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    small = Case("small", {"rows": 3, "cols": 50}, torch.float32)
    spec = dataclasses.replace(module.SPEC, bench_cases=[small])
    (res,) = tune(spec, timer=lambda fn: (fn(), (1.0, 0.9, 1.1))[1], progress=False, use_cache=False)
    assert [c.verdict for c in res.candidates] == ["ok"] * (len(module.CONFIGS) + 1)
    assert res.winner == {}  # all tie within the spread: the op's own choice stays
    assert "winner default (the op's own choice)" in table([res])


def test_cli_refuses_untunable_specs_and_machines_without_a_gpu(capsys):
    from kernelworks.cli.main import main

    assert main(["tune", "softmax"]) == 2
    assert "declares no tunable configs" in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert main(["tune", "matmul"]) == 2
        assert "no CUDA GPU" in capsys.readouterr().out


def _launched(monkeypatch, module) -> list[dict]:
    """The constexprs and warps of every launch ``module`` makes (the real launch still runs)."""
    seen = []
    real = module.launch

    def spy(kernel, grid, *args, num_warps, **constexprs):
        seen.append({"num_warps": num_warps, **constexprs})
        return real(kernel, grid, *args, num_warps=num_warps, **constexprs)

    monkeypatch.setattr(module, "launch", spy)
    return seen


@pytest.mark.parametrize(("op", "config"), [
    ("cross_entropy", {"TILE": 16, "ONE_TILE": False, "num_warps": 2}),
    ("gated_delta_decode", {"BLOCK_V": 8, "num_warps": 2}),
    ("flash_attention", {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 2, "num_stages": 1}),
    ("rms_norm", {"LOOPED": True, "TILE": 32, "num_warps": 2}),
    ("rms_norm", {"LOOPED": False, "ROWS": 4, "num_warps": 2}),
])
def test_op_tune_hooks_force_their_plan_and_stay_right(monkeypatch, op, config, device):
    """Each tunable op's ``configured`` hook reaches its kernel's launch, and the forced plan still computes the
    reference's answer (the interpreter runs it)."""
    from kernelworks.check import check_case
    from kernelworks.ops.attention import forward as attention_forward
    from kernelworks.ops.cross_entropy import kernels as ce_kernels
    from kernelworks.ops.gated_delta import decode
    from kernelworks.ops.norm import forward as norm_forward
    from kernelworks.spec import registry

    spec = registry()[op]
    assert spec.configs and spec.configured is not None
    module = {"cross_entropy": ce_kernels, "gated_delta_decode": decode, "flash_attention": attention_forward,
              "rms_norm": norm_forward}[op]
    seen = _launched(monkeypatch, module)
    case = next(c for c in spec.check_cases if "gpu" not in c.tags)
    with spec.configured(config):
        results = check_case(spec, case, device=device, seed=0, probes=False)  # the plan's answer, not cheats
    knobs = {k: v for k, v in config.items() if k != "LOOPED"}  # LOOPED picks the kernel, it is no constexpr
    tuned = [launch for launch in seen if set(knobs) - {"num_warps"} <= set(launch)]  # the tuned kernel's
    assert tuned and all(launch[k] == v for launch in tuned for k, v in knobs.items()), seen
    failed = [r for r in results if not r.passed and not r.skipped]
    assert not failed, failed


def test_a_one_tile_plan_too_small_for_the_rows_is_refused():
    from kernelworks.ops.cross_entropy import kernels

    x = torch.randn(2, 40)
    with kernels.FORCED_PLAN.forced({"TILE": 16, "ONE_TILE": True, "num_warps": 1}), \
            pytest.raises(ValueError, match="one-tile plan of 16 columns"):
        kernels.cross_entropy_fwd(x, torch.zeros(2, dtype=torch.long), torch.empty(2), torch.ones(1), None,
                                  ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None)


def test_rms_norm_tunes_over_its_declared_configs(monkeypatch):
    """Every declared config of rms_norm's forward is right on a small case (the interpreter: both kernels, a
    masked tail), and ``kernelworks.tune`` names the one the timer finds fastest."""
    from kernelworks.ops.norm import RMS_NORM_SPEC, forward
    from kernelworks.spec import case

    seen = _launched(monkeypatch, forward)
    fastest = {"LOOPED": True, "TILE": 4096, "num_warps": 8}

    def timer(fn):
        fn()
        won = seen[-1].get("TILE") == 4096 and seen[-1]["num_warps"] == 8
        return (0.5, 0.49, 0.51) if won else (1.0, 0.99, 1.01)

    spec = dataclasses.replace(RMS_NORM_SPEC, bench_cases=[case("13x127", torch.bfloat16, rows=13, hidden=127)])
    # target=None: no compile gate (on a GPU it would turn away the configs that spill there)
    (res,) = tune(spec, timer=timer, progress=False, use_cache=False, target=None)
    assert res.strategy == "exhaustive"
    assert [c.verdict for c in res.candidates] == ["ok"] * (len(forward.CONFIGS) + 1), res.candidates
    assert res.winner == fastest


def test_a_forced_norm_plan_with_a_bad_knob_is_refused_and_the_tuner_records_why():
    import kernelworks
    from kernelworks.ops.norm import RMS_NORM_SPEC, forward
    from kernelworks.runtime.device import default_device
    from kernelworks.spec import case

    x = torch.randn(3, 40, device=default_device())
    with forward.FORCED_PLAN.forced({"LOOPED": False, "ROWS": 3, "num_warps": 2}), \
            pytest.raises(ValueError, match=r"powers of two, got \{'ROWS': 3\}"):
        kernelworks.rms_norm(x, None)
    with forward.FORCED_PLAN.forced({"LOOPED": True, "ROWS": 2, "num_warps": 2}), \
            pytest.raises(ValueError, match="a looped plan takes LOOPED, TILE, num_warps"):
        kernelworks.rms_norm(x, None)
    with forward.FORCED_PLAN.forced({"LOOPED": False, "ROWS": 1, "num_warps": 4}), \
            pytest.raises(ValueError, match="rows of 40000 need the looped kernel"):
        kernelworks.rms_norm(torch.randn(1, 40000, device=default_device()), None)
    bad = {"LOOPED": False, "ROWS": 3, "num_warps": 2}
    spec = dataclasses.replace(RMS_NORM_SPEC, bench_cases=[case("3x40", torch.float32, rows=3, hidden=40)],
                               configs=[bad])
    (res,) = tune(spec, timer=lambda fn: (fn(), (1.0, 0.9, 1.1))[1], progress=False, use_cache=False)
    assert [c.verdict for c in res.candidates] == ["ok", "error"]
    assert "powers of two" in res.candidates[1].detail and res.winner == {}


def test_shipped_tables_match_the_sources_they_were_tuned_on():
    """An edit of a tuned kernel or its launcher makes its table stale (the op silently plans with its
    heuristic): this test makes the edit visible — re-run ``kw tune OP --write`` on that GPU, or, when the edit
    cannot change a plan, restamp the entries' source hash."""
    import json

    from kernelworks.ops.gemm.forward import TUNED

    for path in TUNED.folder.glob("*.json"):
        for bucket, entry in json.loads(path.read_text())["entries"]["matmul"].items():
            assert entry["source"] == TUNED.source_hash(), f"{path.name} {bucket}: stale source hash"


# ------------------------------------------------------------------------------------------ the backward pass

_BWD_CHOICE: ContextVar[str] = ContextVar("toy_bwd_choice", default="slow")
_bwd_configured = _hook(_BWD_CHOICE)


class _Double(torch.autograd.Function):
    """2·x whose backward reads the backward config when it runs (as an op's backward launcher plans), in the
    context its forward ran in — as a ``TorchOp`` backward does where autograd gives it no caller context (on a
    GPU, autograd runs the backward on a thread of its own, where the tuner's ``ContextVar`` is unset)."""

    @staticmethod
    def forward(ctx, x):
        ctx.context = contextvars.copy_context()
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        name = ctx.context.run(_BWD_CHOICE.get)
        _runs.append(name)
        if name == "crash":
            raise RuntimeError("out of shared memory")
        return 2 * g + (1e-2 if name == "wrong" else 0.0)


def _double(x: torch.Tensor) -> torch.Tensor:
    return _Double.apply(x)  # providers are called with keywords; torch 2.11's Function.apply refuses them


def _bwd_spec(*names: str) -> OpSpec:
    return dataclasses.replace(_spec("a"), providers={"ours": Provider("ours", _double)}, grad_inputs=("x",),
                               bwd_configs=[{"name": n} for n in names], bwd_configured=_bwd_configured)


def test_the_backward_is_tuned_on_its_gradients_and_timed_alone():
    """``mode="bwd"``: each backward config's gradients are judged against the reference's (a wrong or crashing
    one never timed), and what is timed is the backward call itself, under the candidate's config."""
    res = tune_case(_bwd_spec("crash", "wrong", "a", "b"), Case("b", {}, torch.float32), mode="bwd",
                    timer=_timer(TIMES))
    assert res.mode == "bwd" and res.candidates[0].config == {}
    verdicts = {c.config["name"]: c.verdict for c in res.candidates[1:]}
    assert verdicts == {"crash": "error", "wrong": "wrong", "a": "ok", "b": "ok"}
    assert res.winner == {"name": "b"}  # the fake timer gives each backward config's time
    assert "**toy backward · b-fp32**" in table([res])


def test_backward_winners_are_cached_apart_from_the_forward():
    spec = dataclasses.replace(_bwd_spec("a", "b"), providers={"ours": Provider("ours", _double)})
    (bwd,) = tune(spec, timer=_timer(TIMES), progress=False, mode="bwd")
    assert bwd.winner == {"name": "b"}
    assert cache.lookup(spec, spec.bench_cases[0], "bwd") == {"name": "b"}
    assert cache.lookup(spec, spec.bench_cases[0]) is None  # the forward's entry is its own


@dataclasses.dataclass(frozen=True)
class _ToyPlan:
    name: str = "slow"


def _planned_op():
    """A toy op whose launcher plans through a ForcedPlan, and a hook that forces every config but ``lost``."""
    from kernelworks.runtime.plans import ForcedPlan

    forced = ForcedPlan("toy_planned")

    def op(x: torch.Tensor) -> torch.Tensor:
        _runs.append(forced.apply(_ToyPlan()).name)
        return 2 * x

    @contextmanager
    def configured(config):
        if config["name"] == "lost":  # a hook that never reaches the launcher
            yield
            return
        with forced.forced(_ToyPlan(config["name"])):
            yield

    return dataclasses.replace(_spec("a"), providers={"ours": Provider("ours", op)},
                               configs=[{"name": n} for n in ("lost", "a", "b")], configured=configured)


def test_a_config_no_launcher_takes_is_never_timed_as_if_it_ran():
    """A config whose hook does not reach the op (the op chose its own plan under it) is ``not applied``:
    never timed under the config's name, never chosen."""
    res = tune_case(_planned_op(), Case("b", {}, torch.float32), timer=_timer(TIMES))
    verdicts = {c.config["name"]: c.verdict for c in res.candidates[1:]}
    assert verdicts == {"lost": "not applied", "a": "ok", "b": "ok"}
    lost = next(c for c in res.candidates if c.config.get("name") == "lost")
    assert lost.ms is None and "does not reach the op" in lost.detail
    assert res.winner == {"name": "b"}


def test_a_spec_without_a_backward_space_is_not_tunable_there(capsys):
    with pytest.raises(ValueError, match="not tunable in its backward"):
        tune_case(_spec("a"), Case("b", {}, torch.float32), mode="bwd")
    from kernelworks.cli.main import main

    assert main(["tune", "rms_norm", "--mode", "bwd"]) == 2
    assert "no tunable configs for its backward" in capsys.readouterr().out
    assert main(["tune", "flash_attention", "--mode", "bwd", "--write"]) == 2
    assert "backward winners are only cached" in capsys.readouterr().out


def test_the_attention_backward_hook_forces_its_plan_and_stays_right(monkeypatch, device):
    """``forced_bwd_plan`` (the spec's ``bwd_configured``) reaches both backward passes' launches, the
    forward's are untouched, and the gradients still match the reference (the interpreter runs them)."""
    from kernelworks.check import check_case
    from kernelworks.ops.attention import backward
    from kernelworks.spec import registry

    spec = registry()["flash_attention"]
    config = {"KV_N": 32, "KV_M": 16, "kv_warps": 1, "kv_stages": 1, "Q_M": 32, "Q_N": 16, "q_warps": 1,
              "q_stages": 1}
    assert set(config) == set(spec.bwd_configs[0])  # the space's knobs, at sizes the interpreter runs quickly
    seen = _launched(monkeypatch, backward)
    case = next(c for c in spec.check_cases if "gpu" not in c.tags and c.get("causal"))
    with spec.bwd_configured(config):
        results = check_case(spec, case, device=device, seed=0, modes=("bwd",))
    dkdv = [s for s in seen if s.get("BLOCK_N") == 32 and s.get("BLOCK_M") == 16]
    dq = [s for s in seen if s.get("BLOCK_M") == 32 and s.get("BLOCK_N") == 16]
    assert dkdv and dq and all(s["num_warps"] == 1 for s in dkdv + dq), seen
    failed = [r for r in results if not r.passed and not r.skipped]
    assert not failed, failed
    with pytest.raises(ValueError, match="unknown knobs"), backward.forced_bwd_plan(BLOCK_M=64):
        pass


def test_the_compile_gate_captures_the_backward_config_it_judges():
    """The gate of a backward search captures the backward pass's launches under ``bwd_configured`` (no compile
    here: the capture is what decides which kernels the gate compiles)."""
    from kernelworks.inspect.capture import capture_op
    from kernelworks.spec import registry

    spec = registry()["flash_attention"]
    case = next(c for c in spec.check_cases if "gpu" not in c.tags)
    launches = capture_op(spec, case, mode="bwd", config={"KV_N": 128, "KV_M": 64, "kv_warps": 8})
    dkdv = next(launch for launch in launches if launch.name == "_attn_bwd_dkdv_kernel")
    assert (dkdv.args["BLOCK_N"], dkdv.args["BLOCK_M"], dkdv.options["num_warps"]) == (128, 64, 8)


def test_a_backward_search_starts_at_the_plan_the_op_would_pick():
    """The backward space's knobs (``KV_N``, …) are no kernel's constexpr names: the pattern search starts from
    the plan the op chose (``runtime.plans.observed``), here the sm_90 plan for head dim 64 in fp16."""
    from kernelworks.ops.attention import backward
    from kernelworks.spec import registry
    from kernelworks.tune.engine import _start
    from kernelworks.tune.search import Grid

    spec = registry()["flash_attention"]
    case = next(c for c in spec.check_cases if "gpu" not in c.tags and c.dtype == torch.float16 and c["d"] <= 128)
    plan = backward.bwd_plan(max(16, case["d"]), False, (9, 0))
    own = {k: getattr(plan, k) for k in spec.bwd_configs[0]}
    start = _start(spec, case, Grid(spec.bwd_configs), (9, 0), "bwd")
    assert spec.bwd_configs[start - 1] == own


def test_a_backward_config_lost_on_autograds_thread_is_not_applied(monkeypatch, device):
    """The first GPU backward tunes: the forced plan never reached autograd's own thread, and every candidate
    timed the op's own plan. Here the backward runs in an empty context, as it did there: the tuner now says
    so (``not applied``) rather than timing the default under each config's name; with the caller's context
    (``runtime.context``) the configs apply."""
    import contextvars

    from kernelworks.runtime import context
    from kernelworks.spec import registry

    spec = registry()["flash_attention"]
    case = next(c for c in spec.check_cases if "gpu" not in c.tags and c.get("causal"))
    small = {**spec.bwd_configs[0], "KV_N": 32, "KV_M": 16, "kv_warps": 1, "kv_stages": 1, "Q_M": 32, "Q_N": 16,
             "q_warps": 1, "q_stages": 1}
    spec = dataclasses.replace(spec, bwd_configs=[small])

    def timer(fn):
        fn()
        return (1.0, 0.9, 1.1)

    def tried(**kw):
        res = tune_case(spec, case, mode="bwd", target=None, timer=timer, device=device, strategy="exhaustive", **kw)
        return [c.verdict for c in res.candidates[1:]]

    assert tried() == ["ok"]
    monkeypatch.setattr(context, "in_caller_context", lambda _forward, fn, *args: contextvars.Context().run(fn, *args))
    assert tried() == ["not applied"]


def test_a_provider_that_keeps_its_output_buffer_is_judged_on_its_values():
    """An honest provider writing into one buffer it keeps between calls: the verdict's later runs (the same
    inputs again, then other values) rewrite that buffer, so each run's outputs are copied as they come back.
    Without the copy every config read as wrong against the first truth."""
    kept: dict[tuple, torch.Tensor] = {}

    def relu_into_kept(x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=0, out=kept.setdefault((x.shape, x.dtype, x.device), torch.empty_like(x)))

    spec = OpSpec(name="kept_buffer", reference=torch.relu,
                  inputs=lambda case, device: {"x": torch.randn(4, 16, device=device)},
                  check_cases=[], bench_cases=[Case("b", {}, torch.float32)], cost=lambda case, mode: Cost(),
                  providers={"mine": Provider("mine", relu_into_kept)}, subject="mine",
                  configs=[{"K": 1}, {"K": 2}], configured=lambda config: contextlib.nullcontext())
    res = tune_case(spec, spec.bench_cases[0], timer=lambda fn: (fn(), 1.0, 1.0, 1.0)[1:],
                    device=torch.device("cpu"), target=None)  # no compile gate: the provider launches nothing
    assert [c.verdict for c in res.candidates] == ["ok", "ok", "ok"], [c.detail for c in res.candidates]


def test_the_cache_sees_an_edit_behind_a_partial_or_a_module():
    """The cache's source hash reads the file behind a ``functools.partial`` provider or an ``nn.Module``
    (it skipped both, so a kernel edited to be wrong still returned its cached winner)."""
    import functools

    from kernelworks.tune.cache import _defining_file

    assert _defining_file(functools.partial(_toy)) == __file__
    assert _defining_file(torch.nn.Linear(2, 2)).endswith("linear.py")
    assert _defining_file(print) is None  # a builtin: hashed by its name and torch's version


def test_a_spec_with_a_builtin_reference_has_a_stable_source_hash():
    """A builtin (``torch.sigmoid``) has no file: the hash must still be the same call to call, or every run
    misses the cache and stores one more entry."""
    import dataclasses

    from kernelworks.tune.cache import source_hash

    spec = dataclasses.replace(_spec("a"), reference=torch.sigmoid)
    assert source_hash(spec) == source_hash(spec)


def test_configs_that_all_compile_to_the_default_kernels_are_not_applied():
    """A user spec's ``configured`` hook that sets nothing the launch reads: every config compiles to the op's
    own kernels, so they are "not applied" instead of being timed and one of them cached as a winner."""
    from kernelworks.tune.engine import Candidate, _unapplied_configs

    class Gate:
        def __init__(self, keys):
            self.keys = keys

        def launches(self, config):
            return self.keys[repr(sorted(config.items()))]

    cands = [Candidate({}, "ok"), Candidate({"BLOCK": 64}, "ok"), Candidate({"BLOCK": 128}, "ok")]
    same = Gate({repr([]): ("k0",), repr([("BLOCK", 64)]): ("k0",), repr([("BLOCK", 128)]): ("k0",)})
    _unapplied_configs(cands, same)
    assert [c.verdict for c in cands] == ["ok", "not applied", "not applied"]
    cands = [Candidate({}, "ok"), Candidate({"BLOCK": 64}, "ok"), Candidate({"BLOCK": 128}, "ok")]
    one_equal = Gate({repr([]): ("k0",), repr([("BLOCK", 64)]): ("k0",), repr([("BLOCK", 128)]): ("k1",)})
    _unapplied_configs(cands, one_equal)  # one config equal to the op's own plan is normal
    assert [c.verdict for c in cands] == ["ok", "ok", "ok"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal without a GPU")
def test_tune_without_a_gpu_refuses_at_once_unless_given_a_timer():
    """It ran a GPU-sized case in the interpreter for minutes before the timer said there was no GPU; it also
    takes an op's name, as kernelworks.check and bench do."""
    import kernelworks

    with pytest.raises(RuntimeError, match="none is visible"):
        kernelworks.tune("matmul", ["llama3_8b-qkv-M64"])
    with pytest.raises(KeyError, match="no op named"):
        kernelworks.tune("no_such_op", timer=lambda fn: (1.0, 1.0, 1.0))
