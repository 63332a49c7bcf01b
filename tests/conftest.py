"""Test set-up: GPU-marked tests skip cleanly without CUDA; kernels run in the interpreter on the CPU."""

from __future__ import annotations

import os

import pytest
import torch

# The test suite checks index values on the host (kernelworks.validation): a bad block table or cu_seqlens
# raises a ValueError naming it. Tests of the kernels' own in-kernel bounds turn it off locally.
os.environ.setdefault("KERNELWORKS_VALIDATE", "1")

import kernelworks  # noqa: F401  (turns on Triton's interpreter when there is no GPU, before kernels load)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        skip = pytest.mark.skip(reason="checks the interpreter's small path limits; a GPU plans other paths")
        marker = "interpreter"
    else:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible; kernels run in the interpreter here)")
        marker = "gpu"
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def compile_graphs():
    """``(backend, graphs)``: a ``torch.compile`` backend (aot_eager, so autograd runs through the compiled
    custom ops) that keeps each graph's text in ``graphs``; dynamo reset first, so earlier tests' caches do not
    hide a graph break."""
    from torch._dynamo.backends.debugging import aot_eager

    torch._dynamo.reset()
    graphs: list[str] = []

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return aot_eager(gm, example_inputs)

    return backend, graphs


@pytest.fixture
def device() -> torch.device:
    """Where kernels run in this session: cuda when present, else the interpreter's cpu."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _no_replay_under_monkeypatch(request: pytest.FixtureRequest):
    """Tests that monkeypatch kernelworks' internals (a spy on a launcher, a guarded allocator, a forced plan
    function) run with ``runtime.replay`` off: a replay recorded by an earlier test would not call what they
    patched. Everything else runs with it on, as users do (on a GPU; the interpreter never replays)."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    from kernelworks.runtime import replay

    previous = replay.set_enabled(False)
    try:
        yield
    finally:
        replay.set_enabled(previous)
