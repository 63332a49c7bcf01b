"""Probes that a timed call holds all of its work: ``kw bench``'s guard against timings that miss work.

CUDA events on the current stream time what a call enqueues on that stream, between the two events. A call
escapes them in two ways, and a probe looks for each after the call is timed (GPU only):

- **work outside the timed stream** (:func:`outside_stream`): kernels launched on a side stream the
  current stream never waits for, or from another thread (a thread the call starts, or a worker it hands
  the launch to). The probe runs the call back to back and measures the device's busy time per call as the
  wall time from an idle device to a device-wide ``torch.cuda.synchronize()`` (which waits for every
  stream); threads the calls started are joined first, and the device is synchronised again after 1 ms
  sleeps (which let a worker thread take the GIL and launch what it was handed) until it stays idle. An
  honest call keeps the device busy for at most its host time or its timed device time, whichever is
  longer; more than 1.5× that (+ 20 µs) is work the events missed.
- **a lazy result** (:func:`lazy_result`): the call returns an object that does the work when it is read
  (a tensor subclass computing on first use), so the timed call is nearly free. The probe times the call
  followed by a checksum of its outputs (a float32 sum per output, which any lazy output must compute to
  answer) and subtracts the same checksum's time on plain tensors of the outputs' shapes: what is left
  beyond the call's own timed median (+ 50% and 20 µs) is work the timed call did not do.

Neither probe changes the timing method (events, warm-up, median, L2 flush: :func:`time_fn`). Their cost:
about 20 ms of back-to-back calls (10 to 200 calls), and two short timings (10 and 5 ms of repetitions).
What they cannot see: side work shorter than the call's host time (hidden under it, as in a model whose host
is the bottleneck; ``host_us`` is reported for that), and lazy work below the slack (tens of µs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelworks.bench.timing import Timing, time_fn

OUTSIDE_RATIO = 1.5
"""Busy time per call beyond this multiple of max(host time, timed device time) is work the events missed."""
IDLE_SYNC_MS = 0.1
"""A device-wide synchronise shorter than this found the device idle."""
SLACK_MS = 0.02
"""Absolute slack of both probes (sync and launch latencies, timing noise), ms per call."""
LAZY_RATIO = 0.5
"""Read-back work beyond the timed median by more than this fraction of it (+ :data:`SLACK_MS`) is lazy."""


def _outputs(result: Any) -> list[torch.Tensor]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [t for t in items if isinstance(t, torch.Tensor)]


def checksum(result: Any) -> list[torch.Tensor]:
    """One float32 sum per tensor in ``result`` (a tensor or a tuple of them), on the current stream: reading
    every element, as a consumer of the result would."""
    return [t.sum(dtype=torch.float32) if t.is_floating_point() or t.is_complex() else t.sum()
            for t in _outputs(result)]


def _settled(last: float, *, limit_s: float = 2.0) -> float:
    """When the device last finished work: after a device-wide synchronise that ended at ``last``, sleep
    1 ms (other threads may take the GIL and launch what they were handed) and synchronise again, until a
    synchronise finds the device idle or ``limit_s`` passes."""
    deadline = last + limit_s
    while time.perf_counter() < deadline:
        time.sleep(1e-3)
        t = time.perf_counter()
        torch.cuda.synchronize()
        now = time.perf_counter()
        if (now - t) * 1e3 < IDLE_SYNC_MS:
            break
        last = now
    return last


def outside_stream(call: Callable[[], Any], timing: Timing, *, probe_ms: float = 20.0) -> str | None:
    """Why ``call`` keeps the device busy beyond its timed events (a side stream, another thread), or None.

    Runs ``call`` back to back (enough calls for ~``probe_ms`` at its timed cost, 10 to 200) from an idle
    device, with events on the current stream around the loop; waits for threads the calls started, then
    synchronises the device until it stays idle (:func:`_settled`). Busy time per call = that wall time /
    calls; host time per call = the loop's own wall time / calls. Flags busy > :data:`OUTSIDE_RATIO` ×
    max(host, ``timing.median_ms``) + :data:`SLACK_MS`."""
    per_call = max(timing.median_ms, (timing.host_us or 0.0) / 1e3, 1e-3)
    n = int(min(200, max(10, probe_ms / per_call)))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    before = set(threading.enumerate())
    t0 = time.perf_counter()
    start.record()
    for _ in range(n):
        call()
    end.record()
    t_host = time.perf_counter()
    started = [t for t in threading.enumerate() if t not in before]
    running = sum(t.is_alive() for t in started)
    for t in started:  # their launches belong to the calls: let them be made before the device is waited on
        t.join(timeout=10.0)
    torch.cuda.synchronize()
    t1 = _settled(time.perf_counter())
    busy_ms, host_ms = (t1 - t0) * 1e3 / n, (t_host - t0) * 1e3 / n
    stream_ms = start.elapsed_time(end) / n
    if busy_ms <= OUTSIDE_RATIO * max(host_ms, timing.median_ms) + SLACK_MS:
        return None
    threads = f"; the calls left {running} thread(s) running" if running else ""
    return (f"work outside the timed stream: {n} calls back to back keep the device busy {busy_ms:.4g} ms per "
            f"call (synchronised wall time), beyond their host time ({host_ms:.4g} ms) and the timed "
            f"{timing.median_ms:.4g} ms (the current stream's events: {stream_ms:.4g} ms per call back to "
            f"back){threads} — kernels on a side stream or another thread?")


def lazy_result(call: Callable[[], Any], timing: Timing, *, rep_ms: float = 10.0) -> str | None:
    """Why ``call``'s result is produced outside the call (computed when read), or None.

    Times ``call`` followed by :func:`checksum` of its outputs, and the checksum alone on plain tensors of
    the outputs' shapes and dtypes (both with :func:`time_fn`, L2 flushed). Flags a read-back costing more
    than the checksum by over :data:`LAZY_RATIO` × ``timing.median_ms`` + :data:`SLACK_MS`."""
    outs = _outputs(call())
    if not outs:
        return None
    try:
        plain = [torch.zeros(o.shape, dtype=o.dtype, device=o.device) for o in outs]
    except torch.OutOfMemoryError:  # outputs too large to hold twice: the probe cannot run, the timing stands
        return None
    with_read = time_fn(lambda: checksum(call()), warmup_ms=2.0, rep_ms=rep_ms).median_ms
    read = time_fn(lambda: checksum(plain), warmup_ms=1.0, rep_ms=rep_ms / 2).median_ms
    extra = with_read - read - timing.median_ms
    if extra <= LAZY_RATIO * timing.median_ms + SLACK_MS:
        return None
    return (f"lazy result: the call and a read of its output take {with_read:.4g} ms, the read alone "
            f"{read:.4g} ms and the timed call {timing.median_ms:.4g} ms: {extra:.4g} ms of work happens when "
            "the result is read, outside the timed call")


def timing_problems(call: Callable[[], Any], timing: Timing) -> list[str]:
    """Both probes on a timed ``call``: the problems found (empty when none)."""
    return [p for p in (outside_stream(call, timing), lazy_result(call, timing)) if p is not None]
