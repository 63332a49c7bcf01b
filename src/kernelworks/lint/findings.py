"""What a check reports: :class:`Finding` (one problem at one place) and its :class:`Severity`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class Severity(str, Enum):
    """How sure and how bad: ``error`` breaks results or compilation, ``warning`` is a likely bug, ``info``
    is a choice worth a second look."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, order=True)
class Finding:
    """One problem: ``path:line:col: code message`` plus a one-line fix ``hint``.

    ``line`` and ``col`` are 1-based, like ruff and every editor.
    """

    path: str
    line: int
    col: int
    code: str
    severity: Severity
    message: str
    hint: str = ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (severity as its string value)."""
        out = asdict(self)
        out["severity"] = self.severity.value
        return out
