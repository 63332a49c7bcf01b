"""The compile worker: a child process where Triton is not the interpreter (see :mod:`.compile`).

The parent sends a kernel *by reference* (module, file, qualified name: the child imports it afresh, so it
is a real ``JITFunction`` there) with a ready specialization; the child compiles and sends back a
:class:`~kernelworks.inspect.compile.Compiled`. One worker serves a whole process (started on first use,
~2 s to import torch and Triton) and exits with it. Messages are length-prefixed pickles on the child's
stdin/stdout; anything else the child prints goes to stderr.

Run as ``python -m kernelworks.inspect.worker`` (by :func:`compile_in_worker`, never by hand).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import importlib.util
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kernelworks.inspect.compile import Compiled, Specialization, as_jit
from kernelworks.inspect.targets import Target, resolve_target


@dataclass(frozen=True)
class KernelRef:
    """Where a ``@triton.jit`` function is defined, enough for another process to import it."""

    module: str
    file: str
    qualname: str


def kernel_ref(kernel: Any) -> KernelRef:
    """The reference of a kernel object (interpreted or not); kernels defined inside functions have none."""
    fn = as_jit(kernel).fn
    if "<locals>" in fn.__qualname__:
        raise ValueError(f"kernel {fn.__qualname__}: defined inside a function, so the compile worker cannot "
                         "import it; define it at module level")
    return KernelRef(fn.__module__, os.path.realpath(fn.__code__.co_filename), fn.__qualname__)


def _encode(value: Any) -> Any:
    """Constexpr values that are JIT functions travel as references."""
    if hasattr(value, "fn") and callable(value):
        try:
            return kernel_ref(value)
        except (TypeError, ValueError):
            return value
    return value


# ----------------------------------------------------------------------------------------------- the child

_FILE_MODULES: dict[tuple[str, float], Any] = {}


def _module_of(ref: KernelRef) -> Any:
    module = sys.modules.get(ref.module)
    if module is None and ref.module != "__main__":
        try:
            module = importlib.import_module(ref.module)
        except ImportError:
            module = None
    if module is not None and os.path.realpath(getattr(module, "__file__", "") or "") == ref.file:
        return module
    key = (ref.file, Path(ref.file).stat().st_mtime)
    if key not in _FILE_MODULES:
        name = f"_kw_inspect_{Path(ref.file).stem}_{hashlib.sha1(ref.file.encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(name, ref.file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {ref.file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _FILE_MODULES[key] = module
    return _FILE_MODULES[key]


def resolve(ref: KernelRef) -> Any:
    """The object a :class:`KernelRef` names, imported in this process."""
    obj = _module_of(ref)
    for part in ref.qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _handle(job: dict[str, Any]) -> Compiled:
    from kernelworks.inspect.compile import compile_here

    consts = {k: resolve(v) if isinstance(v, KernelRef) else v for k, v in job["constexprs"].items()}
    spec = Specialization(job["signature"], consts, job["attrs"])
    return compile_here(resolve(job["kernel"]), spec, resolve_target(job["target"]), job["options"])


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(size))


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def main() -> None:
    """The child's loop: one job in, one ``Compiled`` (or ``("error", message)``) out, until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints (ptxas, Triton) must not corrupt the protocol
    while (job := _read(sys.stdin.buffer)) is not None:
        try:
            result: Any = _handle(job)
        except Exception as e:  # reported to the parent, which raises it there
            result = ("error", f"{type(e).__name__}: {e}")
        _write(out, result)


# ---------------------------------------------------------------------------------------------- the parent


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelworks.inspect.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, job: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        _write(self.proc.stdin, job)
        result = _read(self.proc.stdout)
        if result is None:
            raise RuntimeError(f"the compile worker died (exit status {self.proc.wait()}); see its stderr above")
        return result

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_WORKER: _Worker | None = None
_LOCK = threading.Lock()


def _shutdown() -> None:
    if _WORKER is not None:
        _WORKER.close()


atexit.register(_shutdown)


def compile_in_worker(kernel: Any, spec: Specialization, target: Target,
                      options: Mapping[str, Any] | None = None) -> Compiled:
    """Compile in the worker process (started on first use); compile errors come back as ``RuntimeError``."""
    global _WORKER
    job = {"kernel": kernel_ref(kernel), "signature": spec.signature, "attrs": spec.attrs,
           "constexprs": {k: _encode(v) for k, v in spec.constexprs.items()}, "target": target.name,
           "options": dict(options or {})}
    with _LOCK:
        if _WORKER is None or not _WORKER.alive():
            _WORKER = _Worker()
        result = _WORKER.request(job)
    if isinstance(result, tuple):
        raise RuntimeError(f"compiling {job['kernel'].qualname} for {target.name}: {result[1]}")
    return result


@dataclass(frozen=True)
class CompileJob:
    """One compile for :func:`compile_many`: a kernel, its specialization, the target and launch options."""

    kernel: Any
    spec: Specialization
    target: Target
    options: Mapping[str, Any]


class CompileTimeoutError(RuntimeError):
    """A compile that ran past its time-out (its worker process was killed)."""


def _job(job: CompileJob) -> dict[str, Any]:
    return {"kernel": kernel_ref(job.kernel), "signature": job.spec.signature, "attrs": job.spec.attrs,
            "constexprs": {k: _encode(v) for k, v in job.spec.constexprs.items()}, "target": job.target.name,
            "options": dict(job.options)}


def compile_many(jobs: list[CompileJob], *, workers: int = 4, timeout_s: float = 120.0
                 ) -> list[Compiled | Exception]:
    """Compile ``jobs`` in up to ``workers`` worker processes at once, each compile bounded by ``timeout_s``
    seconds: one :class:`Compiled` per job, in order, or the exception it raised (``RuntimeError`` for a
    compile error, :class:`CompileTimeoutError` when the worker was killed at the time-out).

    Processes rather than a ``ProcessPoolExecutor``: a compile that hangs must be stopped, and killing one
    process of an executor breaks the whole pool; here the killed worker is replaced and the rest go on.
    The time-out starts when the job is sent, so a worker's start (~2 s to import torch and Triton) is not
    counted against it."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    n = max(1, min(workers, len(jobs)))
    idle: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
    for _ in range(n):
        idle.put(None)  # started on first use, by the thread that takes it
    started: list[_Worker] = []

    def one(job: CompileJob) -> Compiled | Exception:
        worker = idle.get()
        try:
            try:
                message = _job(job)
            except (TypeError, ValueError) as e:  # a kernel defined inside a function cannot travel
                return e
            if worker is None or not worker.alive():
                worker = _Worker()
                started.append(worker)
            timer = threading.Timer(timeout_s, worker.proc.kill)
            timer.start()
            try:
                result = worker.request(message)
            except Exception:  # killed mid-exchange: EOF, a short read or a broken pipe
                if timer.finished.is_set():
                    return CompileTimeoutError(f"compiling {message['kernel'].qualname} for {job.target.name}: "
                                          f"no result after {timeout_s:g} s")
                raise
            finally:
                timer.cancel()
            if isinstance(result, tuple):
                return RuntimeError(f"compiling {message['kernel'].qualname} for {job.target.name}: {result[1]}")
            return result
        except Exception as e:  # a dead worker: that job's verdict, the others go on
            return e
        finally:
            idle.put(worker)

    try:
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(one, jobs))
    finally:
        for worker in started:
            worker.close()


if __name__ == "__main__":
    main()
