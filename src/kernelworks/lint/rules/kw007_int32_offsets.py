"""KW007: a program id times a runtime integer (``pid * stride``, ``row * n_cols``) computed in int32.

Program ids and integer arguments are int32 inside a kernel, so ``row * stride`` wraps once the tensor has
2^31 elements (8 GiB of bf16: a 32k-vocabulary logits tensor at 64k tokens, a long-context KV cache) and the
kernel reads and writes the wrong memory. Cast before multiplying: ``row.to(tl.int64) * stride``.
(Casting after, ``(row * stride).to(tl.int64)``, is too late and is flagged.)

Not flagged: a program id cast to int64 first (or a product with an int64 value), and strides that are
``tl.constexpr`` (``pid * BLOCK``): only products that feed a load or store pointer are checked.

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
    summary = "program id × runtime stride/size in int32 feeding a pointer (wraps past 2^31 elements)"
    hint = "cast the program id first: pid.to(tl.int64) * stride"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        seen: set[int] = set()
        for fn in analysis.functions:
            ctx = analysis.ctx(fn)
            # block sizes (arange bounds) missing tl.constexpr are KW011's finding, not a stride
            blocks = {n.id for _n, call in analysis.tl_calls(fn, "arange") for n in ast.walk(call)
                      if isinstance(n, ast.Name)}
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
