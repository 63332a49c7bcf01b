"""The workbench in Python: ``kernelworks.check`` and ``kernelworks.bench`` over any spec.

``spec`` is an :class:`~kernelworks.spec.OpSpec`, a registered op's name, or ``path/to/file.py:ATTR``, so a
user's own kernel is checked and timed exactly like ours.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# Imported eagerly, before ``kernelworks/__init__`` binds the names ``check`` and ``bench`` to the functions
# below: a subpackage imported for the first time later would overwrite ``kernelworks.check`` with itself.
import kernelworks.bench
import kernelworks.check  # noqa: F401
from kernelworks.spec import OpSpec, load_spec


def _resolve(spec: OpSpec | str) -> OpSpec:
    return spec if isinstance(spec, OpSpec) else load_spec(spec)


def check(spec: OpSpec | str, cases: Iterable[str] | None = None, *, provider: str | None = None,
          seed: int = 0, verbose: bool = True, probes: bool = True, adversarial: bool = False,
          sanitize: bool | str | Iterable[str] = False, sanitize_timeout: float | None = None,
          sanitize_ignore: Iterable[str] = ()) -> list:
    """Run the correctness checklist; prints the table when ``verbose``; returns the per-case results.
    ``probes`` (default) adds two cheat probes to each forward, fresh values in the same tensors and fresh
    tensors (results cached by address or shape; one more provider call each); ``adversarial`` all four (also
    ignored inputs and hard-coded sizes). ``sanitize`` (GPU) adds
    each case run under compute-sanitizer, one result per case and tool (``True``: memcheck, racecheck,
    initcheck, synccheck; or tool names), each a fresh process limited to ``sanitize_timeout`` seconds
    (default per tool), its verdict in the result's ``sanitizer``; ``sanitize_ignore`` holds
    ``TOOL:KERNEL_GLOB`` rules for known false positives (counted apart, not failures). It raises
    ``RuntimeError`` saying what is missing where it cannot run (no GPU, no compute-sanitizer),
    ``ValueError`` for an unknown tool or a malformed rule.

    Example::

        results = kernelworks.check("softmax")
        assert all(r.passed or r.skipped for r in results)
        kernelworks.check("softmax", ["13x127"], sanitize=["memcheck"])   # on a GPU
        kernelworks.check("softmax", sanitize=True, sanitize_ignore=["initcheck:at::native::*"])
    """
    from kernelworks.check import check_table, run_check

    s = _resolve(spec)
    tools: tuple[str, ...] = ()
    if sanitize is not False:
        from kernelworks.check.sanitize import parse_tools, unavailable
        from kernelworks.check.sanitize_log import parse_ignores

        tools, rules = parse_tools(sanitize), parse_ignores(sanitize_ignore)
        why = unavailable()
        if why:  # before the checklist runs, as `kw check --sanitize` does
            raise RuntimeError(f"kw check --sanitize cannot run here:\n{why}")
    results = run_check(s, cases, provider=provider, seed=seed, progress=verbose, probes=probes,
                        adversarial=adversarial)
    if tools:
        from kernelworks.check.sanitize import run_sanitize

        results += run_sanitize(s, cases, tools=tools, provider=provider, seed=seed, timeout=sanitize_timeout,
                                progress=verbose, ignore=rules)
    if verbose:
        print(check_table(results))
    return results


def bench(spec: OpSpec | str, cases: Iterable[str] | None = None, *, providers: Iterable[str] | None = None,
          modes: Iterable[str] | None = None, save: Path | None = None, verbose: bool = True,
          cuda_graph: bool = False) -> list:
    """Time every provider of the spec on its bench cases (GPU only); optionally save a results JSON
    under ``save/<gpu>/<op>.json``. Returns the records.

    Example::

        records = kernelworks.bench("softmax", ["8192x8192"], providers=["kernelworks", "torch"])
    """
    from kernelworks.bench import bench_table, run_bench
    from kernelworks.bench.results import environment
    from kernelworks.bench.results import save as save_results
    from kernelworks.hardware import ceilings

    s = _resolve(spec)
    ceil = ceilings()
    records = run_bench(s, cases, providers=providers, modes=modes, progress=verbose, cuda_graph=cuda_graph,
                        ceil=ceil)
    if verbose:
        print(bench_table(records, subject=s.subject))
    if save is not None:
        path = save_results(records, s.name, environment(ceil), Path(save))
        if verbose:
            print(f"saved {path}")
    return records
