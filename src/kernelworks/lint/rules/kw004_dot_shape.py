"""KW004: ``tl.dot`` on a 1-D operand, or with an inner dimension K below 16 (32 for 8-bit operands).

``tl.dot`` maps onto tensor-core MMA instructions: both operands must be 2-D (or 3-D batched) blocks and
K at least 16 (32 for int8/fp8); anything smaller fails to compile, on some Triton versions only for some
autotune configs. A dot product of two vectors is ``tl.sum(a * b)``.

K is known when the operand is built from ``tl.arange(0, K)`` or ``tl.zeros([.., K])`` with K a literal, or
a ``tl.constexpr`` whose value at a launch (or in an autotune config, or as its default) is a literal.

Bad::

    a = tl.load(a_ptr + offs_k)                         # 1-D
    b = tl.load(b_ptr + offs_k)
    s = tl.dot(a, b)                                    # KW004: use tl.sum(a * b)

    _mm_kernel[grid](a, b, c, M, N, K, BLOCK_K=8)       # KW004 at the tl.dot: K = 8 < 16

Good::

    a = tl.load(a_ptr + offs_m[:, None] * K + offs_k[None, :])   # [BLOCK_M, BLOCK_K], BLOCK_K >= 16
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.model import JitFunction
from kernelworks.lint.names import EIGHT_BIT
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.values import Extent, Val


def _literal_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


class DotShape(Rule):
    code = "KW004"
    severity = Severity.ERROR
    summary = "tl.dot on a 1-D operand or with K below 16 (32 for 8-bit)"
    hint = "use 2-D blocks with K >= 16 (32 for int8/fp8); a vector dot product is tl.sum(a * b)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            for _name, call in analysis.tl_calls(fn, "dot"):
                a = analysis.ev.eval(call_arg(call, 0, "input"), ctx)
                b = analysis.ev.eval(call_arg(call, 1, "other"), ctx)
                one_d = [label for label, v in (("first", a), ("second", b))
                         if v.shape is not None and len(v.shape) == 1]
                if one_d:
                    yield Hit(call, f"tl.dot on a 1-D block (the {' and '.join(one_d)} operand): tl.dot needs 2-D "
                                    "operands (tensor-core MMA)",
                              "for a vector dot product use tl.sum(a * b); for a matrix product give the "
                              "operands [M, K] and [K, N] shapes with [:, None] / [None, :]")
                    continue
                hit = self._small_k(analysis, fn, ctx, call, a, b)
                if hit is not None:
                    yield hit

    def _small_k(self, analysis: Analysis, fn: JitFunction, ctx: Ctx, call: ast.Call, a: Val, b: Val) -> Hit | None:
        eight_bit = a.dtype in EIGHT_BIT or b.dtype in EIGHT_BIT
        floor = 32 if eight_bit else 16
        extents: list[Extent] = []
        if a.shape is not None and len(a.shape) >= 2:
            extents.append(a.shape[-1])
        if b.shape is not None and len(b.shape) >= 2:
            extents.append(b.shape[-2])
        for extent in extents:
            for value, where in self._values(analysis, fn, extent):
                if value < floor:
                    bits = "8-bit operands need K >= 32" if eight_bit else "K must be >= 16"
                    return Hit(call, f"tl.dot with K = {value}{where}: {bits} for tensor-core MMA",
                               f"use a K block of at least {floor} (pad K, or mask the extra columns with other=0)")
        return None

    @staticmethod
    def _values(analysis: Analysis, fn: JitFunction, extent: Extent) -> list[tuple[int, str]]:
        if isinstance(extent, int):
            return [(extent, "")]
        if not isinstance(extent, str):
            return []
        out = []
        for value, launch in analysis.launch_values(fn, extent):
            v = _literal_int(value)
            if v is not None:
                where = f" ({extent}={v} at the launch on line {launch.call.lineno})" if launch else f" ({extent}={v})"
                out.append((v, where))
        return out
