"""KW001: a ``tl.load``/``tl.store`` whose offsets can run past a runtime bound, with no mask or a mask that
does not bound them.

An offset dimension needs a mask when its ``tl.arange`` block is moved over a runtime-sized dimension —
shifted by a program id (``pid * BLOCK + tl.arange(0, BLOCK)``), by a loop over a runtime range, or by a
pointer advanced in such a loop — or when the kernel itself shows the block is wider than the data (the
same offsets are compared with a runtime size elsewhere, or the block was rounded up with
``triton.next_power_of_2`` at the launch). A dimension is in bounds without a mask when it is wrapped
(``% M``, ``tl.minimum(offs, n - 1)``, ``tl.where(offs < n, offs, 0)``), built from compile-time constants
only, stated divisible (``tl.static_assert(N % BLOCK == 0)``), or accessed in a branch on an ``EVEN_*``-style
constexpr. Scalar accesses (``tl.load(bias + pid)``) and block pointers (``boundary_check``) are not checked.

Bad::

    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)                      # KW001: the last block reads past n

Good::

    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.masks import comparisons, matching
from kernelworks.lint.model import JitFunction
from kernelworks.lint.names import POINTER_NAME, SIZE_NAME, is_stride
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.values import Root, Val

_DIMENSION = re.compile(r"^[A-Z]$|^D[A-Z]?$|DIM|HEAD|HIDDEN|MODEL|FEAT|EMBED|VOCAB|^NUM_|^N_", re.IGNORECASE)
"""Names of a constexpr that is a whole dimension (``D``, ``HEAD_DIM``), not a block of one (``BLOCK_N``)."""
_GUARD_NAME = re.compile(r"EVEN|DIVIS|ALIGN|MASK|BOUND|PAD|FULL_TILE", re.IGNORECASE)


def _bound_name(root: Root) -> str | None:
    end = call_arg(root.node, 1, "end")
    return end.id if isinstance(end, ast.Name) else None


class UnmaskedAccess(Rule):
    code = "KW001"
    severity = Severity.ERROR
    summary = "load/store whose offsets can run past a runtime bound without a mask that bounds them"
    hint = "mask every runtime-sized dimension, e.g. mask=offs < n (and other= for loads)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            evidence = self._compared(analysis, fn, ctx)
            padded = self._padded(analysis, fn)
            asserted = self._asserted(analysis, fn)
            sized = self._has_runtime_size(fn)
            for name, call in analysis.tl_calls(fn, "load", "store"):
                hit = self._check_access(analysis, ctx, name, call, evidence, padded, asserted, sized)
                if hit is not None:
                    yield hit

    # ------------------------------------------------------------------------------------------ evidence

    @staticmethod
    def _compared(analysis: Analysis, fn: JitFunction, ctx: Ctx) -> dict[int, ast.Compare]:
        """Roots compared with a bound somewhere in ``fn`` (a runtime value, or a constexpr other than the
        block's own extent): the kernel knows they can run past it."""
        out: dict[int, ast.Compare] = {}
        for node in ast.walk(fn.node):
            if not (isinstance(node, ast.Compare) and len(node.ops) == 1
                    and isinstance(node.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE))):
                continue
            sides = (node.left, node.comparators[0])
            left, right = (analysis.ev.eval(n, ctx) for n in sides)
            for a, b, b_node in ((left, right, sides[1]), (right, left, sides[0])):
                if not a.roots or b.roots:
                    continue
                # a bound other than the block's own extent (`cols < n_cols`, also with a constexpr n_cols)
                out.update({k: node for k, r in a.roots.items()
                            if not b.const or ast.unparse(b_node) != ast.unparse(call_arg(r.node, 1, "end"))})
        return out

    @staticmethod
    def _padded(analysis: Analysis, fn: JitFunction) -> dict[str, int]:
        """Constexpr block sizes rounded up from a runtime size (``triton.next_power_of_2``) → line."""
        out: dict[str, int] = {}
        for param in fn.constexpr:
            for value, launch in analysis.launch_values(fn, param):
                for n in ast.walk(value):
                    q = analysis.imports.qualname(n.func) if isinstance(n, ast.Call) else None
                    if q is not None and q.endswith("next_power_of_2"):
                        out[param] = (launch.call if launch else value).lineno
        return out

    @staticmethod
    def _partial_blocks(analysis: Analysis, fn: JitFunction, root: Root, sized: bool) -> bool:
        """Whether the blocks a program id moves can overrun: the launch grid's entry for that axis is a
        ceiling division. Without a readable launch (the kernel is launched from another module): the kernel
        takes a runtime size and the block is not named like a whole dimension (``D``, ``HEAD_DIM``)."""
        verdicts = []
        for launch in fn.launches:
            entries = analysis.model.grid_entries(launch.grid, launch.host, launch.call)
            if entries is None or any(a < 0 or a >= len(entries) for a in root.axes) or not root.axes:
                verdicts.append(None)
                continue
            verdicts.append(any(analysis.model.rounds_up(entries[a], launch.host, launch.call) for a in root.axes))
        if verdicts and None not in verdicts:
            return any(verdicts)
        if any(verdicts):
            return True
        bound = _bound_name(root)
        return sized and bound is not None and not _DIMENSION.search(bound)

    @staticmethod
    def _has_runtime_size(fn: JitFunction) -> bool:
        """Whether ``fn`` takes a runtime size a program-id-tiled block could overrun: a non-constexpr
        parameter compared with something, or named like a size (``n_elements``, ``N``, ``seq_len``).
        A kernel with none (``x_ptr + row * D + tl.arange(0, D)``, ``D: tl.constexpr``) covers whole rows."""
        compared = {n.id for c in ast.walk(fn.node) if isinstance(c, ast.Compare)
                    for n in ast.walk(c) if isinstance(n, ast.Name)}
        for p in fn.params:
            if p in fn.constexpr or POINTER_NAME.search(p) or is_stride(p):
                continue
            if p in compared or SIZE_NAME.search(p):
                return True
        return False

    @staticmethod
    def _asserted(analysis: Analysis, fn: JitFunction) -> set[str]:
        """Names in a ``tl.static_assert``: the kernel states a divisibility or size fact about them."""
        names: set[str] = set()
        for _name, call in analysis.tl_calls(fn, "static_assert"):
            names |= {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        return names

    @staticmethod
    def _guarded(analysis: Analysis, ctx: Ctx, call: ast.Call) -> bool:
        """In a branch that specialises on divisibility: ``if EVEN_N:`` or ``if n % BLOCK == 0:``."""
        for test in ctx.flow.branch_tests(call):
            for n in ast.walk(test):
                if isinstance(n, ast.Name) and n.id in ctx.fn.constexpr and _GUARD_NAME.search(n.id):
                    return True
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                    return True
        return False

    # ------------------------------------------------------------------------------------------- checking

    def _check_access(self, analysis: Analysis, ctx: Ctx, kind: str, call: ast.Call,
                      evidence: dict[int, ast.Compare], padded: dict[str, int], asserted: set[str],
                      sized: bool) -> Hit | None:
        ptr = analysis.ev.eval(call_arg(call, 0, "pointer"), ctx)
        if ptr.blockptr or not ptr.roots:
            return None
        needed: list[tuple[Root, str]] = []
        for root in ptr.roots.values():
            bound = _bound_name(root)
            if root.wrapped or (bound is not None and bound in asserted):
                continue
            if root.looped:
                needed.append((root, "move with a loop over a runtime range"))
            elif root.tiled and self._partial_blocks(analysis, ctx.fn, root, sized):
                needed.append((root, "move with the program id over a grid that rounds up (the last block "
                                     "is partial)"))
            elif id(root.node) in evidence:
                cmp = evidence[id(root.node)]
                needed.append((root, f"are compared with a bound at line {cmp.lineno} "
                                     f"(`{ast.unparse(cmp)}`)"))
            elif bound in padded:
                needed.append((root, f"span `{bound}`, rounded up with next_power_of_2 at line {padded[bound]}"))
        if not needed or self._guarded(analysis, ctx, call):
            return None
        mask_node = call_arg(call, 1 if kind == "load" else 2, "mask")
        if mask_node is None or (isinstance(mask_node, ast.Constant) and mask_node.value in (None, True)):
            root, why = needed[0]
            known = evidence.get(id(root.node))
            mask = f"mask={ast.unparse(known)}" if known is not None else "mask=<offsets> < <size>"
            return Hit(call, f"tl.{kind} without a mask: the offsets from `{ast.unparse(root.node)}` {why}, "
                             "so they can run past the end of the data",
                       f"add {mask}{' and other=0' if kind == 'load' else ''} "
                       "(or state divisibility with tl.static_assert / an EVEN_* constexpr branch)")
        mask = analysis.ev.eval(mask_node, ctx)
        if mask.opaque:
            return None
        missing = [(r, why) for r, why in needed if not _covers(mask, r)]
        if not missing:
            bounds = list(comparisons(analysis, mask_node, ctx))
            # built from the offsets, but every comparison of them in it is a lower bound (offs >= 0)
            missing = [(r, why) for r, why in needed
                       if (on := matching(bounds, r)) and not any(b.upper for b in on)]
            if not missing:
                return None
            root, why = missing[0]
            return Hit(mask_node, f"the mask of this tl.{kind} bounds the offsets from `{ast.unparse(root.node)}` "
                                  f"(line {root.node.lineno}) only from below, and they {why}",
                       "compare them with the size: mask=offs < n (with any lower bound it needs)")
        root, why = missing[0]
        return Hit(mask_node, f"the mask of this tl.{kind} does not bound the offsets from "
                              f"`{ast.unparse(root.node)}` (line {root.node.lineno}), which {why}",
                   "build the mask from those offsets, e.g. mask=(offs_m < M)[:, None] & (offs_n < N)[None, :]")


def _covers(mask: Val, root: Root) -> bool:
    """The mask is built from the same offsets (the same arange, or an identical one moved the same way)."""
    if id(root.node) in mask.roots:
        return True
    return any(m.sig == root.sig and m.tiled == root.tiled for m in mask.roots.values())

