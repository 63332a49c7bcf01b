"""KW002: an accumulator kept in fp16/bf16 across a loop, or a low-precision ``tl.dot`` result accumulated.

Each ``+=`` rounds the running sum to 8 (bf16) or 11 (fp16) significant bits; over K/BLOCK_K steps of a
matmul, or a row of a reduction, the error grows with the loop length and small terms vanish entirely
once the sum is large. Accumulate in fp32 and cast once, at the store.

Flagged: ``acc = tl.zeros(..., dtype=tl.float16)`` (or ``.to(tl.bfloat16)``) then ``acc += ...``,
``acc = acc + ...`` or ``acc = tl.dot(a, b, acc)`` inside a ``for``/``while``; and a ``tl.dot(...,
out_dtype=tl.float16)`` (or ``tl.dot(...).to(tl.float16)``) added into a loop-carried accumulator.

Bad::

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc += tl.dot(a, b).to(tl.float16)         # KW002

Good::

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(a, b, acc)
    tl.store(c_ptrs, acc.to(tl.float16), mask=c_mask)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.names import LOW_FLOATS, dtype_kind
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.values import join

_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp8": "float8"}


def _self_update(st: ast.stmt, imports) -> tuple[str, ast.expr] | None:
    """``(name, added value)`` for ``acc += v``, ``acc = acc + v`` and ``acc = tl.dot(a, b, acc)``."""
    if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name) and isinstance(st.op, (ast.Add, ast.Sub)):
        return st.target.id, st.value
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return None
    name, value = st.targets[0].id, st.value
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)):
        for side, other in ((value.left, value.right), (value.right, value.left)):
            if isinstance(side, ast.Name) and side.id == name:
                return name, other
    if isinstance(value, ast.Call) and imports.is_tl(value.func, "dot"):
        acc = call_arg(value, 2, "acc")
        if isinstance(acc, ast.Name) and acc.id == name:
            return name, value
    return None


class LowPrecisionAccumulator(Rule):
    code = "KW002"
    severity = Severity.ERROR
    summary = "accumulator kept in fp16/bf16 across a loop (or a low-precision tl.dot result accumulated)"
    hint = "accumulate in tl.float32 (tl.zeros(..., dtype=tl.float32)) and cast once at the store"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            for st in ast.walk(fn.node):
                if not isinstance(st, (ast.Assign, ast.AugAssign)):
                    continue
                upd = _self_update(st, analysis.imports)
                if upd is None:
                    continue
                name, added = upd
                target = st.target if isinstance(st, ast.AugAssign) else st.targets[0]
                loops = ctx.flow.enclosing_loops(target)
                if not loops:
                    continue
                hit = self._low_init(analysis, ctx, name, loops[-1], st) or self._low_dot(analysis, ctx, added)
                if hit is not None:
                    yield hit

    @staticmethod
    def _low_init(analysis: Analysis, ctx: Ctx, name: str, loop: ast.stmt, st: ast.stmt) -> Hit | None:
        """The accumulator's value on entering the loop is visibly fp16/bf16."""
        at = loop.iter if isinstance(loop, ast.For) else loop.test
        defs, _complete = ctx.flow.reaching(name, at)
        vals = [analysis.ev.def_value(d, ctx) for d in defs if not d.self_update]
        if not vals:
            return None
        dtype = join(vals).dtype
        if dtype not in LOW_FLOATS:
            return None
        return Hit(st, f"`{name}` is a {_NAMES[dtype]} accumulator updated in a loop (line {loop.lineno}): "
                       "every step rounds the running sum to low precision",
                   f"create `{name}` with dtype=tl.float32 and cast once at the store")

    @staticmethod
    def _low_dot(analysis: Analysis, ctx: Ctx, added: ast.expr) -> Hit | None:
        """A ``tl.dot`` rounded to fp16/bf16 (``out_dtype=`` or ``.to()``) before being accumulated."""
        for node, _c in analysis.reach(added, ctx):
            if not isinstance(node, ast.Call):
                continue
            dot, low = None, None
            if analysis.imports.is_tl(node.func, "dot"):
                dot = node
                low = dtype_kind(analysis.imports, next((k.value for k in node.keywords if k.arg == "out_dtype"),
                                                        None))
            elif (isinstance(node.func, ast.Attribute) and node.func.attr == "to"
                  and isinstance(node.func.value, ast.Call) and analysis.imports.is_tl(node.func.value.func, "dot")):
                dot = node.func.value
                low = dtype_kind(analysis.imports, call_arg(node, 0, "dtype"))
            if dot is not None and low in LOW_FLOATS:
                return Hit(dot, f"tl.dot result rounded to {_NAMES[low]} before it is accumulated in a loop",
                           "let tl.dot accumulate in fp32: acc = tl.dot(a, b, acc) with an fp32 acc")
        return None
