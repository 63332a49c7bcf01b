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
          seed: int = 0, verbose: bool = True, adversarial: bool = False) -> list:
    """Run the correctness checklist; prints the table when ``verbose``; returns the per-case results.
    ``adversarial`` adds the cheat probes (results cached by address or shape, ignored inputs, a lower
    precision than the dtype promises, hard-coded sizes).

    Example::

        results = kernelworks.check("softmax")
        assert all(r.passed or r.skipped for r in results)
    """
    from kernelworks.check import check_table, run_check

    s = _resolve(spec)
    results = run_check(s, cases, provider=provider, seed=seed, progress=verbose, adversarial=adversarial)
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
