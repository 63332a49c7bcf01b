"""KW017: an atomic (``tl.atomic_add``/``max``/``min``/``xchg``/...) with no mask, run by lanes or programs
that lie past the data.

A masked-off lane of a load gets ``other=``, but an atomic without a mask still runs on every lane: a
histogram's ``tl.atomic_add(counts + expert, 1)`` counts the padding lanes into bin 0; a split-K
``tl.atomic_add(c_ptrs, acc)`` adds into rows and columns past ``M``/``N`` (memory that belongs to something
else); a per-program ``tl.atomic_xchg(table + pid, v)`` writes past the table when the grid is rounded up
beyond the data (``cdiv(n, 8) * 8`` programs). Flagged: an unmasked atomic whose offsets need a mask by
KW001's reasoning (a block moved over a rounded-up grid, or compared with a bound elsewhere); an unmasked
atomic on a block computed from a masked load (the masked-off lanes still take part); a scalar atomic
indexed by the program id, with no ``if pid < n`` guard, in a grid rounded past the data.

Bad::

    expert = tl.load(ids_ptr + offs, mask=offs < n, other=0)
    tl.atomic_add(counts_ptr + expert, 1)                     # KW017: lanes past n count expert 0

Good::

    tl.atomic_add(counts_ptr + expert, 1, mask=offs < n)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.masks import access_mask
from kernelworks.lint.model import JitFunction
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.rules.kw001_unmasked import UnmaskedAccess

_ATOMICS = ("atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg")


class UnmaskedAtomic(Rule):
    code = "KW017"
    severity = Severity.ERROR
    summary = "atomic without a mask on lanes or programs past the data (a padded block, an over-covering grid)"
    hint = "pass the access's mask to the atomic (mask=offs < n), or return early in programs past the data"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        kw001 = UnmaskedAccess()
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            evidence = kw001._compared(analysis, fn, ctx)
            padded = kw001._padded(analysis, fn)
            asserted = kw001._asserted(analysis, fn)
            sized = kw001._has_runtime_size(fn)
            for kind, call in analysis.tl_calls(fn, *_ATOMICS):
                ptr = call_arg(call, 0, "pointer")
                pv = analysis.ev.eval(ptr, ctx)
                if pv.blockptr:
                    continue
                if pv.roots:
                    hit = kw001._check_access(analysis, ctx, kind, call, evidence, padded, asserted, sized)
                    if hit is not None:
                        yield hit
                        continue
                if access_mask(call, kind) is not None:
                    continue
                load = self._masked_load(analysis, call, ctx) if pv.shape != () else None
                if load is not None:
                    yield Hit(call, f"tl.{kind} without a mask on a block computed from the masked load at line "
                                    f"{load.lineno}: the lanes that load masked off (they hold other=) still "
                                    "perform the atomic",
                              f"pass the load's mask: tl.{kind}(..., mask={ast.unparse(call_arg(load, 1, 'mask'))})")
                elif pv.pid and not pv.roots and not self._pid_guarded(analysis, fn, ctx, call):
                    grid = self._over_covering(analysis, fn, pv.axes)
                    if grid is not None:
                        yield Hit(call, f"tl.{kind} at a per-program slot (`{ast.unparse(ptr)}`) with no guard, but "
                                        f"the grid `{ast.unparse(grid)}` is rounded past the data: the extra "
                                        "programs write past the end",
                                  "return early when the program id is past the data (if pid >= n: return)")

    @staticmethod
    def _masked_load(analysis: Analysis, call: ast.Call, ctx: Ctx) -> ast.Call | None:
        """A masked ``tl.load`` of a moving block that the atomic's pointer or value is computed from."""
        for arg in (call_arg(call, 0, "pointer"), call_arg(call, 1, "val")):
            for node, c in analysis.reach(arg, ctx) if arg is not None else ():
                if not (isinstance(node, ast.Call) and analysis.imports.is_tl(node.func, "load")):
                    continue
                mask = access_mask(node, "load")
                if mask is None:
                    continue
                lp = analysis.ev.eval(call_arg(node, 0, "pointer"), c)
                if any(r.tiled and not r.wrapped for r in lp.roots.values()):
                    return node
        return None

    @staticmethod
    def _pid_guarded(analysis: Analysis, fn: JitFunction, ctx: Ctx, call: ast.Call) -> bool:
        """Inside ``if pid < n:`` or after ``if pid >= n: return``."""
        def compares_pid(test: ast.expr) -> bool:
            return any(isinstance(n, ast.Compare)
                       and any(analysis.ev.eval(x, ctx).pid for x in [n.left, *n.comparators])
                       for n in ast.walk(test))

        if any(compares_pid(t) for t in ctx.flow.branch_tests(call)):
            return True
        return any(isinstance(n, ast.If) and n.lineno < call.lineno and compares_pid(n.test)
                   and any(isinstance(s, ast.Return) for s in n.body) for n in ast.walk(fn.node))

    @staticmethod
    def _over_covering(analysis: Analysis, fn: JitFunction, axes: frozenset[int]) -> ast.expr | None:
        """A launch grid entry for one of ``axes`` that rounds past the data (``cdiv(n, 8) * 8``,
        ``next_power_of_2(n)``, ``max(n, 16)``)."""
        for launch in fn.launches:
            entries = analysis.model.grid_entries(launch.grid, launch.host, launch.call)
            if entries is None:
                continue
            for a in axes:
                if not 0 <= a < len(entries):
                    continue
                entry = analysis.model.resolve(entries[a], launch.host, launch.call)
                for n in ast.walk(entry):
                    name = ""
                    if isinstance(n, ast.Call):
                        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                    if name in ("next_power_of_2", "max"):
                        return entry
                    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and any(
                            analysis.model.rounds_up(x, launch.host, launch.call) for x in (n.left, n.right)):
                        return entry
        return None
