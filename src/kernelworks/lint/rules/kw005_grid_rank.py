"""KW005: a launch grid with fewer axes than the ``tl.program_id`` axes the kernel reads, or an axis > 2.

With ``grid = (M,)`` every ``tl.program_id(1)`` is 0: the kernel silently computes only the first column
of tiles. CUDA grids have three axes (0, 1, 2); ``tl.program_id(3)`` does not exist. Helpers the kernel
calls are included (a ``_tile()`` helper reading ``tl.program_id(1)`` counts). Grids are read from tuple
literals, lambdas (``lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)``), grid functions and simple local
names; a grid that is built some other way is not checked.

Bad::

    pid_n = tl.program_id(1)
    ...
    _kernel[(triton.cdiv(M, BLOCK_M),)](...)        # KW005: grid has 1 axis, kernel reads axis 1

Good::

    _kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](...)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule


class GridRank(Rule):
    code = "KW005"
    severity = Severity.ERROR
    summary = "launch grid rank does not cover the tl.program_id axes the kernel uses (or axis > 2)"
    hint = "give the grid one entry per program_id axis used (axis 0, 1, 2 at most)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            for _name, call in analysis.tl_calls(fn, "program_id", "num_programs"):
                axis = call_arg(call, 0, "axis")
                if isinstance(axis, ast.Constant) and isinstance(axis.value, int) and not 0 <= axis.value <= 2:
                    yield Hit(call, f"tl.program_id axis {axis.value}: launch grids have axes 0, 1 and 2 only",
                              "flatten extra dimensions into one axis (pid // n, pid % n)")
            used = analysis.max_axis(fn)
            if used is None:
                continue
            axis, where = used
            for launch in fn.launches:
                rank = analysis.model.grid_rank(launch.grid, launch.host, launch.call)
                if rank is not None and rank <= axis <= 2:
                    yield Hit(launch.call, f"launch grid of `{fn.name}` has {rank} ax{'is' if rank == 1 else 'es'} "
                                           f"but the kernel reads tl.program_id({axis}) (line {where.lineno}); "
                                           f"that id is always 0",
                              f"launch with a grid of {axis + 1} entries, e.g. "
                              f"({', '.join(['...'] * (axis + 1))})")
