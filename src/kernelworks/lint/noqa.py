"""``# noqa`` comments: ``# noqa`` silences every code on its line, ``# noqa: KW001, KW007`` only those.

Comments are found with the tokenizer, so a ``"# noqa"`` inside a string does not count. Codes of other
tools on the same comment (``# noqa: E501, KW001``) are allowed and ignored here.
"""

from __future__ import annotations

import io
import re
import tokenize

_NOQA = re.compile(r"#\s*noqa(?P<colon>\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,?\s*[A-Za-z]+[0-9]+)*))?",
                   re.IGNORECASE)

ALL = frozenset({"*"})


def noqa_lines(text: str) -> dict[int, frozenset[str]]:
    """Line → codes silenced there (``ALL`` for a bare ``# noqa``)."""
    out: dict[int, frozenset[str]] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return out
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        m = _NOQA.search(tok.string)
        if m is None:
            continue
        codes = m.group("codes")
        out[tok.start[0]] = ALL if not codes else frozenset(c.upper() for c in re.findall(r"[A-Za-z]+[0-9]+", codes))
    return out


def silenced(code: str, line: int, lines: dict[int, frozenset[str]]) -> bool:
    """Whether a finding of ``code`` on ``line`` is silenced by a noqa comment."""
    codes = lines.get(line)
    return codes is not None and (codes is ALL or code in codes)
