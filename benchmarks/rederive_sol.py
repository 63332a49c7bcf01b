"""Re-derive the speed-of-light figures of committed `kw bench` results after a cost-model or ceiling fix.

    python benchmarks/rederive_sol.py benchmarks/results/h100-80gb-hbm3/*.json

Each record's measured times stay as they are; its TFLOP/s, GB/s, % of speed of light and bound are
recomputed from today's cost model and ceiling rules (``kernelworks.bench.results.rederive_speed_of_light``),
and a figure still beyond speed of light is dropped and flagged (``cost_model``). Files are rewritten in place.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from kernelworks.bench.results import rederive_speed_of_light


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.files:
        doc = json.loads(path.read_text())
        if "op" not in doc or "records" not in doc:
            continue
        with warnings.catch_warnings(record=True) as flagged:
            warnings.simplefilter("always")
            changed = rederive_speed_of_light(doc)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        top = max((r["pct_sol"] for r in doc["records"] if r.get("pct_sol") is not None), default=None)
        print(f"{path}: {changed} records re-derived, {len(flagged)} flagged beyond speed of light, "
              f"highest % of speed of light now {top:.0f}" if top is not None else f"{path}: {changed} re-derived")
        for w in flagged:
            print(f"  {w.message}")


if __name__ == "__main__":
    main()
