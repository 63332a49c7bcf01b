"""On a GPU: what `kw inspect` compiles ahead of time must match what Triton's JIT built for the device."""

from __future__ import annotations

import pytest
import torch

from kernelworks.inspect import inspect_op
from kernelworks.runtime import launch as launch_mod
from kernelworks.spec import load_spec


@pytest.mark.gpu
@pytest.mark.parametrize(("op", "case"), [("softmax", "8192x8192"), ("softmax", "256x262144"),
                                          ("swiglu", "8k_packed")])
def test_ahead_of_time_matches_the_jit(op, case):
    spec = load_spec(op)
    (c,) = spec.find_cases([case], bench=True)
    inputs = spec.inputs(c, torch.device("cuda"))
    launch_mod._COMPILED.clear()
    fn = spec.providers[spec.subject].fn
    fn(**inputs)
    fn(**inputs)  # the second call launches from the cache that launch() keeps
    torch.cuda.synchronize()
    jitted = {}
    for compiled, *_ in launch_mod._COMPILED.values():
        compiled._init_handles()
        jitted[compiled.name] = (compiled.n_regs, compiled.n_spills, compiled.metadata.num_warps)
    major, minor = torch.cuda.get_device_capability()
    reports = inspect_op(spec, c, f"sm_{major}{minor}")
    assert jitted and reports
    for r in reports:
        assert r.name in jitted, f"{r.name} not among the JIT's kernels {sorted(jitted)}"
        regs, spills, warps = jitted[r.name]
        assert (r.registers, r.num_warps) == (regs, warps)
        assert (r.spill_bytes > 0) == (spills > 0)
