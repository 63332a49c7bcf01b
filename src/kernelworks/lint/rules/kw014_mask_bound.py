"""KW014: a mask that bounds the offsets with the wrong size, or off by one.

A mask is only as good as its bound. Three ways it goes wrong while still looking like a mask:

* off by one: ``offs <= n`` (or ``offs < n + 1``) lets ``offs == n`` through, one element past the end; flagged
  when the bound is named like a size (``n``, ``n_cols``, ``seq_len``), not like a position (``pos``,
  ``last``, ``end``), which ``<=`` legitimately includes;
* another dimension's size: offsets moved along grid axis 1, which the launch sizes with ``cdiv(N, BLOCK_N)``,
  compared with ``M`` — the size of axis 0 (a copy-pasted ``offs_n < M``);
* a size the block was not made for: the block is ``triton.next_power_of_2(E)`` at the launch and the same
  offsets are compared with ``E`` in one mask and with a different, not visibly smaller bound in another
  (``cols < head_dim`` for a table of ``head_dim // 2`` columns).

Bad::

    mask = offsets <= n_elements                        # KW014: off by one
    b = tl.load(bias_ptr + offs_n, mask=offs_n < M)     # KW014: offs_n spans N (grid axis 1)

Good::

    mask = offsets < n_elements
    b = tl.load(bias_ptr + offs_n, mask=offs_n < N)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx
from kernelworks.lint.findings import Severity
from kernelworks.lint.masks import Bound, compare_bounds, masked_accesses
from kernelworks.lint.model import JitFunction
from kernelworks.lint.names import SIZE_NAME
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.rules.kw001_unmasked import UnmaskedAccess

_POSITION = re.compile(r"pos|idx|index|last|cur|end|stop|^max|limit|upto|offset", re.IGNORECASE)
_MAX_RENDER = 6


def _sizes_by_axis(analysis: Analysis, fn: JitFunction) -> dict[int, set[str]] | None:
    """Grid axis → the kernel's parameters its launch entries are computed from (``cdiv(N, BLOCK_N)`` → N),
    when every launch's grid can be read and agrees."""
    out: dict[int, set[str]] | None = None
    for launch in fn.launches:
        entries = analysis.model.grid_entries(launch.grid, launch.host, launch.call)
        if entries is None:
            return None
        by_text = {}
        for param, arg in launch.args.items():
            value = analysis.model.resolve(arg, launch.host, launch.call)
            for text in {ast.unparse(arg), ast.unparse(value)}:
                by_text.setdefault(text, set()).add(param)
        axes: dict[int, set[str]] = {}
        for a, entry in enumerate(entries):
            texts = {ast.unparse(n) for n in ast.walk(entry) if isinstance(n, (ast.Name, ast.Attribute, ast.Call))}
            for n in ast.walk(entry):
                if isinstance(n, ast.Name):
                    texts.add(ast.unparse(analysis.model.resolve(n, launch.host, launch.call)))
            axes[a] = {p for t in texts for p in by_text.get(t, set()) if p not in fn.constexpr}
        if out is not None and out != axes:
            return None
        out = axes
    return out


class MaskBound(Rule):
    code = "KW014"
    severity = Severity.ERROR
    summary = "mask compares the offsets with the wrong bound (another dimension's size) or is off by one (<= n)"
    hint = "compare each offset with the size of its own dimension, strictly: mask = offs_n < N"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        seen: set[int] = set()
        for a in masked_accesses(analysis):
            s = a.shift
            loose = [u for u in a.upper if u.eff.syms == s.syms and u.eff.lit < s.lit]
            if s.lit <= 0 and a.upper and len(loose) == len(a.upper):
                u = loose[0]
                text = ast.unparse(u.bound) if u.bound is not None else ""
                if u.bound is not None and SIZE_NAME.search(text) and not _POSITION.search(text) \
                        and id(u.compare) not in seen:
                    seen.add(id(u.compare))
                    yield Hit(u.compare, f"`{ast.unparse(u.compare)}` lets the offsets reach `{text}` itself, one "
                                         f"past the last element of a dimension of size `{text}`",
                              f"use a strict bound: {ast.unparse(u.compare.left)} < {text}")
        for fn in analysis.functions:
            sizes = _sizes_by_axis(analysis, fn)
            padded = UnmaskedAccess._padded(analysis, fn)
            if not sizes and not padded:
                continue  # no launch evidence to judge a bound by
            ctx = analysis.ctx(fn)
            bounds = [b for node in ast.walk(fn.node) if isinstance(node, ast.Compare) and len(node.ops) == 1
                      and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                      for b in compare_bounds(analysis, node, ctx) if b.upper and b.bound is not None]
            if sizes:
                yield from self._other_axis(fn, sizes, bounds, seen)
            if padded:
                yield from self._other_size(analysis, fn, ctx, bounds, seen)

    @staticmethod
    def _other_axis(fn: JitFunction, sizes: dict[int, set[str]], bounds: list[Bound],
                    seen: set[int]) -> Iterator[Hit]:
        for b in bounds:
            if not (isinstance(b.bound, ast.Name) and b.bound.id in fn.params and len(b.root.axes) == 1):
                continue
            (axis,) = b.root.axes
            mine = sizes.get(axis, set())
            others = {a for a, ps in sizes.items() if a != axis and b.bound.id in ps}
            if mine and b.bound.id not in mine and others and id(b.compare) not in seen:
                seen.add(id(b.compare))
                right = ", ".join(sorted(mine))
                yield Hit(b.compare, f"`{ast.unparse(b.compare)}`: these offsets move along grid axis {axis}, which "
                                     f"the launch sizes by `{right}`, but are compared with `{b.bound.id}`, the size "
                                     f"of axis {min(others)}",
                          f"compare them with their own dimension: ... < {right}")

    def _other_size(self, analysis: Analysis, fn: JitFunction, ctx: Ctx, bounds: list[Bound],
                    seen: set[int]) -> Iterator[Hit]:
        """Offsets of a block rounded up from ``E`` compared with ``E`` in one place and with a different
        bound elsewhere."""
        by_root: dict[int, list[Bound]] = {}
        for b in bounds:
            by_root.setdefault(id(b.root.node), []).append(b)
        for group in by_root.values():
            end = group[0].root.node.args[1] if len(group[0].root.node.args) > 1 else None
            if not isinstance(end, ast.Name) or len({ast.unparse(b.bound) for b in group}) < 2:
                continue
            for value, launch in analysis.launch_values(fn, end.id):
                if launch is None or not (isinstance(value, ast.Call) and value.args
                                          and ast.unparse(value.func).endswith("next_power_of_2")):
                    continue
                sized = ast.unparse(analysis.model.resolve(value.args[0], launch.host, launch.call))
                rendered = [(b, self._render(b.bound, b.ctx, launch, 0)) for b in group]
                if not any(r == sized for _b, r in rendered):
                    continue
                for b, r in rendered:
                    if r is None or r == sized or self._smaller(b.bound, b.ctx, launch, sized) \
                            or id(b.compare) in seen:
                        continue
                    seen.add(id(b.compare))
                    yield Hit(b.compare, f"`{ast.unparse(b.compare)}`: the block `{end.id}` is sized for `{sized}` "
                                         f"(next_power_of_2 at line {launch.call.lineno}) and the same offsets are "
                                         f"compared with `{sized}` elsewhere, but here with `{r}`",
                              f"bound these offsets by the extent of the tensor they index ({sized}?)")

    def _render(self, node: ast.expr | None, ctx: Ctx, launch, depth: int) -> str | None:
        """A kernel expression in the launcher's terms (parameters replaced by the launch's arguments)."""
        if node is None or depth > _MAX_RENDER:
            return None
        if isinstance(node, ast.Name):
            defs, complete = ctx.flow.reaching(node.id, node)
            if complete and len(defs) == 1 and defs[0].kind == "assign":
                return self._render(defs[0].value, ctx, launch, depth + 1)
            if not defs and node.id in launch.args:
                return ast.unparse(launch.args[node.id])
            return None
        if isinstance(node, ast.Constant):
            return repr(node.value)
        if isinstance(node, ast.BinOp):
            left, right = self._render(node.left, ctx, launch, depth + 1), self._render(node.right, ctx, launch,
                                                                                         depth + 1)
            if left is None or right is None:
                return None
            return ast.unparse(ast.BinOp(ast.parse(left, mode="eval").body, node.op,
                                         ast.parse(right, mode="eval").body))
        return None

    def _smaller(self, node: ast.expr, ctx: Ctx, launch, sized: str) -> bool:
        """Visibly at most ``sized`` (``sized // 2``, ``sized - 1``): a stricter bound, not an overrun."""
        rendered = self._render(node, ctx, launch, 0)
        expr = ast.parse(rendered, mode="eval").body if rendered else None
        return (isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.FloorDiv, ast.Sub, ast.RShift))
                and ast.unparse(expr.left) == sized)
