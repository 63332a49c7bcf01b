"""GPU timing helpers (GPU-only: timings and profiles mean nothing on the interpreter)."""

from __future__ import annotations

import pytest
import torch

from kernelworks.bench.timing import kernel_times_us, time_fn


@pytest.mark.gpu
def test_kernel_times_attribute_a_call_to_its_kernels():
    """Two kernels of very different cost in one call: both named, the large matmul first, and the sum
    within the call's own event time (the profile has no L2 flush, so it can only be smaller or close)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1024, device="cuda")

    def call():
        a @ a
        x.add_(1.0)

    per = kernel_times_us(call, iters=5)
    assert len(per) >= 2
    names = list(per)
    assert "add" in " ".join(names[1:]).lower() or "elementwise" in " ".join(names[1:]).lower(), names
    assert per[names[0]] > 10 * per[names[-1]]
    whole_us = time_fn(call, rep_ms=20).median_ms * 1e3
    assert sum(per.values()) < 1.5 * whole_us
