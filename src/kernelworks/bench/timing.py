"""GPU timing: device events around each call, warm-up, median of many, L2 flushed between calls.

Like ``triton.testing.do_bench`` in method, with two differences. Each timed call is preceded by a GPU
spin as long as the call's host time (``host_ahead``), so the host has queued the whole call before the
GPU reaches it: the events then bracket device time only, as in a model whose Python runs ahead of the
GPU — without it, a small op on a slow host measures its own Python overhead (a 4096×4096 bf16 RMSNorm
forward read 119 µs on our H100 host, 29 µs with the host ahead;
benchmarks/results/h100-80gb-hbm3/before-host-ahead/). The host time itself is reported separately (``host_us``),
because it is what an op costs where the host is the bottleneck. ``cuda_graph=True`` replays a captured
graph instead (no host at all).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds over ``reps`` timed calls."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    reps: int
    host_us: float | None = None  # median host wall time of one call from an idle GPU, µs (a call that
    # synchronises inside, e.g. a host-side value check, includes that wait)

    @property
    def spread(self) -> float:
        """(p80 − p20) / median: the run-to-run spread a difference must beat to mean anything."""
        return (self.p80_ms - self.p20_ms) / self.median_ms if self.median_ms else 0.0


def _l2_flush_buffer() -> torch.Tensor:
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
    return torch.empty(2 * l2, dtype=torch.int8, device="cuda")


@functools.cache
def _spin_cycles_per_us() -> float:
    """Clock cycles ``torch.cuda._sleep`` spins per microsecond on this GPU (measured once)."""
    torch.cuda._sleep(1_000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    torch.cuda.synchronize()
    return 2_000_000 / max(start.elapsed_time(end) * 1e3, 1.0)


def time_fn(fn: Callable[[], object], *, warmup_ms: float = 25.0, rep_ms: float = 100.0,
            flush_l2: bool = True, min_reps: int = 10, max_reps: int = 2000,
            cuda_graph: bool = False, host_ahead: bool = True) -> Timing:
    """Time ``fn`` on the current CUDA stream.

    Each timed call gets its own pair of events; with ``flush_l2`` a buffer twice the L2 size is zeroed
    before every call (outside the events), so inputs come from device memory as they would in a model;
    with ``host_ahead`` the GPU then spins for 1.5× the call's median host time (outside the events), so
    host overhead stays out of the device time unless the call synchronises.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("timing needs a CUDA GPU; none is visible")
    fn()
    torch.cuda.synchronize()
    call = fn
    if cuda_graph:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm caches / autotuners outside the capture
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        call = graph.replay
    flush = _l2_flush_buffer() if flush_l2 else None

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        if flush is not None:
            flush.zero_()
        call()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-4)
    host = []
    for _ in range(max(3, int(warmup_ms / estimate))):
        t0 = time.perf_counter()
        call()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()  # an idle GPU: the next call's host time is not inflated by a full queue
    host_us = statistics.median(host) * 1e6
    spin = int(min(1.5 * host_us + 10.0, 5_000.0) * _spin_cycles_per_us()) if host_ahead else 0
    reps = int(min(max_reps, max(min_reps, rep_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush is not None:
            flush.zero_()
        if spin:
            torch.cuda._sleep(spin)
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return Timing(statistics.median(times), q[1], q[7], times[0], reps, host_us)


def kernel_times_us(fn: Callable[[], object], *, iters: int = 10, name_chars: int = 60) -> dict[str, float]:
    """Per-kernel GPU time of one call of ``fn`` (µs, mean over ``iters`` profiled calls after a warm-up),
    by kernel name cut to ``name_chars``, longest first: how a plan sweep attributes a change to the kernel
    that made it. Profiler times carry no L2 flush; compare them with each other, and :func:`time_fn` for
    the call as a whole."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        t = getattr(event, "self_device_time_total", 0) or 0
        if t > 0:
            per[event.key[:name_chars]] += t / iters
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))
