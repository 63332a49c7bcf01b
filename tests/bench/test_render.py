"""Results files, BENCHMARKS.md and plots from synthetic records (no GPU needed)."""

from __future__ import annotations

import json

from kernelworks.bench.engine import BenchRecord
from kernelworks.bench.render import bench_table, op_markdown, render
from kernelworks.bench.results import gpu_slug, save

ENV = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11", "triton": "3.6.0", "commit": "abc", "date": "d",
       "ceilings": {"source": "measured", "bandwidth_gbs": 3000.0, "tflops": {"bf16": 700.0}}}


def _records():
    out = []
    for cols in (256, 1024):
        for prov, ms in (("kernelworks", 0.1), ("torch", 0.2), ("liger", None)):
            status = "ok" if ms else "skipped: liger_kernel is not installed"
            out.append(BenchRecord("softmax", f"sweep{cols}-bf16", {"cols": cols}, "bf16", "fwd", prov, status,
                                   median_ms=ms, gbs=1000 / (ms or 1), tflops=0.1, pct_sol=50.0,
                                   sweep="cols"))
    out.append(BenchRecord("softmax", "8k-bf16", {"rows": 8192}, "bf16", "fwd", "kernelworks", "ok",
                           median_ms=0.05, gbs=2800.0, tflops=0.1, pct_sol=93.0))
    return out


def test_speedup_columns():
    table = bench_table(_records())
    line = next(ln for ln in table.splitlines() if "sweep256" in ln and " torch " in ln)
    assert " 2 " in line + " "  # kernelworks is 0.2 / 0.1 = 2× torch
    md = op_markdown({"op": "softmax", "records": [r.as_dict() for r in _records()]})
    assert "| sweep256-bf16 | 100 (10000) | 200 (5000) | skipped | 2 |" in md


def test_save_render_and_plot(tmp_path):
    root = tmp_path / "results"
    path = save(_records(), "softmax", ENV, root)
    assert path == root / "h100-80gb-hbm3" / "softmax.json"
    assert json.loads(path.read_text())["environment"]["gpu"] == ENV["gpu"]
    md = render(root, tmp_path / "BENCHMARKS.md", tmp_path / "plots")
    text = md.read_text()
    assert "## NVIDIA H100 80GB HBM3" in text and "### softmax" in text
    pngs = sorted(p.name for p in (tmp_path / "plots" / "h100-80gb-hbm3").glob("*.png"))
    assert pngs == ["softmax-fwd-sweep.png", "softmax-fwd.png"]
    assert "plots/h100-80gb-hbm3/softmax-fwd-sweep.png" in text


def test_save_merge_keeps_unmeasured_cases_with_their_run(tmp_path):
    """A ``--case`` run replaces its case's rows and keeps the rest, tagged with the run that measured them."""
    root = tmp_path / "results"
    save(_records(), "softmax", ENV, root)
    again = [BenchRecord("softmax", "8k-bf16", {"rows": 8192}, "bf16", "fwd", "kernelworks", "ok",
                         median_ms=0.04, gbs=3000.0, tflops=0.1, pct_sol=99.0)]
    path = save(again, "softmax", {**ENV, "commit": "new", "date": "d2"}, root, merge=True)
    recs = json.loads(path.read_text())["records"]
    assert len(recs) == len(_records())
    eight = [r for r in recs if r["case"] == "8k-bf16"]
    assert [r["median_ms"] for r in eight] == [0.04] and "run" not in eight[0]
    assert all(r["run"] == {"commit": "abc", "date": "d"} for r in recs if r["case"] != "8k-bf16")
    md = op_markdown(json.loads(path.read_text()))
    assert "Measured d2 at commit new; some cases d at abc." in md


def test_gpu_slug():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert gpu_slug(None) == "cpu"


def test_step_mode_shows_peak_memory():
    recs = [BenchRecord("cross_entropy", "v-bf16", {}, "bf16", "fwd+bwd", prov, "ok", median_ms=ms, gbs=100.0,
                        tflops=0.1, pct_sol=10.0, peak_mb=mb)
            for prov, ms, mb in (("kernelworks", 1.0, 250.0), ("torch", 3.0, 4200.0))]
    table = bench_table(recs)
    assert "peak MB" in table and "4200" in table and "250" in table
    md = op_markdown({"op": "cross_entropy", "records": [r.as_dict() for r in recs]})
    assert "| v-bf16 | 1000 (100; 250 MB) | 3000 (100; 4200 MB) | 3 |" in md


def test_bench_modes_add_the_step_only_when_asked():
    from kernelworks.spec import STEP, load_spec

    assert STEP in load_spec("cross_entropy").bench_modes
    assert load_spec("softmax").bench_modes == ("fwd", "bwd")


def test_a_figure_beyond_speed_of_light_is_dropped_and_flagged():
    """No kernel beats its roofline: above the limit the % is the cost model's error, so the record keeps its
    times and rates but no pct_sol, and says why."""
    import warnings

    from kernelworks.bench.engine import SOL_LIMIT_PCT, BenchRecord, flag_beyond_speed_of_light

    def record(pct: float) -> BenchRecord:
        return BenchRecord("cross_entropy", "32000x8192-bf16", {}, "bf16", "fwd+bwd", "kernelworks", "ok",
                           median_ms=1.0, gbs=3900.0, pct_sol=pct, bound="memory")

    assert flag_beyond_speed_of_light(record(SOL_LIMIT_PCT - 1)).pct_sol == SOL_LIMIT_PCT - 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flagged = flag_beyond_speed_of_light(record(131.0))
    assert flagged.pct_sol is None and flagged.gbs == 3900.0
    assert "131% of speed of light" in flagged.cost_model and "bytes" in flagged.cost_model
    assert len(caught) == 1


def test_loss_step_costs_what_its_forward_moves():
    """cross_entropy's forward writes the gradient, so a training step moves the forward's bytes, not the
    forward's plus a backward it does not need (the committed steps read 112-135% of speed of light)."""
    from kernelworks.bench.engine import step_cost
    from kernelworks.ops.cross_entropy.spec import CROSS_ENTROPY_SPEC as CE
    from kernelworks.spec import STEP

    case = next(c for c in CE.bench_cases if c.id.startswith("32000x8192"))
    assert step_cost(CE, case, STEP) == CE.cost(case, "fwd")
    assert step_cost(CE, case, STEP).bytes < CE.cost(case, "fwd").bytes + CE.cost(case, "bwd").bytes


def test_committed_results_are_rederived_without_touching_times():
    """rederive_speed_of_light recomputes % of speed of light from a record's median under today's cost
    model: the committed cross_entropy step at 131% (bytes of a backward the step does not run) comes back
    at half that, its time unchanged."""
    from kernelworks.bench.results import rederive_speed_of_light
    from kernelworks.ops.cross_entropy.spec import CROSS_ENTROPY_SPEC as CE

    case = next(c for c in CE.bench_cases if c.id.startswith("32000x8192"))
    fwd_bytes = CE.cost(case, "fwd").bytes
    ms = 2 * fwd_bytes / (3000e9 * 1.31) * 1e3  # what the old model (forward + backward bytes) called 131%
    doc = {"op": "cross_entropy", "environment": {"gpu": "NVIDIA H100 80GB HBM3", "ceilings": {
        "source": "measured", "bandwidth_gbs": 3000.0, "tflops": {"bf16": 740.0}}},
        "records": [{"op": "cross_entropy", "case": case.id, "params": {}, "dtype": "bf16", "mode": "fwd+bwd",
                     "provider": "kernelworks", "status": "ok", "median_ms": ms, "pct_sol": 131.0}]}
    assert rederive_speed_of_light(doc) == 1
    record = doc["records"][0]
    assert record["median_ms"] == ms and abs(record["pct_sol"] - 65.5) < 0.1 and record["cost_model"] is None
    assert doc["environment"]["ceilings"]["tflops"]["bf16"] == 740.0  # measured rates kept as recorded
    assert doc["environment"]["ceilings"]["roofline_tflops"]["bf16"] == 989


def test_the_committed_results_render(tmp_path):
    """``kw render`` over the repository's ``benchmarks/results``: every ``<gpu>/<op>.json`` there is a bench
    results file (other results live one folder deeper: ``checks/``, ``tune/``, …), so README's command to
    regenerate BENCHMARKS.md keeps working."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    md = render(results, tmp_path / "BENCHMARKS.md", tmp_path / "plots", with_plots=False)
    assert "## NVIDIA H100 80GB HBM3" in md.read_text()
