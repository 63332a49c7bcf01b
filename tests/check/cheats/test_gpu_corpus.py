"""Recall and false positives of ``kw bench``'s timing probes over the GPU corpus (``pytest -s`` prints
both): every cheat (side stream, thread, lazy result) recorded ``suspect`` by the probe it names, every
honest provider ``ok``. GPU only."""

from __future__ import annotations

import functools

import pytest

from .corpus import CHEATS
from .gpu_corpus import GPU_CHEATS, GPU_HONEST
from .test_corpus import caught as caught_on_cpu

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:kw bench")]

_PROBES = {"work outside the timed stream": "outside stream", "lazy result": "lazy result"}


@functools.cache
def bench_verdict(name: str) -> tuple[frozenset[str], str]:
    """(the probes that flagged the entry — or ``wrong``/``error``/``skipped`` — and the record's status)."""
    from kernelworks.bench import run_bench

    entry = next(e for e in GPU_CHEATS + GPU_HONEST if e.name == name)
    (rec,) = run_bench(entry.spec(), providers=["p"], modes=["fwd"], progress=False, warmup_ms=5.0, rep_ms=20.0)
    if rec.status == "ok":
        return frozenset(), rec.status
    if rec.status.startswith("suspect"):
        return frozenset(v for k, v in _PROBES.items() if k in rec.status), rec.status
    return frozenset({rec.status.split(":")[0]}), rec.status


def test_gpu_recall_and_false_positives():
    hits = [e for e in GPU_CHEATS if bench_verdict(e.name)[0] & {"outside stream", "lazy result"}]
    flagged = [e for e in GPU_HONEST if bench_verdict(e.name)[0]]
    recall = len(hits) / len(GPU_CHEATS)
    print(f"\nkw bench probes corpus (GPU): recall {len(hits)}/{len(GPU_CHEATS)} = {recall:.2f}, "
          f"false positives {len(flagged)}/{len(GPU_HONEST)}")
    for e in GPU_CHEATS + GPU_HONEST:
        print(f"  {'honest' if e.honest else 'cheat':6s} {e.name:32s} {bench_verdict(e.name)[1][:220]}")
    total = sum(bool(caught_on_cpu(e)) for e in CHEATS) + len(hits)
    print(f"whole corpus: recall {total}/{len(CHEATS) + len(GPU_CHEATS)}")
    assert recall >= 0.95, [e.name for e in GPU_CHEATS if e not in hits]
    assert not flagged, {e.name: bench_verdict(e.name)[1] for e in flagged}


@pytest.mark.parametrize("entry", GPU_CHEATS, ids=lambda e: e.name)
def test_each_gpu_cheat_is_caught_by_the_probe_it_names(entry):
    found, status = bench_verdict(entry.name)
    assert found & set(entry.by), status


@pytest.mark.parametrize("entry", GPU_HONEST, ids=lambda e: e.name)
def test_each_honest_gpu_provider_is_ok(entry):
    found, status = bench_verdict(entry.name)
    assert not found, status
