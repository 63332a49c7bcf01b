"""KW015: a shifted access (``x_ptr + offs + 1``, ``x_ptr + (o_t - k) * stride``) under the mask of the
unshifted offsets, so it reads or writes one element (or ``k``) past the end, or before the start.

Stencils, token shifts, finite differences, causal convolutions and shifted labels read ``x[i + 1]`` or
``x[i - k]``. The mask ``offs < n`` keeps ``offs`` in range, not ``offs + 1``: the last lane reads element
``n`` (the next row, or unmapped memory); ``offs - 1`` at the first lane reads element ``-1``. The rule
reads the access's offsets as ``arange + shift`` (literals and compile-time terms such as a
``tl.static_range`` counter; the runtime base is left out) and the mask's comparisons on the same offsets:
flagged when every upper bound in the mask allows less than the shift (``offs < n`` for ``offs + 1``), or
the shift is negative and the mask has no lower bound (``offs - k >= 0``, ``offs >= 1``). Pointers into
``n + 1``-sized arrays (``cu_seqlens``, ``indptr``, ``offsets``) are not flagged.

Bad::

    nxt = tl.load(x_ptr + offs + 1, mask=offs < n)            # KW015: reads x[n] in the last block

Good::

    nxt = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=0.0)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.findings import Severity
from kernelworks.lint.masks import Bound, Shift, masked_accesses
from kernelworks.lint.rules.base import Hit, Rule

PREFIX_SUM = re.compile(r"cu_|cum|indptr|offsets|^offs_?ptr|starts|_loc|boundar|row_ptr|rowptr|csr", re.IGNORECASE)
"""Pointers to ``n + 1``-entry prefix arrays (``cu_seqlens``, CSR ``indptr``): ``[i + 1]`` under ``i < n`` is
their last entry, in range."""


def _text(s: Shift) -> str:
    terms = [f"{'+' if sign > 0 else '-'} {t}" for t, sign in sorted(s.syms)]
    if s.lit:
        terms.append(f"{'+' if s.lit > 0 else '-'} {abs(s.lit)}")
    return " ".join(terms) or "+ 0"


def _lower_ok(b: Bound, s: Shift) -> bool:
    return b.eff.syms != s.syms or s.lit >= b.eff.lit


class ShiftedAccess(Rule):
    code = "KW015"
    severity = Severity.ERROR
    summary = "shifted load/store (offs + 1, offs - k) masked with the unshifted offsets: reads past an end"
    hint = "bound the shifted offsets themselves: mask=(offs + 1 < n), or (offs - k >= 0) & (offs < n)"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        reported: set[int] = set()
        for a in masked_accesses(analysis):
            if id(a.call) in reported or not a.upper or any(PREFIX_SUM.search(b) for b in a.bases):
                continue
            s = a.shift
            what = f"`{ast.unparse(a.root.node)}` {_text(s)}"
            if s.lit > 0 and all(u.eff.syms == s.syms and u.eff.lit < s.lit for u in a.upper):
                u = a.upper[0]
                reported.add(id(a.call))
                yield Hit(a.call, f"tl.{a.kind} at offsets {what} under the mask `{ast.unparse(u.compare)}` "
                                  f"(line {u.compare.lineno}) of the unshifted offsets: the last {s.lit} lane(s) "
                                  "run past the bound",
                          f"mask the shifted offsets: ({ast.unparse(u.compare.left)} + {s.lit}) < ... "
                          "(and other= for loads)")
            elif s.negative and not any(_lower_ok(b, s) for b in a.lower):
                reported.add(id(a.call))
                yield Hit(a.call, f"tl.{a.kind} at offsets {what} is masked only from above "
                                  f"(`{ast.unparse(a.upper[0].compare)}`): the first lanes read before the start",
                          f"add a lower bound on the shifted offsets to the mask, e.g. (offs {_text(s)}) >= 0")
