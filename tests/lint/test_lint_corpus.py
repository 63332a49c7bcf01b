"""Measured quality of ``kw lint`` on a corpus of real-world-style kernels.

Every file in ``corpus/`` starts with ``# expect: KW001`` (one or more codes, comma-separated) or
``# expect: none``. A bug counts as found when the file gets a finding with that code; a good file counts
as a false positive when it gets any finding. ``pytest -s`` prints both numbers.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelworks.lint import CODES, lint_paths

CORPUS = Path(__file__).parent / "corpus"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>.+)")


def _expected(path: Path) -> set[str]:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    m = _EXPECT.match(first)
    assert m, f"{path.name}: first line must be '# expect: KW### [, KW###]' or '# expect: none'"
    codes = m.group("codes").strip()
    return set() if codes == "none" else {c.strip() for c in codes.split(",")}


def _files() -> list[Path]:
    return sorted(CORPUS.rglob("*.py"))


def _measure() -> dict[str, object]:
    bugs = found = good = false_pos = 0
    missed: list[str] = []
    flagged: list[str] = []
    for path in _files():
        expected = _expected(path)
        got = {f.code for f in lint_paths([path])}
        if expected:
            bugs += len(expected)
            found += len(expected & got)
            missed += [f"{path.name}: {c}" for c in sorted(expected - got)]
        else:
            good += 1
            if got:
                false_pos += 1
                flagged.append(f"{path.name}: {sorted(got)}")
    return {"bugs": bugs, "found": found, "good": good, "false_pos": false_pos, "missed": missed,
            "flagged": flagged}


def test_corpus_is_big_enough_and_well_formed():
    files = _files()
    bad = [p for p in files if _expected(p)]
    good = [p for p in files if not _expected(p)]
    assert len(bad) >= 40 and len(good) >= 40, (len(bad), len(good))
    for p in bad:
        assert _expected(p) <= set(CODES), p.name
    per_rule = {c: sum(c in _expected(p) for p in bad) for c in CODES}
    assert all(n >= 3 for n in per_rule.values()), per_rule


def test_recall_and_false_positive_rate():
    m = _measure()
    recall = m["found"] / m["bugs"]
    fp_rate = m["false_pos"] / m["good"]
    print(f"\nkw lint corpus: recall {recall:.3f} ({m['found']}/{m['bugs']} bugs found with the right code), "
          f"false-positive rate {fp_rate:.3f} ({m['false_pos']}/{m['good']} good files flagged)")
    for line in m["missed"]:
        print(f"  missed   {line}")
    for line in m["flagged"]:
        print(f"  flagged  {line}")
    assert recall >= 0.90, m["missed"]
    assert fp_rate <= 0.05, m["flagged"]
