"""Reading compute-sanitizer's logs: the reports each tool writes, which of them ``kw check --sanitize`` was
told to ignore, and the verdict on one watched run.

The format, as compute-sanitizer's user guide shows it for each tool (and as the tests' sample logs copy it):
every line of the tool's own starts with its prefix ``========= ``; a report is one line at the top level with
its details indented under it, and a bare prefix line ends it::

    ========= Invalid __global__ write of size 4 bytes                 memcheck
    =========     at _copy_kernel+0x1b0 in /src/copy.py:31             (KERNEL+OFFSET in FILE:LINE)
    =========     by thread (250,0,0) in block (0,0,0)
    =========     Access to 0x7f2a3e000fa0 is out of bounds            (CUDA 13; older: "Address 0x… is …")
    =========     Saved host backtrace up to driver entry point at kernel launch time
    =========         Host Frame: …
    =========
    ========= ERROR SUMMARY: 1 error

initcheck's reports read ``Uninitialized __global__ memory read of size 4 bytes`` (then ``at``, ``by thread``,
``Address``), synccheck's ``Barrier error detected. Divergent thread(s) in block.`` (``Missing wait.``,
``Invalid arguments.`` …), racecheck's ``Error: Race reported between Write access at K+0x90 in f.py:41``
with an ``and Read access at … [N hazards]`` line per other access. A report inside a device function has
``Device Frame:`` lines, the kernel last. memcheck, initcheck and synccheck end with ``ERROR SUMMARY: N errors``
(N counts the reports past ``--print-limit`` too); racecheck with ``RACECHECK SUMMARY: H hazards displayed (E
errors, W warnings)``; past the print limit a second ``ERROR SUMMARY: M errors were not printed…`` line follows,
which is not the count. Older releases wrote ``at 0x1b0 in FILE:LINE:KERNEL``; that form is read too. Real logs
(compute-sanitizer 2025.3 of CUDA 13, on an H100) are among the tests' samples, in
``tests/check/sanitize_logs/real/``.

Racecheck's two severities, per its chapter of the guide: an *error* is a hazard very likely to cause a race;
a *warning* a hazard of the programming model that may be intended (warp-level code that assumes a warp's
threads move in step). Errors fail a run; warnings do not, and are shown beside the verdict (``clean (1
warning)``) with their reports in ``-v``'s notes. racecheck's exit status does count warnings (it returned
``--error-exitcode`` for a log of ``0 errors, 1 warning``), so the verdict reads the summary, not the status.

Which reports count: every report the summary counts, less those an :class:`IgnoreRule` matches (``--sanitize-
ignore TOOL:KERNEL_GLOB``: known false positives such as initcheck on padding a kernel reads and discards).
Ignored reports are counted and shown (``clean (2 ignored)``), never dropped silently; reports past the print
limit cannot be matched, so they stay counted. A report in a kernel that is not one of the op's own — the
Triton kernels the child saw the provider load (:data:`~kernelworks.check.sanitize_child.KERNELS_MARK`), so
torch's ``at::native::…`` kernels, cuBLAS's, and kernels the spec's input maker ran — still counts (an
initcheck report in torch's kernel that reads the op's output is the op's unwritten output), but is labelled
``[outside the op]`` so that the reader knows whose code it names.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from kernelworks.check.sanitize_child import KERNELS_MARK, SKIP_MARK, SKIPPED

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
"""compute-sanitizer's four tools, in the order ``kw check --sanitize`` runs them."""

ERROR_EXITCODE = 86
"""What compute-sanitizer returns when the case ran but the tool found errors (``--error-exitcode``)."""

FIRST_ERRORS = 3
"""Reports kept in a failure's text (the first ones: later reports are often cascades of the first)."""

RECORD_LINES = 5
"""Lines kept per report: the report, then where (``at kernel+0x… in file.py:line``), which thread, which
address."""

OUTSIDE = "[outside the op] "
"""Put before the first line of a counted report whose kernel is not one of the op's own."""

# ------------------------------------------------------------------------------------------------ reports

_PREFIX = re.compile(r"^\s*=+ ?")  # the tool's lines start "========= "; the application's own never do
_ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: ([\d,]+) errors?\s*$")
_RACE_SUMMARY = re.compile(r"^RACECHECK SUMMARY: [\d,]+ hazards? displayed"
                           r"(?: \(([\d,]+) errors?, ([\d,]+) warnings?\))?")
_RACE_COUNTS = re.compile(r"^\(([\d,]+) errors?, ([\d,]+) warnings?\)")  # the counts, when on a line of their own
_STATUS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "ERROR SUMMARY", "RACECHECK SUMMARY",
           "Target application returned an error", "Error: process didn't terminate successfully")
_HOST_STACK = ("Saved host backtrace", "Host Frame")
_AT = re.compile(r"(?:^|access )at (.+)$")  # "at K+0x1b0 in f.py:31"; racecheck's "Write access at K+0x90 …"
_DEVICE_FRAME = re.compile(r"^Device Frame: ?(.+)$")
_API_CALL = re.compile(r"on CUDA API call to (\w+)")
_HAZARDS = re.compile(r"\s*\[[\d,]+ hazards?\]$")
_LOCATED = re.compile(r"^(.+?)\+0x[0-9a-fA-F]+(?: in .*)?$")  # K+0x1b0 in f.py:31 (2022 on)
_OLD_LOCATED = re.compile(r"^0x[0-9a-fA-F]+ in (.+)$")  # 0x1b0 in f.cu:31:K(int*) or 0x1b0 in K(int*)
_FILE_LINE = re.compile(r"^[^:()<>]+:\d+:(.+?)(?: \(.* : 0x[0-9a-fA-F]+\))?$")  # f.cu:31:K(int*) [(K : 0x1b0)]


def _function(located: str) -> str:
    """The function a location names: ``K+0x1b0 in f.py:31`` → ``K``; ``0x1b0 in f.cu:31:K(int*)`` → ``K(int*)``;
    "" for text that is not a device location (``0x7f… on access by cudaMemcpy source``)."""
    located = _HAZARDS.sub("", located.strip())
    if m := _LOCATED.match(located):
        return m.group(1)
    old = _OLD_LOCATED.match(located)
    where = old.group(1) if old else located
    m = _FILE_LINE.match(where)
    return m.group(1) if m else where if old else ""


def bare_name(function: str) -> str:
    """A demangled function's qualified name without return type, template arguments and parameters:
    ``void at::native::vectorized_elementwise_kernel<4, F>(int, F)`` → ``at::native::vectorized_elementwise_kernel``;
    a Triton kernel's name is already bare."""
    text = function
    while (shorter := re.sub(r"<[^<>]*>", "", text)) != text:
        text = shorter
    while (shorter := re.sub(r"\([^()]*\)", "", text)) != text:
        text = shorter
    words = text.split()
    return words[-1] if words else function


@dataclass
class Record:
    """One report of a log.

    ``lines``: its first :data:`RECORD_LINES` lines (the host backtrace dropped); ``kernel``: the kernel it is
    in (its outermost device frame, else the function its ``at`` names), "" for a report from the host;
    ``api_call``: the CUDA API call a host-side report names (``Program hit … on CUDA API call to X``)."""

    lines: list[str]
    kernel: str = ""
    api_call: str = ""

    @property
    def warning(self) -> bool:
        """racecheck's lower severity: not counted as an error."""
        return self.lines[0].startswith("Warning")

    @property
    def names(self) -> tuple[str, ...]:
        """What an :class:`IgnoreRule`'s glob is matched against: the kernel's full and bare names, else the
        API call, else ``""`` (which only ``*`` matches)."""
        if self.kernel:
            return (self.kernel, bare_name(self.kernel))
        return (self.api_call,) if self.api_call else ("",)

    def text(self, outside: bool = False) -> str:
        return (OUTSIDE if outside else "") + "\n".join(self.lines)


@dataclass
class SanitizerLog:
    """What one compute-sanitizer log says: the counts of its summary (None: no summary line, the tool did
    not finish) and every report in order."""

    error_summary: int | None = None
    race_summary: tuple[int, int] | None = None  # racecheck's (errors, warnings)
    records: list[Record] = field(default_factory=list)

    @property
    def errors(self) -> int | None:
        """The errors counted: racecheck's when it wrote its summary, else ``ERROR SUMMARY``'s."""
        return self.race_summary[0] if self.race_summary else self.error_summary

    @property
    def warnings(self) -> int:
        """racecheck's warnings (possible hazards it does not count as errors)."""
        return self.race_summary[1] if self.race_summary else 0

    def first_errors(self, n: int = FIRST_ERRORS) -> list[str]:
        """The first ``n`` reports as text, warnings only when there are no errors."""
        errors = [r for r in self.records if not r.warning]
        return [r.text() for r in (errors or self.records)[:n]]


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _locate(record: Record, line: str, frames: list[str]) -> None:
    """Note what ``line`` (one of ``record``'s) says about where it happened."""
    frame = _DEVICE_FRAME.match(line) or (None if frames else _AT.search(line))
    if frame and (function := _function(frame.group(1))):
        frames.append(function)
        record.kernel = function  # device frames go outwards: the last one is the kernel
    if call := _API_CALL.search(line):
        record.api_call = call.group(1)


def parse_log(text: str) -> SanitizerLog:
    """Read a compute-sanitizer log (``--log-file``, or its output with the application's lines mixed in)."""
    log = SanitizerLog()
    record: Record | None = None
    frames: list[str] = []
    in_host_stack = race_counts_next = False
    for raw in text.splitlines():
        prefix = _PREFIX.match(raw)
        if prefix is None:
            continue
        body = raw[prefix.end():]
        line = body.strip()
        if not line:  # a bare prefix line ends a report
            record = None
            continue
        if m := _ERROR_SUMMARY.match(line):
            log.error_summary = max(log.error_summary or 0, _count(m.group(1)))
        elif m := _RACE_SUMMARY.match(line) or (race_counts_next and _RACE_COUNTS.match(line)):
            if m.group(1) is not None:
                errors, warnings = log.race_summary or (0, 0)
                log.race_summary = (max(errors, _count(m.group(1))), max(warnings, _count(m.group(2))))
            race_counts_next = m.group(1) is None
            continue
        if not body.startswith(" "):  # a line at the top level: a new report, or the tool's status
            record = None if line.startswith(_STATUS) else Record([line])
            frames, in_host_stack = [], False
            if record is not None:
                log.records.append(record)
                _locate(record, line, frames)
        elif record is not None:
            in_host_stack = in_host_stack or line.startswith(_HOST_STACK)
            if not in_host_stack:
                _locate(record, line, frames)
                if len(record.lines) < RECORD_LINES:
                    record.lines.append(line)
    return log


# -------------------------------------------------------------------------------------------- ignore rules

@dataclass(frozen=True)
class IgnoreRule:
    """``--sanitize-ignore [TOOL:]KERNEL_GLOB``: reports of ``tool`` ("" any) whose kernel matches ``pattern``
    (an ``fnmatch`` glob, case-sensitive, against the kernel's full demangled name or its bare qualified name:
    ``at::native::*`` matches ``void at::native::reduce_kernel<…>(…)``; for a failed CUDA API call, against
    the call's name: ``cuGetProcAddress*``)."""

    tool: str
    pattern: str

    def matches(self, tool: str, record: Record) -> bool:
        return (not self.tool or self.tool == tool) and any(
            fnmatch.fnmatchcase(name, self.pattern) for name in record.names)

    def __str__(self) -> str:
        return f"{self.tool or '*'}:{self.pattern}"


def parse_ignore(text: str) -> IgnoreRule:
    """``"initcheck:at::native::*"`` → that rule; ``"*:_fill_*"`` or ``"_fill_*"`` → any tool. ``ValueError`` for
    an empty glob, a bare tool name, or a word before a single ``:`` that is not a tool."""
    head, sep, rest = text.partition(":")
    if sep and (head in TOOLS or head == "*"):
        tool, pattern = ("" if head == "*" else head), rest
    elif sep and re.fullmatch(r"[a-z]+", head) and not rest.startswith(":"):
        raise ValueError(f"--sanitize-ignore {text}: unknown compute-sanitizer tool {head!r}; choose from "
                         f"{', '.join(TOOLS)} or *")
    else:
        tool, pattern = "", text
    if not pattern.strip() or pattern in TOOLS:
        raise ValueError(f"--sanitize-ignore {text}: give TOOL:KERNEL_GLOB (e.g. initcheck:at::native::*, or "
                         f"{pattern or 'memcheck'}:* for every report of a tool)")
    return IgnoreRule(tool, pattern)


def parse_ignores(rules: Iterable[str | IgnoreRule]) -> tuple[IgnoreRule, ...]:
    """Rules from strings (or rules); ``ValueError`` on the first malformed one."""
    return tuple(r if isinstance(r, IgnoreRule) else parse_ignore(r) for r in rules)


def child_kernels(output: str) -> frozenset[str]:
    """The Triton kernels the child saw the provider load (its :data:`KERNELS_MARK` line); empty when it
    printed none (a provider that launches no Triton kernel, or a child that died before saying)."""
    for line in reversed(output.splitlines()):
        if line.startswith(KERNELS_MARK):
            return frozenset(line[len(KERNELS_MARK):].split())
    return frozenset()


# ------------------------------------------------------------------------------------------------ verdict

@dataclass
class Outcome:
    """The verdict on one watched run.

    ``status``: ``clean``, ``errors``, ``failed`` (did not finish) or ``skipped``; ``message``: what was found
    or why (empty when clean); ``errors``/``warnings``: what counts after ignoring; ``ignored``: reports an
    ignore rule matched; ``outside``: counted errors in kernels that are not the op's; ``records``: the first
    counted reports (warnings when there are no errors); ``notes``: what a clean verdict does not say (ignored
    reports, warnings, uncounted lines of the log); ``log``: the log's path when it was kept."""

    status: str
    message: str = ""
    errors: int = 0
    warnings: int = 0
    ignored: int = 0
    outside: int = 0
    records: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def verdict(self) -> str:
        """One table cell: ``clean``, ``clean (1 warning, 2 ignored)``, ``3 errors (1 outside the op)``,
        ``did not finish``, ``skip``."""
        extras = []
        if self.outside:
            extras.append(f"{self.outside} outside the op")
        if self.warnings:
            extras.append(_plural(self.warnings, "warning"))
        if self.ignored:
            extras.append(f"{self.ignored} ignored")
        head = _plural(self.errors, "error") if self.status == "errors" else _VERDICTS[self.status]
        return head + (f" ({', '.join(extras)})" if extras else "")

    @property
    def first(self) -> str:
        """What the run says first: its first counted report, else why it failed or was skipped, else (clean)
        its notes."""
        if self.status == "errors" and self.records:
            return self.records[0]
        return self.message if self.status != "clean" else "\n\n".join(self.notes)

    @property
    def noteworthy(self) -> bool:
        """Anything to read in its log: not clean, or clean with warnings, ignored reports or notes."""
        return self.status != "clean" or bool(self.warnings or self.ignored or self.notes)

    def as_dict(self) -> dict:
        return asdict(self) | {"verdict": self.verdict}


_VERDICTS = {"clean": "clean", "failed": "did not finish", "skipped": "skip"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _tail(output: str, lines: int = 12) -> str:
    kept = [x for x in output.splitlines() if x.strip() and not x.startswith(KERNELS_MARK)]
    return "\n".join(kept[-lines:])


def judge(tool: str, log: SanitizerLog, returncode: int | None, output: str, *,
          ignore: Sequence[IgnoreRule] = (), timed_out: bool = False, timeout: float | None = None) -> Outcome:
    """The verdict on one run from its log, the sanitizer's exit status and the child's output (stdout and
    stderr together), with the reports ``ignore`` matches set aside. Errors in the log come first: a case that
    crashes after memcheck's report crashed because of what it reports. A run that did not finish says so
    first (``TOOL did not finish: …``)."""
    op_kernels = child_kernels(output)
    matched = [any(rule.matches(tool, r) for rule in ignore) for r in log.records]
    ignored = [r for r, m in zip(log.records, matched) if m]
    kept = [r for r, m in zip(log.records, matched) if not m]
    errors = max((log.errors or 0) - sum(not r.warning for r in ignored), 0)
    warnings = max(log.warnings - sum(r.warning for r in ignored), 0)

    def outside(r: Record) -> bool:
        return bool(op_kernels and r.kernel) and not {r.kernel, bare_name(r.kernel)} & op_kernels

    shown = [r for r in kept if not r.warning] if errors else [r for r in kept if r.warning]
    out = Outcome("clean", errors=errors, warnings=warnings, ignored=len(ignored),
                  outside=sum(outside(r) for r in shown) if errors else 0,
                  records=[r.text(outside(r)) for r in shown[:FIRST_ERRORS]])
    if ignored:
        rules = ", ".join(str(rule) for rule in ignore if any(rule.matches(tool, r) for r in ignored))
        out.notes.append(f"{tool}: {_plural(len(ignored), 'report')} ignored ({rules}), the first: "
                         f"{ignored[0].text(outside(ignored[0]))}")
    if warnings and not errors:
        first = f": {out.records[0]}" if out.records else ""
        out.notes.append(f"{tool}: {_plural(warnings, 'warning')} (not counted as errors){first}")
    found = "\n\n".join(out.records)
    if errors:
        where = f", {out.outside} of them outside the op's kernels" if out.outside else ""
        extras = (f" and {_plural(warnings, 'warning')}" if warnings else "") + \
            (f" ({len(ignored)} more ignored)" if ignored else "")
        if not found:
            found = "none of its counted reports is in the log (past --print-limit)"
        out.status, out.message = "errors", f"{tool}: {_plural(errors, 'error')}{where}{extras}: {found}"
        return out
    also = f"\n\nthe log:\n{found}" if found else ""
    said = f"\nits last output:\n{_tail(output)}" if _tail(output) else ""
    if timed_out:
        return _failed(out, f"{tool} did not finish: timed out after {timeout:.0f} s (raise it with "
                            f"--sanitize-timeout){said}{also}")
    if returncode == SKIPPED and SKIP_MARK in output:  # the child chose not to run (it may not have touched CUDA)
        out.status, out.message, out.notes = "skipped", output.split(SKIP_MARK, 1)[1].splitlines()[0].strip(), []
        return out
    if log.errors is None:
        found = "\n\n".join(r.text() for r in log.records[:FIRST_ERRORS])
        return _failed(out, f"{tool} did not finish: it exited (status {returncode}) without an error summary"
                            f"{said}" + (f"\n\nthe log:\n{found}" if found else ""))
    if returncode == 0 or (returncode == ERROR_EXITCODE and (ignored or warnings)):
        if kept and not warnings:  # reports its summary does not count: shown, not judged
            out.notes.append(f"{tool}: the log also says: {kept[0].text()}")
        return out
    if returncode == ERROR_EXITCODE:
        return _failed(out, f"{tool} did not finish: exit status {ERROR_EXITCODE} (errors found) but its log "
                            f"counts none{said}")
    return _failed(out, f"{tool} did not finish: the case raised or crashed (exit status {returncode}): "
                        f"{_tail(output, 1) or 'no output'}{said}")


def _failed(out: Outcome, message: str) -> Outcome:
    out.status, out.message = "failed", message
    return out
