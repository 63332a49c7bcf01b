"""KW007: a program id times a runtime integer (``pid * stride``, ``row * n_cols``) computed in int32.

Program ids and integer arguments are int32 inside a kernel, so ``row * stride`` wraps once the tensor has
2^31 elements (8 GiB of bf16: a 32k-vocabulary logits tensor at 64k tokens, a long-context KV cache) and the
kernel reads and writes the wrong memory. Cast before multiplying: ``row.to(tl.int64) * stride``.
(Casting after, ``(row * stride).to(tl.int64)``, is too late and is flagged.)

The counter of a persistent loop counts as a program id: ``for tile in range(pid, num_tiles, NUM_SMS)``
(or ``range(row_start, row_end)`` with ``row_start = pid * rows_per_program``, or ``row += num_programs`` in a
``while``) walks tiles whose ``tile_m * BLOCK_M * stride_am`` wraps the same way.

Not flagged: a program id cast to int64 first (or a product with an int64 value, or a loop whose bounds
are int64), strides that are ``tl.constexpr`` (``pid * BLOCK``), and a row index computed in int32 then
cast and scaled (``(i_b * T * H + i_h).to(tl.int64) * K``: it counts rows, not elements). Only products
that feed a load, store or atomic pointer are checked.

Bad::

    row = tl.program_id(0)
    x_ptr += row * stride_x                              # KW007

Good::

    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * stride_x
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.evaluate import call_arg
from kernelworks.lint.findings import Severity
from kernelworks.lint.names import dtype_kind
from kernelworks.lint.rules.base import Hit, Rule

_ACCESS = ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
           "atomic_and", "atomic_or", "atomic_xor")


def _cast(node: ast.expr) -> str:
    text = ast.unparse(node)
    simple = isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
    return f"{text if simple else f'({text})'}.to(tl.int64)"


class Int32Offsets(Rule):
    code = "KW007"
    severity = Severity.WARNING
    summary = "program id (or persistent-loop tile) × runtime stride/size in int32 feeding a pointer (wraps past 2^31)"
    hint = "cast the program id first: pid.to(tl.int64) * stride"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        seen: set[int] = set()
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            # block sizes (arange bounds) missing tl.constexpr are KW011's finding, not a stride
            blocks = {n.id for _n, call in analysis.tl_calls(fn, "arange") for n in ast.walk(call)
                      if isinstance(n, ast.Name)}
            seen |= self._row_indices(analysis, fn)
            for _name, call in analysis.tl_calls(fn, *_ACCESS):
                for node, c in analysis.reach(call_arg(call, 0, "pointer"), ctx):
                    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)) or id(node) in seen:
                        continue
                    left, right = analysis.ev.eval(node.left, c), analysis.ev.eval(node.right, c)
                    for pid, other, pid_node in ((left, right, node.left), (right, left, node.right)):
                        if (pid.pid and not pid.roots and not pid.int64 and not other.int64 and not other.pid
                                and other.runtime and other.params - blocks and not other.roots):
                            seen.add(id(node))
                            term = ", ".join(sorted(other.params - blocks))
                            yield Hit(node, f"`{ast.unparse(node)}` multiplies a program id by runtime `{term}` in "
                                            "int32: the offset wraps once the tensor passes 2^31 elements",
                                      f"cast first: {_cast(pid_node)} * ...")
                            break

    @staticmethod
    def _row_indices(analysis: Analysis, fn) -> set[int]:
        """Products inside a value cast to int64 and then scaled by a row length or stride:
        ``(i_b * T * H + i_h).to(tl.int64) * K`` computes a row index in int32 (bounded by the number of rows,
        not of elements) and the element offset in int64."""
        ctx = analysis.ctx(fn)
        out: set[int] = set()

        def is_cast(node: ast.AST) -> bool:
            if not isinstance(node, ast.Call):
                return False
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
                return dtype_kind(analysis.imports, node.args[0]) == "int64"
            return analysis.imports.is_tl(node.func, "cast") and \
                dtype_kind(analysis.imports, call_arg(node, 1, "dtype")) == "int64"

        for node in ast.walk(fn.node):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(other, ast.Constant):
                    continue
                casts = [side] if is_cast(side) else []
                if isinstance(side, ast.Name):
                    defs, complete = ctx.flow.reaching(side.id, side)
                    if complete and defs and all(d.kind == "assign" and is_cast(d.value) for d in defs):
                        casts = [d.value for d in defs]
                stack, depth = list(casts), 0
                while stack and depth < 8:  # into the names the cast value is built from
                    depth += 1
                    expr = stack.pop()
                    for n in ast.walk(expr):
                        if isinstance(n, ast.BinOp):
                            out.add(id(n))
                        elif isinstance(n, ast.Name) and n is not side:
                            defs, _ = ctx.flow.reaching(n.id, n)
                            stack += [d.value for d in defs if d.kind == "assign" and d.value is not None]
        return out
