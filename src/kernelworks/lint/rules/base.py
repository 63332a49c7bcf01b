"""What every rule is: a code, a severity, a one-line summary and fix hint, and a ``check``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.findings import Severity


@dataclass(frozen=True)
class Hit:
    """A rule's finding before it gets a path: where, what, and optionally a more specific hint."""

    node: ast.AST
    message: str
    hint: str | None = None
    severity: Severity | None = None


class Rule:
    """Base class: subclasses set the class attributes and implement :meth:`check`.

    The module docstring of each rule holds a bad and a good example; ``kw lint --explain``-style tools
    and the SARIF output read :attr:`summary` and :attr:`hint`.
    """

    code: ClassVar[str]
    severity: ClassVar[Severity]
    summary: ClassVar[str]
    hint: ClassVar[str]

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        raise NotImplementedError
