"""Every family's ops and cases, and the outcome of a case: run here, or — index cases — in its family's
subprocess (one per family: the interpreter's import takes ~2 s), where a dead process is a ``crash``."""

from __future__ import annotations

import functools
import importlib
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

from .harness import Case, Op, Outcome, run_case

FAMILIES = ("activation", "softmax", "norm", "loss", "gemm", "moe", "attention", "gated_delta", "rotary", "nn")
CASE_TIMEOUT_S = 20
"""A case running longer than this in the subprocess is taken as hung (the slowest takes ~2 s)."""


@functools.cache
def family(name: str):
    """The module ``cases_<name>``: its ``OPS`` and ``CASES``."""
    return importlib.import_module(f"{__package__}.cases_{name}")


@functools.cache
def ops() -> dict[str, Op]:
    return {op.name: op for f in FAMILIES for op in family(f).OPS}


@functools.cache
def cases() -> tuple[Case, ...]:
    out = tuple(c for f in FAMILIES for c in family(f).CASES)
    seen: set[str] = set()
    dupes = [c.id for c in out if c.id in seen or seen.add(c.id)]
    if dupes:
        raise ValueError(f"duplicate hostile case ids: {dupes}")
    return out


def family_of(case: Case) -> str:
    return ops()[case.op].family


def outcome(case: Case) -> Outcome:
    """The case's class: from its family's subprocess when ``case.isolate``, else run here."""
    if case.isolate:
        return isolated_outcomes(family_of(case))[case.id]
    return run_case(case, ops()[case.op])


def _python_path() -> str:
    """The directory from which this package imports under its current name (``hostile`` when pytest put
    tests/ on the path, ``tests.hostile`` from the repository root)."""
    base = Path(__file__).resolve().parent
    for _ in __package__.split("."):
        base = base.parent
    return os.pathsep.join([str(base), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def _run_until_death(name: str, ids: list[str], results: dict[str, Outcome]) -> tuple[str | None, str]:
    """Run ``ids`` in one subprocess, recording each finished case; returns ``(case it died in, how)`` or
    ``(None, "")`` when it finished them all. A case silent for :data:`CASE_TIMEOUT_S` is a hang."""
    cmd = [sys.executable, "-m", f"{__package__}.runner", name, *ids]
    env = {**os.environ, "PYTHONPATH": _python_path()}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        stderr_lines: list[str] = []
        threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True).start()
        started = None
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], CASE_TIMEOUT_S)
            if not ready:
                proc.kill()
                proc.wait()
                return started, f"hung: no result after {CASE_TIMEOUT_S} s"
            line = proc.stdout.readline()
            if not line:
                break
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                started = msg["start"]
            else:
                results[msg["id"]] = Outcome(msg["cls"], msg["detail"])
                started = None
        code = proc.wait()
    if started is None and code == 0:
        return None, ""
    tail = " | ".join(line.strip() for line in stderr_lines[-3:])
    return started, f"exit status {code}: {tail}"


@functools.cache
def isolated_outcomes(name: str) -> dict[str, Outcome]:
    """Run the family's isolated cases in a subprocess; after a death, go on in a fresh one."""
    pending = [c.id for c in family(name).CASES if c.isolate]
    results: dict[str, Outcome] = {}
    while pending:
        died_in, how = _run_until_death(name, pending, results)
        pending = [i for i in pending if i not in results]
        if not pending:
            break
        victim = died_in or pending[0]
        results[victim] = Outcome("crash", f"the process died in this case ({how})")
        pending.remove(victim)
    return results
