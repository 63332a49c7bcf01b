"""KW016: a block pointer (``tl.make_block_ptr``) loaded or stored without ``boundary_check`` on a dimension
whose size is not a multiple of the block.

A block pointer carries the tensor's shape, but Triton only clips the dimensions listed in
``boundary_check``: the others are read and written unchecked, so the last block of a ragged dimension
(``T`` not a multiple of ``BT``, ``K`` padded to a power of two) reads past the tensor or writes over its
neighbour. A dimension needs the check when its size is a runtime value (unless the access sits in an
``EVEN_*``/``% == 0`` branch or the size is in a ``tl.static_assert``), or when it is a constexpr and the
block is padded to a power of two at the launch (``BK = triton.next_power_of_2(K)``). A block equal to the
dimension (``(BLOCK_T, HEAD_DIM)`` over ``(T, HEAD_DIM)``) needs none. Tensor descriptors
(``tl.make_tensor_descriptor``, TMA) clip in hardware and are not checked.

Bad::

    p_k = tl.make_block_ptr(k, (T, K), (K, 1), (i_t * BT, 0), (BT, BK), (1, 0))
    b_k = tl.load(p_k)                                       # KW016: T and the padded K unchecked

Good::

    b_k = tl.load(p_k, boundary_check=(0, 1), padding_option="zero")
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import Ctx, call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.model import JitFunction
from kernelworks.lint.rules.base import Hit, Rule
from kernelworks.lint.rules.kw001_unmasked import UnmaskedAccess


def _elements(node: ast.expr | None) -> list[ast.expr] | None:
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else None


class BlockPtrBoundary(Rule):
    code = "KW016"
    severity = Severity.ERROR
    summary = "block pointer load/store without boundary_check on a dimension the block does not divide"
    hint = "add boundary_check=(dims...) (and padding_option='zero' for loads feeding a reduction or tl.dot)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            padded = UnmaskedAccess._padded(analysis, fn)
            asserted = UnmaskedAccess._asserted(analysis, fn)
            for kind, call in analysis.tl_calls(fn, "load", "store"):
                ptr = call_arg(call, 0, "pointer")
                if not analysis.ev.eval(ptr, ctx).blockptr or UnmaskedAccess._guarded(analysis, ctx, call):
                    continue
                checked = self._checked(call)
                if checked is None:
                    continue
                for make, c in self._makers(analysis, ptr, ctx):
                    shape = _elements(call_arg(make, 1, "shape"))
                    block = _elements(call_arg(make, 4, "block_shape"))
                    if shape is None or block is None or len(shape) != len(block):
                        continue
                    ragged = [i for i, (n, b) in enumerate(zip(shape, block))
                              if i not in checked and self._ragged(analysis, fn, c, n, b, padded, asserted)]
                    if ragged:
                        dims = ", ".join(f"{i} (`{ast.unparse(shape[i])}` in blocks of `{ast.unparse(block[i])}`)"
                                         for i in ragged)
                        yield Hit(call, f"tl.{kind} through the block pointer made at line {make.lineno} checks no "
                                        f"bounds on dimension {dims}: the last block runs past the tensor",
                                  f"add boundary_check={tuple(sorted(checked | set(ragged)))}"
                                  + (", padding_option='zero'" if kind == "load" else ""))
                        break

    @staticmethod
    def _checked(call: ast.Call) -> set[int] | None:
        """The dimensions the access checks (``None`` when they cannot be read)."""
        node = call_arg(call, 3, "boundary_check")  # load(ptr, mask, other, boundary_check), store(ptr, v, mask, ...)
        if node is None:
            return set()
        elts = _elements(node)
        if elts is None:
            return None
        if not all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in elts):
            return None
        return {e.value for e in elts}

    @staticmethod
    def _makers(analysis: Analysis, ptr: ast.expr | None, ctx: Ctx) -> Iterator[tuple[ast.Call, Ctx]]:
        for node, c in analysis.reach(ptr, ctx):
            if isinstance(node, ast.Call) and analysis.imports.is_tl(node.func, "make_block_ptr"):
                yield node, c

    @staticmethod
    def _ragged(analysis: Analysis, fn: JitFunction, ctx: Ctx, size: ast.expr, block: ast.expr,
                padded: dict[str, int], asserted: set[str]) -> bool:
        if ast.unparse(size) == ast.unparse(block):
            return False
        if {n.id for n in ast.walk(size) if isinstance(n, ast.Name)} & asserted:
            return False
        v = analysis.ev.eval(size, ctx)
        if v.opaque:
            return False
        if not v.const:
            return True
        if isinstance(size, ast.Constant) and isinstance(block, ast.Constant):
            return isinstance(size.value, int) and isinstance(block.value, int) and size.value % block.value != 0
        return isinstance(block, ast.Name) and block.id in padded
