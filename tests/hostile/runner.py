"""Subprocess entry: ``python -m <package>.runner FAMILY ID...`` runs those cases and prints one JSON line
as each starts and as each ends (a case that started and never ended killed the process)."""

from __future__ import annotations

import json
import sys

from .harness import run_case
from .table import family


def main(argv: list[str]) -> None:
    module, wanted = family(argv[0]), set(argv[1:])
    ops = {op.name: op for op in module.OPS}
    for case in module.CASES:
        if case.id not in wanted:
            continue
        print(json.dumps({"start": case.id}), flush=True)
        result = run_case(case, ops[case.op])
        print(json.dumps({"id": case.id, "cls": result.cls, "detail": result.detail}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
