"""KW009 (info): ``tl.atomic_add`` of floating-point values: the result depends on the order the programs
arrive in, so two runs give different bits (and a split-K or scatter-add gradient is not reproducible).

Fine when that is accepted; otherwise reduce deterministically (write partials, then a second kernel or a
``torch.sum``), or accumulate integers. Not flagged when the added value is visibly an integer (``1``,
``x.to(tl.int32)``, ``tl.full(..., 1, tl.int32)``).

Bad (nondeterministic)::

    tl.atomic_add(c_ptrs, acc, mask=c_mask)              # KW009: split-K partial sums in fp32

Good::

    tl.atomic_add(count_ptr + bins, 1, mask=valid)       # integer counts are exact in any order
"""

from __future__ import annotations

from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.names import INTS
from kernelworks.lint.rules.base import Hit, Rule


class FloatAtomicAdd(Rule):
    code = "KW009"
    severity = Severity.INFO
    summary = "tl.atomic_add on floating-point values: run-to-run nondeterministic results"
    hint = "accept it knowingly, or write partial results and reduce them in a fixed order"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            for _name, call in analysis.tl_calls(fn, "atomic_add"):
                val = analysis.ev.eval(call_arg(call, 1, "val"), ctx)
                if val.dtype in INTS:
                    continue
                yield Hit(call, "tl.atomic_add of a value that is not visibly an integer: floating-point atomics "
                                "sum in arrival order, so results differ from run to run")
