"""Two `kw bench --save` results of one op, old against new: each kernelworks case's median and its ratio to
every baseline measured in the same run, so runs on different machines compare by ratios, not µs.

    python benchmarks/compare_results.py OLD.json NEW.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OURS = "kernelworks"


def _medians(path: Path) -> tuple[dict, dict]:
    doc = json.loads(path.read_text())
    return doc, {(r["case"], r["mode"], r["provider"]): r["median_ms"] for r in doc["records"]
                 if r.get("status") == "ok"}


def compare(old_path: Path, new_path: Path) -> str:
    """A Markdown table: case, mode, old and new µs, and per baseline the new ratio (baseline / ours) with its
    change against the old run's ratio."""
    old_doc, old = _medians(old_path)
    new_doc, new = _medians(new_path)
    baselines = sorted({p for _, _, p in new} - {OURS})
    lines = [f"{new_doc['op']}: old {old_doc['environment']['commit']}, new {new_doc['environment']['commit']}", "",
             "| case | mode | old µs | new µs | " + " | ".join(f"× {b} (change)" for b in baselines) + " |",
             "|---|---|---|---|" + "---|" * len(baselines)]
    for (case, mode, provider), t in sorted(new.items()):
        if provider != OURS:
            continue
        o = old.get((case, mode, OURS))
        cells = []
        for b in baselines:
            if (case, mode, b) in new and o and (case, mode, b) in old:
                now, before = new[(case, mode, b)] / t, old[(case, mode, b)] / o
                cells.append(f"{now:.3f} ({100 * (now / before - 1):+.1f}%)")
            else:
                cells.append("—")
        lines.append(f"| {case} | {mode} | {o * 1e3:.1f} | {t * 1e3:.1f} | " if o else f"| {case} | {mode} | — | "
                     f"{t * 1e3:.1f} | ")
        lines[-1] += " | ".join(cells) + " |"
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    args = ap.parse_args()
    print(compare(args.old, args.new))


if __name__ == "__main__":
    main()
