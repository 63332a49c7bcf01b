"""Offsets as ``arange + shift`` and the bounds a mask puts on them (shared by KW014 and KW015).

:func:`shift` reads an offset expression as a ``tl.arange`` root plus a shift in the root's own units: the
integer literals and compile-time terms added to it (``offs + 1``, ``o_t - k`` with ``k`` a static loop
counter); runtime terms (the pointer, ``pid * BLOCK``, ``row * stride``) are the block's base, the same on
both sides, and are left out. :func:`comparisons` reads the comparisons a mask is built from as
``root + eff < bound`` (upper) or ``root + eff >= 0`` (lower), so an access is in bounds when its own shift
is at most the upper ``eff`` and at least the lower one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.values import Root

_MAX_DEPTH = 16


@dataclass(frozen=True)
class Shift:
    """``lit`` plus signed symbolic compile-time terms (``("k", -1)`` for ``- k``)."""

    lit: int = 0
    syms: frozenset[tuple[str, int]] = frozenset()

    def plus(self, lit: int = 0, sym: tuple[str, int] | None = None) -> Shift:
        syms = self.syms
        if sym is not None:
            text, sign = sym
            syms = syms - {(text, -sign)} if (text, -sign) in syms else syms | {sym}
        return Shift(self.lit + lit, syms)

    @property
    def negative(self) -> bool:
        """Can move the offsets below the root's own range (a negative literal or a subtracted term)."""
        return self.lit < 0 or any(sign < 0 for _t, sign in self.syms)


def shift(analysis: Analysis, node: ast.AST | None, ctx: Ctx, root: int, depth: int = 0) -> tuple[Shift, bool] | None:
    """``node`` as ``root + shift``: the shift and whether it was scaled on the way (``(offs + 1) * stride``
    keeps the shift in the root's units; terms added after a scaling are not shifts of the root).
    ``None`` when ``node`` does not hold the root exactly once as a sum (``%``, ``tl.where``, helpers)."""
    if node is None or depth > _MAX_DEPTH:
        return None
    if isinstance(node, ast.Call):
        if id(node) == root:
            return Shift(), False
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "to"
                and analysis.imports.qualname(node.func) is None):
            return shift(analysis, node.func.value, ctx, root, depth + 1)
        if analysis.imports.is_tl(node.func, "cast", "multiple_of", "max_contiguous") and node.args:
            return shift(analysis, node.args[0], ctx, root, depth + 1)
        return None
    if isinstance(node, ast.Subscript):
        return shift(analysis, node.value, ctx, root, depth + 1)
    if isinstance(node, ast.Name):
        defs, complete = ctx.flow.reaching(node.id, node)
        if not complete:
            if defs or ctx.bindings is None or node.id not in ctx.bindings:
                return None
            arg, caller = ctx.bindings[node.id]
            return shift(analysis, arg, caller, root, depth + 1)
        found = {shift(analysis, d.value, ctx, root, depth + 1) if d.kind == "assign" else None for d in defs}
        return found.pop() if len(found) == 1 else None
    if isinstance(node, ast.BinOp):
        has = [root in analysis.ev.eval(side, ctx).roots for side in (node.left, node.right)]
        if has.count(True) != 1:
            return None
        inner, other = (node.left, node.right) if has[0] else (node.right, node.left)
        got = shift(analysis, inner, ctx, root, depth + 1)
        if got is None:
            return None
        s, scaled = got
        if isinstance(node.op, ast.Mult):
            return s, scaled or not (isinstance(other, ast.Constant) and other.value == 1)
        if not isinstance(node.op, (ast.Add, ast.Sub)) or (isinstance(node.op, ast.Sub) and not has[0]):
            return None
        sign = 1 if isinstance(node.op, ast.Add) else -1
        v = analysis.ev.eval(other, ctx)
        if scaled:
            return s, scaled  # a term in other units
        if v.roots or not v.const:
            return s.plus(lit=sign * _literals(other)), scaled  # the block's base: only its literal part counts
        if isinstance(other, ast.Constant) and isinstance(other.value, int) and not isinstance(other.value, bool):
            return s.plus(lit=sign * other.value), scaled
        if (isinstance(other, ast.UnaryOp) and isinstance(other.op, ast.USub)
                and isinstance(other.operand, ast.Constant) and isinstance(other.operand.value, int)):
            return s.plus(lit=-sign * int(other.operand.value)), scaled
        return s.plus(sym=(ast.unparse(other), sign)), scaled
    return None


def _literals(node: ast.expr) -> int:
    """The integer literals a sum adds at its top level (``1 + pid * BLOCK`` → 1)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        sign = 1 if isinstance(node.op, ast.Add) else -1
        return _literals(node.left) + sign * _literals(node.right)
    return 0


@dataclass(frozen=True)
class Bound:
    """One comparison of a root in a mask: ``root + eff < bound`` (``upper``) or ``root + eff >= 0``."""

    root: Root
    upper: bool
    eff: Shift
    bound: ast.expr | None
    """The bound without its literal part (``n`` of ``n - 1``); ``None`` for a literal bound."""
    ctx: Ctx
    compare: ast.Compare


def _literal_part(node: ast.expr) -> tuple[ast.expr | None, int]:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return None, node.value
    if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
            and isinstance(node.right, ast.Constant) and isinstance(node.right.value, int)):
        return node.left, node.right.value if isinstance(node.op, ast.Add) else -node.right.value
    return node, 0


def comparisons(analysis: Analysis, mask: ast.AST, ctx: Ctx) -> Iterator[Bound]:
    """The bounds the comparisons ``mask`` is built from put on each root (through names and helpers)."""
    for node, c in analysis.reach(mask, ctx):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
            continue
        yield from compare_bounds(analysis, node, c)


def compare_bounds(analysis: Analysis, node: ast.Compare, c: Ctx) -> Iterator[Bound]:
    op = node.ops[0]
    left, right = node.left, node.comparators[0]
    lv, rv = analysis.ev.eval(left, c), analysis.ev.eval(right, c)
    for side, other, sv, ov, less in ((left, right, lv, rv, isinstance(op, (ast.Lt, ast.LtE))),
                                      (right, left, rv, lv, isinstance(op, (ast.Gt, ast.GtE)))):
        if not sv.roots or ov.roots:
            continue
        strict = isinstance(op, (ast.Lt, ast.Gt))
        core, lit = _literal_part(other)
        for key, root in sv.roots.items():
            got = shift(analysis, side, c, key)
            if got is None:
                continue
            s = got[0].plus(lit=-lit)
            # upper: root + s < B (or <= B: root + s - 1 < B); lower: root + s >= B (> B: root + s - 1 >= B)
            eff = s if strict == less else s.plus(lit=-1)
            yield Bound(root, less, eff, core, c, node)


def matching(bounds: list[Bound], root: Root) -> list[Bound]:
    """The bounds on ``root`` itself or on an identical arange moved the same way."""
    return [b for b in bounds if b.root.node is root.node or (b.root.sig == root.sig and b.root.tiled == root.tiled)]


def access_mask(call: ast.Call, kind: str) -> ast.expr | None:
    """The mask argument of ``tl.load``/``tl.store``/``tl.atomic_*``."""
    mask = call_arg(call, 1 if kind == "load" else 2, "mask")
    if isinstance(mask, ast.Constant) and mask.value in (None, True):
        return None
    return mask


ACCESSES = ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
            "atomic_xchg")
"""Masked accesses whose pointer offsets a mask can bound."""


@dataclass(frozen=True)
class Checked:
    """One root of one masked access: its shift and the mask's upper and lower bounds on it."""

    call: ast.Call
    kind: str
    root: Root
    shift: Shift
    upper: list[Bound]
    lower: list[Bound]
    bases: set[str]


def masked_accesses(analysis: Analysis) -> Iterator[Checked]:
    """Every root of every masked load/store/atomic of the module whose shift can be read."""
    for fn in analysis.functions:
        ctx = analysis.ctx(fn)
        for kind, call in analysis.tl_calls(fn, *ACCESSES):
            mask = access_mask(call, kind)
            ptr = call_arg(call, 0, "pointer")
            if mask is None or ptr is None:
                continue
            pv = analysis.ev.eval(ptr, ctx)
            if pv.blockptr or not pv.roots:
                continue
            bounds = list(comparisons(analysis, mask, ctx))
            for key, root in pv.roots.items():
                got = shift(analysis, ptr, ctx, key)
                if got is None or root.wrapped:
                    continue
                on = matching(bounds, root)
                yield Checked(call, kind, root, got[0], [b for b in on if b.upper], [b for b in on if not b.upper],
                              analysis.bases(ptr, ctx))
