"""``kw bench``'s timing probes (kernelworks.bench.probes) on bare closures, GPU only: work on a side stream
or in a thread and a result computed when read are flagged; the same work done honestly is not; and our own
providers' bench records stay ``ok``."""

from __future__ import annotations

import threading

import pytest
import torch

from kernelworks.bench.probes import lazy_result, outside_stream
from kernelworks.bench.timing import time_fn

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def operands():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    return a, torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)


def _timed(call):
    return time_fn(call, warmup_ms=5.0, rep_ms=20.0)


def test_honest_work_on_the_current_stream_passes_both_probes(operands):
    a, b = operands
    call = lambda: a @ b  # noqa: E731
    t = _timed(call)
    assert outside_stream(call, t) is None
    assert lazy_result(call, t) is None


def test_a_side_stream_the_caller_never_waits_for_is_flagged(operands):
    a, b = operands
    side = torch.cuda.Stream()

    def call():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return a @ b

    t = _timed(call)
    assert t.median_ms < 0.05  # the events saw (almost) nothing: what the probe is for
    problem = outside_stream(call, t)
    assert problem is not None and "outside the timed stream" in problem, problem


def test_a_joined_side_stream_is_not_flagged(operands):
    a, b = operands
    side = torch.cuda.Stream()

    def call():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = a @ b
        torch.cuda.current_stream().wait_stream(side)
        return out

    t = _timed(call)
    assert outside_stream(call, t) is None


def test_a_thread_launch_is_flagged():
    big = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)  # ~0.8 ms a product, >> a thread start

    def launch():
        with torch.cuda.stream(torch.cuda.Stream()):  # the thread's own stream (on the caller's, the launch
            big @ big.t()                            # may land before the end event, and be timed)

    def call():
        threading.Thread(target=launch, daemon=True).start()

    problem = outside_stream(call, _timed(call))
    assert problem is not None and "outside the timed stream" in problem, problem


class _Deferred(torch.Tensor):
    """The smallest lazy result: a wrapper tensor whose value is computed by whatever op first reads it."""

    @staticmethod
    def __new__(cls, compute, like):
        t = torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device)
        t._compute = compute
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils import _pytree

        def unwrap(x):
            return x._compute() if isinstance(x, _Deferred) else x
        return func(*_pytree.tree_map(unwrap, args), **_pytree.tree_map(unwrap, kwargs or {}))


def test_a_result_computed_when_read_is_flagged(operands):
    a, b = operands
    call = lambda: _Deferred(lambda: a @ b, a)  # noqa: E731
    t = _timed(call)
    assert t.median_ms < 0.05
    problem = lazy_result(call, t)
    assert problem is not None and "lazy result" in problem, problem
    assert outside_stream(call, t) is None  # nothing runs anywhere until the result is read


@pytest.mark.parametrize("op", ["softmax", "rms_norm", "matmul"])
def test_our_providers_bench_records_are_not_suspect(op):
    """The real providers of three specs on their quick bench cases: no probe may flag them."""
    from kernelworks.bench import run_bench
    from kernelworks.spec import registry

    records = run_bench(registry()[op], tags=["quick"], modes=["fwd"], progress=False, warmup_ms=5.0,
                        rep_ms=20.0)
    suspect = [(r.case, r.provider, r.status) for r in records if r.status.startswith("suspect")]
    assert not suspect, suspect
