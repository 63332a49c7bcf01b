"""KW010 (info): an fp32 ``tl.dot`` with no explicit ``input_precision``: on NVIDIA GPUs it runs in TF32,
which keeps 10 mantissa bits of each input — about 1e-3 relative error where fp32 gives 1e-7.

Often the right trade (it is what ``torch.backends.cuda.matmul.allow_tf32`` does), but a surprise when the
kernel is compared with an fp32 reference or feeds a numerically sensitive step. Say which one you want:
``input_precision="ieee"`` (exact fp32), ``"tf32"``, or ``"tf32x3"`` (near fp32, 3× the MMA work).

Flagged only when an operand is visibly fp32 (``.to(tl.float32)``, ``tl.zeros(..., tl.float32)``, an
fp32 ``tl.dot`` result or values derived from them) and neither ``input_precision=`` nor ``allow_tf32=``
is given. Operands loaded from pointers of unknown dtype are not flagged.

Bad::

    acc += tl.dot(a.to(tl.float32), b.to(tl.float32))         # KW010

Good::

    acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
"""

from __future__ import annotations

from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule


class ImplicitTF32(Rule):
    code = "KW010"
    severity = Severity.INFO
    summary = "fp32 tl.dot without input_precision= runs in TF32 (~1e-3 relative error)"
    hint = 'state the precision: input_precision="ieee" (exact), "tf32x3" or "tf32"'

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            for _name, call in analysis.tl_calls(fn, "dot"):
                if any(k.arg in ("input_precision", "allow_tf32") for k in call.keywords) or len(call.args) > 3:
                    continue
                operands = [analysis.ev.eval(call_arg(call, i, n), ctx) for i, n in ((0, "input"), (1, "other"))]
                if any(v.dtype == "fp32" for v in operands):
                    yield Hit(call, "tl.dot on fp32 operands without input_precision=: it runs in TF32 "
                                    "(10-bit mantissa inputs) on NVIDIA GPUs")
