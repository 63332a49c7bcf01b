"""The corpus only a GPU's timing can judge: providers whose answer is right but whose work escapes the
events ``kw bench`` times (6 cheats of 3 kinds), and honest ones that use the same machinery legally (5).

Every cheat computes inline on its first call (``kw bench`` verifies that one) and escapes from the second
on. The cases are large enough that the escaped work (0.2–1 ms) dwarfs a call's host time (~30–100 µs),
which is what the probes need to see it (:mod:`kernelworks.bench.probes`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree

from .corpus import BF16, Entry, case, on

MATMUL = [case("4096x4096x4096", BF16, M=4096, N=4096, K=4096)]
"""~0.2 ms of tensor-core work on an H100."""
MATMUL_BIG = [case("8192x8192x4096", BF16, M=8192, N=8192, K=4096)]
"""~0.8 ms: longer than a Python thread's start (~50–100 µs) many times over."""
SOFTMAX = [case("16384x8192", BF16, rows=16384, cols=8192)]
"""~0.2 ms of memory traffic (2 × 256 MiB)."""


def after_first_call(honest: Callable[..., torch.Tensor], cheat: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """``honest`` on the first call (the one ``kw bench`` verifies), ``cheat`` on every later one."""
    calls = [0]

    def fn(**kw: Any) -> torch.Tensor:
        calls[0] += 1
        return honest(**kw) if calls[0] == 1 else cheat(**kw)
    return fn


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


# --------------------------------------------------------------------------------------- side streams


def side_stream(compute: Callable[..., torch.Tensor], *, per_call: bool = False) -> Callable[..., torch.Tensor]:
    """``compute`` launched on a side stream that the caller's stream never waits for."""
    fixed = torch.cuda.Stream() if torch.cuda.is_available() else None

    def cheat(**kw: Any) -> torch.Tensor:
        stream = torch.cuda.Stream() if per_call else fixed
        stream.wait_stream(torch.cuda.current_stream())  # inputs ready; the result is never waited for
        with torch.cuda.stream(stream):
            return compute(**kw)
    return after_first_call(compute, cheat)


def joined_side_stream(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The honest form: the caller's stream waits for the side stream, the output is recorded on both."""
    stream = torch.cuda.Stream() if torch.cuda.is_available() else None

    def fn(**kw: Any) -> torch.Tensor:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            out = compute(**kw)
        torch.cuda.current_stream().wait_stream(stream)
        out.record_stream(torch.cuda.current_stream())
        return out
    return fn


# -------------------------------------------------------------------------------------------- threads


def _on_own_stream(work: Callable[[], Any]) -> Callable[[], None]:
    """``work`` run on a stream of the calling thread's own. (A thread launching onto the caller's stream
    may get its launch in before the caller records its end event — then the events do time it.)"""
    def run() -> None:
        with torch.cuda.stream(torch.cuda.Stream()):
            work()
    return run


def thread_per_call(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Each call starts a thread that launches ``compute`` into the returned buffer, and returns at once."""
    def cheat(**kw: Any) -> torch.Tensor:
        out = _empty_like_result(compute, kw)
        threading.Thread(target=_on_own_stream(lambda: out.copy_(compute(**kw))), daemon=True).start()
        return out
    return after_first_call(compute, cheat)


def worker_thread(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A persistent worker thread (started before the timing, on its own stream) launches ``compute``; the
    call only enqueues a job."""
    jobs: queue.Queue = queue.Queue()

    def work() -> None:
        while True:
            out, kw = jobs.get()
            out.copy_(compute(**kw))

    threading.Thread(target=_on_own_stream(work), daemon=True).start()

    def cheat(**kw: Any) -> torch.Tensor:
        out = _empty_like_result(compute, kw)
        jobs.put((out, kw))
        return out
    return after_first_call(compute, cheat)


def joined_thread(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The honest form: the thread is joined and the caller's stream waits for the device before returning."""
    def fn(**kw: Any) -> torch.Tensor:
        box: list[torch.Tensor] = []
        t = threading.Thread(target=lambda: box.append(compute(**kw)))
        t.start()
        t.join()
        torch.cuda.synchronize()
        return box[0]
    return fn


_RESULTS: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}


def _result_meta(compute: Callable[..., torch.Tensor], kw: dict[str, Any]) -> tuple[tuple[int, ...], torch.dtype]:
    """``compute``'s output shape and dtype (learnt once per function, from a real call)."""
    if id(compute) not in _RESULTS:
        out = compute(**kw)
        _RESULTS[id(compute)] = (tuple(out.shape), out.dtype)
    return _RESULTS[id(compute)]


def _empty_like_result(compute: Callable[..., torch.Tensor], kw: dict[str, Any]) -> torch.Tensor:
    shape, dtype = _result_meta(compute, kw)
    return torch.empty(shape, dtype=dtype, device="cuda")


# ------------------------------------------------------------------------------------------- lazy results


class LazyTensor(torch.Tensor):
    """A tensor whose values are computed on first use (any torch op on it), not when it is returned."""

    @staticmethod
    def __new__(cls, compute: Callable[[], torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> LazyTensor:
        t = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=device)
        t._compute, t._value = compute, None
        return t

    def materialize(self) -> torch.Tensor:
        if self._value is None:
            self._value = self._compute()
        return self._value

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(a: Any) -> Any:
            return a.materialize() if isinstance(a, LazyTensor) else a
        return func(*_pytree.tree_map(unwrap, args), **_pytree.tree_map(unwrap, kwargs or {}))


def lazy(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Returns a :class:`LazyTensor` that runs ``compute`` when read."""
    def cheat(**kw: Any) -> torch.Tensor:
        shape, dtype = _result_meta(compute, kw)
        return LazyTensor(lambda: compute(**kw), shape, dtype, torch.device("cuda"))
    return after_first_call(compute, cheat)


# ---------------------------------------------------------------------------------------- CUDA graphs


def graph_replay(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Honest: copies the inputs into static buffers and replays a captured graph (per input shapes); the
    output is cloned so later replays cannot change what the caller holds."""
    graphs: dict[Any, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], torch.Tensor]] = {}

    def fn(**kw: Any) -> torch.Tensor:
        key = tuple((k, tuple(v.shape), v.dtype) for k, v in kw.items())
        if key not in graphs:
            static = {k: v.clone() for k, v in kw.items()}
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                compute(**static)  # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = compute(**static)
            graphs[key] = (graph, static, out)
        graph, static, out = graphs[key]
        for k, v in kw.items():
            static[k].copy_(v)
        graph.replay()
        return out.clone()
    return fn


def _gpu_entries() -> tuple[list[Entry], list[Entry]]:
    def bench(op: str, fn: Callable[..., Any], cases: list) -> Callable[[], Any]:
        return lambda: on(op, fn(), cases, bench=True)

    cheats = [
        Entry("matmul-side-stream", "side stream", bench("matmul", lambda: side_stream(matmul), MATMUL),
              ("outside stream",)),
        Entry("softmax-side-stream-per-call", "side stream",
              bench("softmax", lambda: side_stream(softmax, per_call=True), SOFTMAX), ("outside stream",)),
        Entry("matmul-thread-per-call", "thread launch",
              bench("matmul", lambda: thread_per_call(matmul), MATMUL_BIG), ("outside stream",)),
        Entry("matmul-worker-thread", "thread launch",
              bench("matmul", lambda: worker_thread(matmul), MATMUL_BIG), ("outside stream",)),
        Entry("matmul-lazy-tensor", "lazy result", bench("matmul", lambda: lazy(matmul), MATMUL),
              ("lazy result",)),
        Entry("softmax-lazy-tensor", "lazy result", bench("softmax", lambda: lazy(softmax), SOFTMAX),
              ("lazy result",)),
    ]
    honest = [
        Entry("matmul-torch", "plain", bench("matmul", lambda: matmul, MATMUL)),
        Entry("softmax-torch", "plain", bench("softmax", lambda: softmax, SOFTMAX)),
        Entry("matmul-joined-side-stream", "side stream joined", bench("matmul", lambda: joined_side_stream(matmul),
                                                                       MATMUL)),
        Entry("matmul-joined-thread", "thread joined", bench("matmul", lambda: joined_thread(matmul), MATMUL)),
        Entry("softmax-graph-replay", "CUDA graph", bench("softmax", lambda: graph_replay(softmax), SOFTMAX)),
    ]
    return cheats, honest


GPU_CHEATS, GPU_HONEST = _gpu_entries()
