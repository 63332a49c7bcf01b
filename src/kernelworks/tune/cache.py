"""Tuned winners cached per GPU, triton version, source and case (``$KERNELWORKS_CACHE/tune.json``).

An entry is used only when all four match: a different GPU or triton, or any edit to the file that defines
the spec's subject provider (its kernels, in the usual layout) or the spec, makes it stale, and stale
entries are never returned.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import time
from pathlib import Path
from typing import Any

import torch
import triton

from kernelworks.hardware import _cache_dir
from kernelworks.spec import Case, OpSpec


def _path() -> Path:
    return _cache_dir() / "tune.json"


def source_hash(spec: OpSpec) -> str:
    """sha256 (16 hex digits) of the files defining the subject provider, the spec's reference and inputs,
    and the sources its shipped table covers (``spec.tuned``: the kernels and their launcher)."""
    digest = hashlib.sha256()
    for fn in (spec.providers[spec.subject].fn, spec.reference, spec.inputs):
        path = _defining_file(fn)
        if path is not None:
            digest.update(Path(path).read_bytes())
        else:  # a builtin (torch.softmax): its name and the version of the library that defines it
            digest.update(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))} "
                          f"torch {torch.__version__}".encode())
    if spec.tuned is not None:  # the kernels and launcher, where they live apart from the provider (matmul)
        digest.update(spec.tuned.source_hash().encode())
    return digest.hexdigest()[:16]


def _defining_file(fn: Any) -> str | None:
    """The source file of a provider, reference or inputs callable: a function (unwrapped), a
    ``functools.partial``'s function, an ``nn.Module``'s ``forward``, another callable object's ``__call__``;
    None when there is none (a builtin)."""
    fn = inspect.unwrap(fn)
    while isinstance(fn, functools.partial):
        fn = inspect.unwrap(fn.func)
    if not (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn)):
        fn = type(fn).forward if isinstance(fn, torch.nn.Module) else type(fn).__call__
    try:
        return inspect.getsourcefile(fn)
    except TypeError:
        return None


def _device() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def key(spec: OpSpec, case: Case, mode: str = "fwd") -> str:
    """The cache key of one case's winner here: GPU, triton version, source hash, op, case (and ``bwd`` for
    the backward's winner)."""
    return f"{_device()}|triton {triton.__version__}|{source_hash(spec)}|{spec.name}|{case.id}" + \
        ("|bwd" if mode == "bwd" else "")


def _load() -> dict[str, Any]:
    try:
        return json.loads(_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def lookup(spec: OpSpec, case: Case, mode: str = "fwd") -> dict[str, Any] | None:
    """The cached winning config of pass ``mode`` for ``case`` on this GPU, triton and source, else None."""
    entry = _load().get(key(spec, case, mode))
    return None if entry is None else dict(entry["config"])


def store(spec: OpSpec, case: Case, config: dict[str, Any], mode: str = "fwd") -> None:
    """Cache ``config`` as the winner of pass ``mode`` for ``case`` here."""
    data = _load()
    data[key(spec, case, mode)] = {"config": config, "date": time.strftime("%Y-%m-%d")}
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
