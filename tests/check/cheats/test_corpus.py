"""Recall and false positives of ``kw check --adversarial`` over the CPU corpus (``pytest -s`` prints both,
entry by entry): recall ≥ 0.95, every cheat caught by one of the checks it names, no honest provider flagged
(a crash counts as flagged), no cheat caught only by crashing; and plain ``kw check`` (its two default
probes, no ``--adversarial``) catches every cheat that names the checklist or one of those probes."""

from __future__ import annotations

import functools

import pytest

from kernelworks.check import run_check

from .corpus import CATCHERS, CHEATS, ENTRIES, HONEST, Entry

_PROBES = {"fresh values in the same tensors": "fresh values"}


def catcher(problem: str) -> str:
    """Which check a problem line comes from: a name of CATCHERS, or ``raised`` (the provider crashed)."""
    if problem.startswith("adversarial ("):
        name = problem[len("adversarial ("):problem.index(")")]
        return _PROBES.get(name, name)
    return "raised" if problem.startswith(("raised", "adversarial probe")) else "plain"


@functools.cache
def verdict(name: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """(every check that flagged the entry, ``raised`` included; their problem lines), over all its cases."""
    entry = next(e for e in ENTRIES if e.name == name)
    flagged: set[str] = set()
    lines: list[str] = []
    for r in run_check(entry.spec(), adversarial=True):
        failed = [c for c in r.comparisons if not c.passed]
        flagged |= {"plain"} if failed else set()
        lines += [f"{r.case.id}: {c.output}: {c.problem}" for c in failed]
        for p in r.problems:
            flagged.add(catcher(p))
            lines.append(f"{r.case.id}: {p}")
        if r.skipped:
            flagged.add("raised")
            lines.append(f"{r.case.id}: skipped: {r.skipped}")
    return frozenset(flagged), tuple(lines)


def caught(entry: Entry) -> set[str]:
    """The checks of CATCHERS that caught ``entry``."""
    return set(verdict(entry.name)[0]) & set(CATCHERS)


def test_the_corpus_is_as_large_as_the_issue_asks():
    from .gpu_corpus import GPU_CHEATS, GPU_HONEST

    cheats, honest = CHEATS + GPU_CHEATS, HONEST + GPU_HONEST
    assert len(cheats) >= 25 and len(honest) >= 25
    assert len({e.kind for e in cheats}) >= 8
    assert all(e.by and set(e.by) <= set(CATCHERS) for e in cheats)
    assert len({e.name for e in cheats + honest}) == len(cheats + honest)


def test_recall_and_false_positives():
    hits = [e for e in CHEATS if caught(e)]
    flagged = [e for e in HONEST if verdict(e.name)[0]]
    recall, false_pos = len(hits) / len(CHEATS), len(flagged) / len(HONEST)
    print(f"\nkw check --adversarial corpus (CPU): recall {len(hits)}/{len(CHEATS)} = {recall:.2f}, "
          f"false positives {len(flagged)}/{len(HONEST)} = {false_pos:.2f}")
    for e in CHEATS:
        print(f"  {'caught' if e in hits else 'MISSED':6s}  {e.name:38s} {e.kind:20s} "
              f"by {', '.join(sorted(caught(e))) or '-'} (names {', '.join(e.by)})")
    for e in flagged:
        print(f"  FLAGGED honest {e.name}: {verdict(e.name)[1][:2]}")
    assert recall >= 0.95, [e.name for e in CHEATS if e not in hits]
    assert not flagged, {e.name: verdict(e.name)[1][:2] for e in flagged}


@pytest.mark.parametrize("entry", CHEATS, ids=lambda e: e.name)
def test_each_cheat_is_caught_by_a_check_it_names(entry: Entry):
    flagged, lines = verdict(entry.name)
    assert "raised" not in flagged, lines  # a crash is a broken entry, not a catch
    assert caught(entry) & set(entry.by), f"caught by {sorted(caught(entry)) or 'nothing'}, want one of " \
                                          f"{entry.by}: {lines[:3]}"


@pytest.mark.parametrize("entry", HONEST, ids=lambda e: e.name)
def test_each_honest_provider_passes(entry: Entry):
    flagged, lines = verdict(entry.name)
    assert not flagged, lines


DEFAULT_CATCHERS = {"plain", "fresh values", "fresh tensors"}
"""What plain ``kw check`` runs: the fixed-input checklist and the two default probes."""


@pytest.mark.parametrize("entry", [e for e in CHEATS if DEFAULT_CATCHERS & set(e.by)], ids=lambda e: e.name)
def test_plain_kw_check_catches_each_cheat_its_default_probes_name(entry: Entry):
    """Without ``adversarial``: a cheat that the checklist or a default probe must catch fails, by one of those."""
    results = run_check(entry.spec())
    lines = [p for r in results for p in r.problems] + [f"{c.output}: {c.problem}" for r in results
                                                          for c in r.comparisons if not c.passed]
    assert not all(r.passed for r in results), "passed plain kw check"
    flagged = {catcher(p) for r in results for p in r.problems} | \
              ({"plain"} if any(not c.passed for r in results for c in r.comparisons) else set())
    assert flagged & set(entry.by) & DEFAULT_CATCHERS and "raised" not in flagged, lines[:3]
    assert not flagged - DEFAULT_CATCHERS, lines[:3]  # the other probes did not run
