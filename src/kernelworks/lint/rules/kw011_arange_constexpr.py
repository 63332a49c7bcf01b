"""KW011: a ``tl.arange`` bound that is a runtime value instead of a ``tl.constexpr``.

Block shapes are fixed at compile time: ``tl.arange(0, BLOCK)`` with a ``BLOCK`` parameter not annotated
``tl.constexpr`` fails to compile ("arange's arguments must be of type tl.constexpr"), and a runtime size
(``tl.arange(0, n_cols)``) cannot be a block shape at all — use a power-of-two constexpr block and a mask.
Literals and values computed from constexprs are fine. Helpers called only from other jit functions are
not checked (their arguments' constexpr-ness comes from the caller).

Bad::

    def _kernel(x_ptr, n, BLOCK):                        # BLOCK is a runtime int here
        offs = tl.arange(0, BLOCK)                       # KW011

Good::

    def _kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule


class ArangeNotConstexpr(Rule):
    code = "KW011"
    severity = Severity.ERROR
    summary = "tl.arange bound is not a tl.constexpr"
    hint = "annotate the block-size parameter as `NAME: tl.constexpr` (and mask against the runtime size)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            if fn.is_helper:
                continue
            ctx = analysis.ctx(fn)
            for _name, call in analysis.tl_calls(fn, "arange"):
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    val = analysis.ev.eval(arg, ctx)
                    if not val.known_runtime:
                        continue
                    params = sorted(val.params)
                    if isinstance(arg, ast.Name) and arg.id in fn.params:
                        yield Hit(call, f"tl.arange bound `{arg.id}` is a parameter not annotated tl.constexpr",
                                  f"declare it `{arg.id}: tl.constexpr` (a runtime size needs a constexpr block "
                                  "and a mask)")
                    elif params:
                        names = ", ".join(f"`{p}`" for p in params)
                        yield Hit(call, f"tl.arange bound `{ast.unparse(arg)}` depends on {names}, which "
                                        f"{'is' if len(params) == 1 else 'are'} not tl.constexpr",
                                  f"annotate {names} as tl.constexpr, or use a constexpr block size and "
                                  "a mask for a runtime size")
                    else:
                        yield Hit(call, f"tl.arange bound `{ast.unparse(arg)}` is a runtime value, not a "
                                        "tl.constexpr")
                    break
