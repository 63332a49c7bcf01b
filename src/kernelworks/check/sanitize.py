"""``kw check --sanitize``: each selected check case run under NVIDIA's compute-sanitizer, one tool at a time.

For every (case, tool) a fresh child process runs the case once, started as::

    compute-sanitizer --tool TOOL --error-exitcode 86 --log-file LOG [--padding 1048576] \\
        python -m kernelworks.check.sanitize_child TARGET CASE --seed N

(:mod:`kernelworks.check.sanitize_child`: the subject provider's forward and, where the spec declares
``grad_inputs``, its backward, on the inputs and seed ``kw check`` uses, then a device synchronise). The log's
summary gives the verdict and its first reports say what was found (``Invalid __global__ write of size 4
bytes``, the kernel and its line); :mod:`kernelworks.check.sanitize_log` reads it, sets aside the reports an
``--sanitize-ignore`` rule matches and labels those outside the op's kernels. Each run comes back as a
:class:`~kernelworks.check.engine.CaseResult` with ``tool`` and ``sanitizer`` (the
:class:`~kernelworks.check.sanitize_log.Outcome`) set: clean (with what was ignored or only warned of); N errors
(a failure, the first few reports in its text, the log kept); did not finish (a time-out, the case or the
sanitizer crashed: a failure too, since nothing was vouched for); or skipped (the provider is not installed
here, the case is one it does not support).

Where tensors live decides what memcheck can see. PyTorch's caching allocator carves tensors out of segments
of 2 MiB and more, so a read or write past a tensor's end usually lands inside the same segment, at an address
memcheck counts as valid. The child therefore runs with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (each tensor its
own ``cudaMalloc``) and without ``PYTORCH_CUDA_ALLOC_CONF``/``PYTORCH_ALLOC_CONF`` (a ``cudaMallocAsync`` pool or
expandable segments would hide bounds the same way), and memcheck runs with ``--padding``
(:data:`MEMCHECK_PADDING` bytes of guard after every allocation, since ``cudaMalloc`` may place two tensors
back to back and an overrun of one would land in the other): an access up to 1 MiB past a tensor's end, or
before the start of the next one, is reported. Fresh allocations also let initcheck see every tensor as
uninitialised until written (no bytes left initialised by an earlier tensor in a reused block). What stays
hidden: an access that stays inside one allocation (a view the spec carves out of a larger tensor, such as
``randn(..., row_padding=)`` inputs; a wrong offset into the right tensor, which the checklist's comparison
catches instead).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from kernelworks.check.engine import CaseResult, select_cases
from kernelworks.check.sanitize_log import ERROR_EXITCODE, TOOLS, IgnoreRule, judge, parse_ignores, parse_log
from kernelworks.spec import STEP, Case, OpSpec

TIMEOUTS = {"memcheck": 300.0, "synccheck": 300.0, "initcheck": 600.0, "racecheck": 900.0}
"""Seconds one run may take per tool (process start, import, Triton's compile and the watched case): racecheck
and initcheck instrument every shared or global access and run far slower. ``--sanitize-timeout`` overrides."""

MEMCHECK_PADDING = 1 << 20
"""Bytes of guard memcheck puts after every allocation (``--padding``): larger than a kernel's tile of any op
here, so an overrun by a block or a row is reported rather than landing in the next tensor."""

INSTALL_HINT = ("It ships with the CUDA toolkit, in its bin/ folder (https://developer.nvidia.com/cuda-downloads), "
                "and in NVIDIA's wheel (`pip install nvidia-cuda-sanitizer-api` for CUDA 13, "
                "`nvidia-cuda-sanitizer-api-cu12` for CUDA 12): put its folder on PATH or point CUDA_HOME at the "
                "toolkit")


# ------------------------------------------------------------------------------------------ what is needed

def find_sanitizer() -> str | None:
    """The ``compute-sanitizer`` executable: on ``PATH``, else in ``$CUDA_HOME/bin`` (or ``$CUDA_PATH/bin``),
    ``/usr/local/cuda/bin``, or a pip-installed ``nvidia-cuda-sanitizer-api``; None when there is none."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    places = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    places.append(Path("/usr/local/cuda/bin"))
    try:
        import nvidia  # namespace package of NVIDIA's wheels: nvidia/cu13/bin/, nvidia/cuda_sanitizer_api/…

        roots = [Path(p) for p in nvidia.__path__]
    except ImportError:
        roots = []
    candidates = [p / "compute-sanitizer" for p in places]
    for root in roots:
        candidates += sorted(root.glob("*/bin/compute-sanitizer")) + sorted(
            root.glob("*/compute-sanitizer/compute-sanitizer"))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def unavailable() -> str | None:
    """Why ``kw check --sanitize`` cannot run here, one ``- `` line per thing missing, each saying how to get it;
    None when nothing is missing."""
    import torch

    missing = []
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        missing.append(f"no CUDA GPU is visible to PyTorch (torch {torch.__version__}, {build}): compute-sanitizer "
                       "watches kernels running on an NVIDIA GPU. Run --sanitize on a machine with one; plain "
                       "`kw check` runs the checklist here, in Triton's interpreter.")
    if find_sanitizer() is None:
        home = os.environ.get("CUDA_HOME")
        where = f"$CUDA_HOME/bin ({home}/bin)" if home else "$CUDA_HOME/bin (CUDA_HOME is unset)"
        missing.append(f"compute-sanitizer was not found on PATH, in {where}, /usr/local/cuda/bin or pip's nvidia "
                       f"packages. {INSTALL_HINT}.")
    return "\n".join(f"- {m}" for m in missing) or None


def parse_tools(tools: str | Iterable[str] | bool) -> tuple[str, ...]:
    """Tool names from ``"memcheck,racecheck"``, a list, or True (all of :data:`TOOLS`); unknown names raise
    ``ValueError``."""
    if tools is True:
        return TOOLS
    names = [t.strip() for t in (tools.split(",") if isinstance(tools, str) else tools) if t.strip()]
    unknown = [t for t in names if t not in TOOLS]
    if unknown or not names:
        raise ValueError(f"unknown compute-sanitizer tool(s) {unknown or names}; choose from {', '.join(TOOLS)}")
    return tuple(dict.fromkeys(names))


def spec_target(spec: OpSpec) -> str:
    """What the child process passes to :func:`~kernelworks.spec.load_spec` to get ``spec`` back: its name when
    registered, else ``/abs/path/file.py:ATTR`` of the module-level name it is bound to."""
    from kernelworks.spec import registry

    if registry().get(spec.name) is spec:
        return spec.name
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not str(file).endswith(".py"):
            continue
        try:
            names = [k for k, v in vars(module).items() if v is spec]
        except TypeError:
            continue
        if names:
            return f"{Path(file).resolve()}:{names[0]}"
    raise ValueError(f"spec {spec.name!r} is not registered nor bound to a name in a .py file, so a child process "
                     "cannot load it: define it at module level in a file (kw check path/to/file.py:SPEC)")


# ------------------------------------------------------------------------------------------ the child run

def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (this process's by default) with the caching allocator off (see the
    module docstring), Triton's interpreter off, and this ``kernelworks`` first on ``PYTHONPATH``."""
    import kernelworks

    env = dict(os.environ if base is None else base)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TRITON_INTERPRET"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    src = str(Path(kernelworks.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def child_command(sanitizer: str, tool: str, target: str, case_id: str, seed: int, log_file: Path | str, *,
                  provider: str | None = None, padding: int = MEMCHECK_PADDING,
                  python: str = sys.executable) -> list[str]:
    """The command line of one watched run (``padding``: memcheck's guard bytes after each allocation, 0 for
    none; other tools take no padding)."""
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXITCODE), "--log-file", str(log_file)]
    if tool == "memcheck" and padding:
        cmd += ["--padding", str(padding)]
    cmd += [python, "-m", "kernelworks.check.sanitize_child", target, case_id, "--seed", str(seed)]
    if provider:
        cmd += ["--provider", provider]
    return cmd


# ---------------------------------------------------------------------------------------------- running

def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name)  # no '%': compute-sanitizer expands %p, %q{…} in --log-file names


def _run(cmd: Sequence[str], env: dict[str, str], timeout: float) -> tuple[int | None, str, bool]:
    """Run ``cmd`` in its own session; on time-out (or an interrupt) kill its whole process group (the
    sanitizer and the Python it started). Returns ``(exit status, output, timed out)``."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        return None, out, True
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): leave no sanitizer behind
            _kill_group(proc)
            proc.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def sanitize_case(spec: OpSpec, case: Case, tool: str, *, target: str, seed: int, log_dir: Path,
                  sanitizer: str, provider: str | None = None, timeout: float | None = None,
                  padding: int = MEMCHECK_PADDING, ignore: Sequence[IgnoreRule] = ()) -> CaseResult:
    """One case under one tool, in a child process; its result's ``sanitizer`` holds the verdict and the
    log's path (the log is in ``log_dir``)."""
    name = provider or spec.subject
    prov = spec.provider(name)
    mode = STEP if spec.grad_inputs and prov.supports_backward else "fwd"
    res = CaseResult(spec.name, case, mode, name, tool=tool)
    ok, why = prov.available()
    if not ok:
        res.skipped = why
        return res
    log_file = log_dir / _safe(f"{spec.name}-{case.id}-{name}-{tool}.log")
    limit = timeout or TIMEOUTS[tool]
    cmd = child_command(sanitizer, tool, target, case.id, seed, log_file, provider=provider, padding=padding)
    log_file.unlink(missing_ok=True)
    t0 = time.perf_counter()
    returncode, output, timed_out = _run(cmd, child_env(), limit)
    res.seconds = time.perf_counter() - t0
    text = log_file.read_text(errors="replace") if log_file.is_file() else ""
    res.sanitizer = outcome = judge(tool, parse_log(text), returncode, output, ignore=ignore,
                                    timed_out=timed_out, timeout=limit)
    outcome.log = str(log_file)
    if outcome.status == "skipped":
        res.skipped = outcome.message
    elif outcome.status != "clean":
        res.problems.append(f"{outcome.message}\n(log: {log_file})")
    res.notes += [f"{note}\n(log: {log_file})" for note in outcome.notes]
    return res


def run_sanitize(spec: OpSpec, cases: Iterable[str] | None = None, *, tools: str | Iterable[str] = TOOLS,
                 provider: str | None = None, seed: int = 0, tags: Iterable[str] | None = None,
                 timeout: float | None = None, log_dir: str | Path | None = None, progress: bool = False,
                 sanitizer: str | None = None, padding: int = MEMCHECK_PADDING,
                 ignore: Iterable[str | IgnoreRule] = ()) -> list[CaseResult]:
    """Run every selected check case of ``spec`` under each of ``tools`` (same selection and seeds as
    :func:`~kernelworks.check.engine.run_check`); one result per (case, tool).

    ``tools``: names, or ``"memcheck,racecheck"``. ``timeout``: seconds per run (default per tool:
    :data:`TIMEOUTS`). ``log_dir``: keep every log there; by default logs go to a temporary folder and only
    those with something to read are kept (errors, warnings, ignored reports, a run that did not finish; their
    paths are in the results' text and ``sanitizer.log``). ``sanitizer``: the executable (default
    :func:`find_sanitizer`, once :func:`unavailable` finds nothing missing). ``padding``: memcheck's guard bytes
    after each allocation. ``ignore``: ``TOOL:KERNEL_GLOB`` rules (:func:`~kernelworks.check.sanitize_log.
    parse_ignore`) whose reports are counted apart, not as errors. Raises ``ValueError`` for a malformed tool
    or rule and ``RuntimeError`` saying what is missing where it cannot run (no GPU, no compute-sanitizer)."""
    chosen_tools, rules = parse_tools(tools), parse_ignores(ignore)
    if sanitizer is None:
        why = unavailable()
        if why:
            raise RuntimeError(f"kw check --sanitize cannot run here:\n{why}")
        sanitizer = find_sanitizer()
        assert sanitizer is not None
    chosen = select_cases(spec, cases, tags)
    target = spec_target(spec)
    keep_all = log_dir is not None
    folder = Path(log_dir) if keep_all else Path(tempfile.mkdtemp(prefix="kw-sanitize-"))
    folder.mkdir(parents=True, exist_ok=True)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(chosen) * len(chosen_tools), desc=f"sanitize {spec.name}", unit="run", leave=False)
    out: list[CaseResult] = []
    try:
        for i, c in enumerate(chosen):
            for tool in chosen_tools:
                if bar is not None:
                    bar.set_postfix_str(f"{c.id} {tool}")
                res = sanitize_case(spec, c, tool, target=target, seed=seed + i, log_dir=folder,
                                    sanitizer=sanitizer, provider=provider, timeout=timeout, padding=padding,
                                    ignore=rules)
                if not keep_all and res.sanitizer is not None and not res.sanitizer.noteworthy:
                    Path(res.sanitizer.log).unlink(missing_ok=True)
                    res.sanitizer.log = ""
                out.append(res)
                if bar is not None:
                    bar.update()
    finally:
        if bar is not None:
            bar.close()
        if not keep_all and not any(folder.iterdir()):
            folder.rmdir()
    return out


def sanitize_summary(results: Sequence[CaseResult]) -> str:
    """One line over the sanitizer's results (empty when there are none): tools, clean, with errors, not
    finished, skipped, and the reports ignored."""
    runs = [r for r in results if r.tool]
    if not runs:
        return ""
    tools = ", ".join(dict.fromkeys(r.tool for r in runs))
    status = [r.sanitizer.status if r.sanitizer else "skipped" for r in runs]
    ignored = sum(r.sanitizer.ignored for r in runs if r.sanitizer)
    return (f"compute-sanitizer ({tools}): {status.count('clean')} clean, {status.count('errors')} with errors, "
            f"{status.count('failed')} did not finish, {status.count('skipped')} skipped"
            + (f"; {ignored} reports ignored" if ignored else ""))
