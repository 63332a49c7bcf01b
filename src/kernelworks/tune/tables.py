"""``kw tune --write``: a tuning run's winners into the op's shipped per-GPU table.

Each winner goes under the op's shape bucket of its case, which is learnt by running the op's launcher on
the case with the launches captured (nothing runs) and the table lookups recorded
(:func:`kernelworks.runtime.tuned.recording`), so the writer never restates the op's bucket rule. An entry
carries the config, the triton version and the source hash it was measured with (the op ignores it once
either changes), the case, the winner's and the op's own time, the date and the commit.

When the op's own choice wins, nothing new is written: a fresh entry for the bucket stays (it *was* the
op's own choice in that run), a stale one is removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import triton

from kernelworks.runtime import tuned as tuned_rt
from kernelworks.spec import Case, OpSpec
from kernelworks.tune.engine import CaseTuning


def _case(spec: OpSpec, case_id: str) -> Case:
    for c in (*spec.bench_cases, *spec.check_cases):
        if c.id == case_id:
            return c
    raise KeyError(f"spec {spec.name!r} has no case {case_id!r}")


def buckets(spec: OpSpec, case: Case, capability: tuple[int, int] = (9, 0)) -> list[str]:
    """The buckets of ``spec.tuned`` that one call of the op on ``case`` looks up (planned for a GPU of
    ``capability``)."""
    from kernelworks.inspect.capture import capture_op

    with tuned_rt.recording() as asked:
        capture_op(spec, case, capability=capability)
    return list(dict.fromkeys(bucket for table, bucket in asked if table is spec.tuned))


def write(spec: OpSpec, results: Sequence[CaseTuning], *, gpu: str, triton_version: str | None = None,
          commit: str | None = None, date: str | None = None, capability: tuple[int, int] = (9, 0)) -> Path:
    """Merge the winners of ``results`` (runs on the GPU named ``gpu``, with ``triton_version``, by default
    the running one) into ``spec.tuned``'s table for that GPU; returns the file."""
    table = spec.tuned
    if table is None:
        raise ValueError(f"spec {spec.name!r} has no shipped table (`tuned`): its winners are only cached")
    path = table.path(gpu)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        data = {}
    data["gpu"] = gpu
    entries = data.setdefault("entries", {}).setdefault(table.op, {})
    for r in results:
        if r.winner is None:
            continue
        for bucket in buckets(spec, _case(spec, r.case), capability):
            if not r.winner:  # the op's own choice won
                old = entries.get(bucket)
                if old is not None and not table.fresh(old):
                    del entries[bucket]
                continue
            won = next((c for c in r.candidates if c.config == r.winner), None)
            default = next((c for c in r.candidates if not c.config), None)
            entries[bucket] = {
                "config": r.winner, "case": r.case, "triton": triton_version or triton.__version__,
                "source": table.source_hash(), "ms": None if won is None else won.ms,
                "default_ms": None if default is None else default.ms, "reason": r.reason,
                "date": date or time.strftime("%Y-%m-%d"), "commit": commit,
            }
    data["entries"][table.op] = dict(sorted(entries.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    tuned_rt.clear_cache()
    return path
