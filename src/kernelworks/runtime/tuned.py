"""Tuned configs shipped in the package, one JSON table per GPU, read by the ops at plan time.

``kw tune OP --write`` puts each case's winner into ``<op package>/tuned/<gpu-slug>.json`` (the slug as the
results folders name GPUs: ``NVIDIA H100 80GB HBM3`` → ``h100-80gb-hbm3``)::

    {"gpu": "NVIDIA H100 80GB HBM3",
     "entries": {"matmul": {"M64-N6144-K4096-2B-ieee": {"config": {...}, "triton": "3.6.0",
                                                         "source": "<16 hex>", "case": "...", ...}}}}

An op asks its :class:`TunedTable` for the entry of a shape bucket (:meth:`TunedTable.get`); the bucket
function is the op's (matmul: :func:`kernelworks.ops.gemm.forward.matmul_bucket`). An entry is used only
when its triton version is the running one and its source hash is that of the files the table names (the
kernels and their launcher, as they are now): any edit to them, or another triton, makes it stale and the op
falls back to its own heuristic, as it does on a GPU with no table. Under the interpreter tables are never
read; ``KERNELWORKS_TUNED=0`` (or :func:`ignored`) turns them off. ``kw inspect`` on a GPU shows the
tuned plan (what runs there); on a machine without a GPU there is no table to read.

Host cost: the table file is read once per process, and each (device, shape) is looked up once
(``lru_cache``); a call then pays one cached lookup, ~0.2 µs. :func:`recording` lets ``kw tune --write``
learn which bucket a case falls in by running the op's launcher (captured, nothing runs) instead of
restating the op's bucket rule.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton

from kernelworks.runtime.device import has_gpu

ENV = "KERNELWORKS_TUNED"
"""``0`` turns the shipped tables off (every op plans with its own heuristic)."""
_recording: list[tuple[TunedTable, str]] | None = None
_off = os.environ.get(ENV, "1").lower() in ("0", "false", "off", "no")


def gpu_slug(name: str | None) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: the name of a GPU's table and results folder."""
    if not name:
        return "cpu"
    name = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@functools.lru_cache(maxsize=16)
def gpu_name(index: int) -> str | None:
    """The marketing name of CUDA device ``index`` (whose table is read), None without a GPU."""
    return torch.cuda.get_device_name(index) if has_gpu() else None


@dataclass(frozen=True, eq=False)
class TunedTable:
    """One op's shipped tables: ``folder/<gpu-slug>.json``, entries under ``op``.

    ``sources``: the files (the kernels and their launcher) whose content the entries' source hash covers.
    ``bucket(*key) -> str``: the op's shape bucket of a lookup key. ``convert(config)``: an entry's config as
    the op uses it (matmul: a ``Plan``); computed once per bucket.
    """

    op: str
    folder: Path
    sources: tuple[Path, ...]
    bucket: Callable[..., str]
    convert: Callable[[dict[str, Any]], Any]

    def path(self, gpu: str | None) -> Path:
        """The table file of the GPU named ``gpu``."""
        return self.folder / f"{gpu_slug(gpu)}.json"

    def source_hash(self) -> str:
        """sha256 (16 hex digits) of the ``sources`` as they are now."""
        return _source_hash(self.sources)

    def get(self, device: int, *key: Any) -> Any | None:
        """The converted config for ``key``'s bucket on CUDA device ``device``, None when there is no fresh
        entry (no table for this GPU, no entry, another triton, or changed sources)."""
        if _recording is not None:
            _recording.append((self, self.bucket(*key)))
        if _off:
            return None
        return _lookup(self, device, key)

    def entry(self, gpu: str | None, bucket: str) -> dict[str, Any] | None:
        """The raw entry for ``bucket`` in ``gpu``'s table (fresh or not)."""
        return _load(self.path(gpu)).get("entries", {}).get(self.op, {}).get(bucket)

    def fresh(self, entry: dict[str, Any]) -> bool:
        """True when ``entry`` was measured with this triton and these sources."""
        return entry.get("triton") == triton.__version__ and entry.get("source") == self.source_hash()


@functools.lru_cache(maxsize=64)
def _source_hash(sources: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in sources:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


@functools.lru_cache(maxsize=4096)
def _lookup(table: TunedTable, device: int, key: tuple) -> Any | None:
    name = gpu_name(device)
    if name is None:
        return None
    entry = table.entry(name, table.bucket(*key))
    if entry is None or not table.fresh(entry):
        return None
    return table.convert(dict(entry["config"]))


def clear_cache() -> None:
    """Forget loaded tables and lookups (after writing a table, or in tests)."""
    for fn in (gpu_name, _source_hash, _load, _lookup):
        getattr(fn, "cache_clear", lambda: None)()  # gpu_name may be a test's stand-in


@contextlib.contextmanager
def ignored() -> Iterator[None]:
    """Within the block the ops ignore their tables and plan with their heuristics (tests of a heuristic;
    ``KERNELWORKS_TUNED=0`` does it for a whole process)."""
    global _off
    before, _off = _off, True
    try:
        yield
    finally:
        _off = before


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[TunedTable, str]]]:
    """Within the block, every :meth:`TunedTable.get` also appends ``(table, bucket)`` to the yielded list."""
    global _recording
    before, _recording = _recording, []
    try:
        yield _recording
    finally:
        _recording = before
