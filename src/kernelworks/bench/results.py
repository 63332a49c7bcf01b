"""Benchmark results on disk: ``benchmarks/results/<gpu>/<op>.json`` with the run's provenance."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from kernelworks.bench.engine import BenchRecord
from kernelworks.hardware import Ceilings


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


def gpu_slug(name: str | None) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: the results folder name."""
    if not name:
        return "cpu"
    name = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


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


def load_all(root: Path) -> list[dict[str, Any]]:
    """Every results file under ``root`` (sorted by path)."""
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*.json"))]
