"""Benchmark results on disk: ``benchmarks/results/<gpu>/<op>.json`` with the run's provenance."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from kernelworks.bench.engine import BenchRecord
from kernelworks.hardware import Ceilings
from kernelworks.runtime.tuned import gpu_slug


def git_commit(cwd: Path | None = None) -> str:
    """The current commit (with ``-dirty`` when the tree has changes); ``KERNELWORKS_COMMIT`` when set
    (a copy of the tree with no ``.git``, as on a lent GPU machine), else ``unknown`` outside git."""
    if os.environ.get("KERNELWORKS_COMMIT"):
        return os.environ["KERNELWORKS_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(ceil: Ceilings | None) -> dict[str, Any]:
    """Provenance of a run: GPU, ceilings used, software versions, commit, date."""
    import triton

    env: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if ceil is not None:
        env["ceilings"] = {"source": ceil.source, "bandwidth_gbs": ceil.bandwidth_gbs, "tflops": ceil.tflops}
    try:
        from importlib.metadata import version

        import liger_kernel  # noqa: F401

        env["liger_kernel"] = version("liger-kernel")
    except Exception:
        env["liger_kernel"] = None
    return env


def save(records: Sequence[BenchRecord], op: str, env: dict[str, Any], root: Path, *, merge: bool = False) -> Path:
    """Write one op's records under ``root/<gpu>/<op>.json`` and return the path.

    merge: keep the file's records for the (case, mode) pairs this run did not measure (a ``--case`` or
    ``--mode`` run), each tagged ``run = {commit, date}`` of the run that measured it; a pair measured again
    is replaced whole. Ratios stay within one run: every provider of a pair is timed in the same run."""
    path = root / gpu_slug(env.get("gpu")) / f"{op}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [r.as_dict() for r in records]
    if merge and path.exists():
        old = json.loads(path.read_text())
        fresh = {(r["case"], r["mode"]) for r in rows}
        run = {k: old.get("environment", {}).get(k) for k in ("commit", "date")}
        kept = [{**r, "run": r.get("run", run)} for r in old.get("records", [])
                if (r["case"], r["mode"]) not in fresh]
        rows = kept + rows
    path.write_text(json.dumps({"op": op, "environment": env, "records": rows}, indent=1) + "\n")
    return path


_RECORD_KEYS = ("case", "mode", "provider", "status")


def load_all(root: Path) -> list[dict[str, Any]]:
    """Every results file ``root/<gpu>/<op>.json`` (sorted by path). Raises ``FileNotFoundError`` when ``root``
    is not a folder and ``ValueError`` naming the file that is not a results file (JSON with ``op``,
    ``environment`` and ``records``)."""
    if not root.is_dir():
        raise FileNotFoundError(f"no results folder {root}")
    docs = []
    for path in sorted(root.glob("*/*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise ValueError(f"{path}: not JSON ({e})") from e
        missing = [k for k in ("op", "environment", "records") if not isinstance(doc, dict) or k not in doc]
        if missing:
            raise ValueError(f"{path}: not a bench results file (no {', '.join(missing)}); other results belong "
                             "one folder deeper (checks/, tune/, ...)")
        for i, r in enumerate(doc["records"] if isinstance(doc["records"], list) else [None]):
            lacks = [k for k in _RECORD_KEYS if not isinstance(r, dict) or k not in r]
            if lacks:
                raise ValueError(f"{path}: record {i} is not a bench record (no {', '.join(lacks)})")
        docs.append(doc)
    return docs


def rederive_speed_of_light(doc: dict[str, Any]) -> int:
    """Recompute every timed record's TFLOP/s, GB/s, % of speed of light and bound in a results ``doc`` (in
    place) from its median and today's cost model and ceiling rules — the compute ceiling never below the
    datasheet peak of its dtype — dropping and flagging figures still beyond speed of light. The times are
    untouched; records whose case the spec no longer has keep their figures. Returns the records changed."""
    from kernelworks.bench.engine import BenchRecord, flag_beyond_speed_of_light, step_cost
    from kernelworks.bench.roofline import roofline
    from kernelworks.hardware import Ceilings, lookup, roofline_tflops
    from kernelworks.spec import load_spec

    spec = load_spec(doc["op"])
    cases = {c.id: c for c in (*spec.bench_cases, *spec.check_cases)}
    env = doc.get("environment", {})
    stored = env.get("ceilings") or {}
    gpu = lookup(env.get("gpu") or "")
    tflops = roofline_tflops(gpu.peak_tflops if gpu else {}, stored.get("tflops", {}))
    bandwidth = stored.get("bandwidth_gbs") or (gpu.mem_bandwidth_gbs if gpu else 0.0)
    ceil = Ceilings(env.get("gpu") or "?", bandwidth, tflops, stored.get("source", "datasheet"))
    if "ceilings" in env:  # the measured rates stay as recorded; the roofline's, beside them
        env["ceilings"]["roofline_tflops"] = tflops
    changed = 0
    fields = {f for f in BenchRecord.__dataclass_fields__}
    for r in doc["records"]:
        case = cases.get(r["case"])
        if case is None or r.get("status") != "ok" or not r.get("median_ms"):
            continue
        line = roofline(step_cost(spec, case, r["mode"]), r["median_ms"], ceil, case.dtype)
        rec = BenchRecord(**{k: v for k, v in r.items() if k in fields})
        rec.tflops, rec.gbs, rec.pct_sol, rec.bound, rec.cost_model = line.tflops, line.gbs, line.pct_sol, \
            line.bound, None
        flag_beyond_speed_of_light(rec)
        new = {**r, **{k: getattr(rec, k) for k in ("tflops", "gbs", "pct_sol", "bound", "cost_model")}}
        changed += new != r
        r.update(new)
    return changed
