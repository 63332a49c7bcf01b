"""Version differences (runtime/compat.py): the interpreter runs the same kernels under triton 3.6 and 3.8
with any supported numpy, an untested stack gets one clear warning, and pyproject.toml declares exactly the
tested range."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from kernelworks.runtime.compat import TESTED, UntestedVersionWarning, VersionRange, check_versions, version_tuple

ROOT = Path(__file__).resolve().parents[2]

_HALF = tl.constexpr(0.5)


@triton.jit
def _scaled_abs(x):
    return tl.abs(x)  # in its own function: the operand arrives as the product computed by the caller


@triton.jit
def _constexpr_times_tensor_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    b_x = tl.load(p_x + o, mask=m, other=0.0)
    b_y = _scaled_abs(-_HALF * b_x) + (_HALF - b_x) + (2 * _HALF) * b_x  # constexpr on the left of a tensor
    tl.store(p_y + o, b_y, mask=m)


@triton.jit
def _row_sum_looped_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):  # a runtime bound: the interpreter converts the scalar n to an int
        acc += tl.load(p_x + start + o, mask=start + o < n, other=0.0)
    tl.store(p_y, tl.sum(acc, 0))


def test_constexpr_on_the_left_of_a_tensor(device):
    """``C * x`` with a module-level ``tl.constexpr`` C: triton 3.8's interpreter rejected the product
    (``cannot convert [...] of type <class 'triton.language.core.tensor'> to tensor``)."""
    x = torch.randn(37, device=device)
    y = torch.empty_like(x)
    _constexpr_times_tensor_kernel[(1,)](x, y, x.numel(), BLOCK=64)
    torch.testing.assert_close(y, (0.5 * x).abs() + (0.5 - x) + x)


def test_runtime_loop_bound(device):
    """``range(0, n, BLOCK)`` over a scalar argument: triton 3.6's interpreter converted ``n`` with
    ``int(array)``, which numpy 2.3+ refuses (``only 0-dimensional arrays can be converted``)."""
    x = torch.randn(200, device=device)
    y = torch.empty(1, device=device)
    _row_sum_looped_kernel[(1,)](x, y, x.numel(), BLOCK=64)
    torch.testing.assert_close(y[0], x.sum(), rtol=1e-5, atol=1e-5)


def test_version_tuple():
    assert version_tuple("3.8.0") == (3, 8)
    assert version_tuple("2.14.1+cu130") == (2, 14)
    assert version_tuple("2.4.0rc1") == (2, 4)
    assert version_tuple("3.7.0+git1234abcd") == (3, 7)


def test_tested_range_membership_and_specifier():
    triton_range = VersionRange((3, 6), (3, 9), skip=((3, 7),))
    assert (3, 6) in triton_range and (3, 8) in triton_range
    assert (3, 7) not in triton_range and (3, 9) not in triton_range and (3, 5) not in triton_range
    assert str(triton_range) == ">=3.6,<3.9,!=3.7.*"


def test_untested_version_warns_once_naming_range_and_version():
    with pytest.warns(UntestedVersionWarning) as caught:
        message = check_versions({"torch": "2.99.0", "triton": "3.8.0", "numpy": "2.4.6"})
    assert len(caught) == 1
    assert "torch 2.99.0" in message and f"torch{TESTED['torch']}" in message and "triton 3.8" not in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_versions({"torch": "2.14.1+cu130", "triton": "3.8.0", "numpy": "2.4.6"}) is None
        assert check_versions({"torch": "2.13.0+cpu", "triton": "3.6.0", "numpy": "2.2.6"}) is None


def test_numpy_range_is_narrower_in_the_interpreter():
    """The interpreter computes with numpy (CI tests 2.2-2.4); on a GPU kernels never touch it (the GPU
    image has 2.5)."""
    stack = {"torch": "2.11.0+cu130", "triton": "3.6.0", "numpy": "2.5.2"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_versions(stack) is None
    with pytest.warns(UntestedVersionWarning, match=r"numpy 2\.5\.2 \(tested: >=2\.2,<2\.5 in the interpreter\)"):
        check_versions(stack, interpreter=True)


def _import_kernelworks(prelude: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = f"import warnings\nwarnings.simplefilter('always')\n{prelude}\nimport kernelworks\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_import_warns_once_on_an_untested_stack():
    """``import kernelworks`` with torch reported as 2.99: one UntestedVersionWarning, naming it."""
    fake = ("import importlib.metadata as m\n_real = m.version\n"
            "m.version = lambda name: '2.99.0' if name == 'torch' else _real(name)")
    out = _import_kernelworks(fake)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("UntestedVersionWarning") == 1, out.stderr
    assert "torch 2.99.0 (tested: >=2.11,<2.15)" in out.stderr


def test_import_is_quiet_on_the_installed_stack():
    out = _import_kernelworks("")
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is only switched on without a GPU")
def test_triton_imported_first_warns_then_refuses():
    """With no GPU, triton imported before kernelworks has its library built for a GPU: every kernel would
    fail with "Cannot call @triton.jit'd outside of the scope of a kernel". Say so at import, and refuse a
    call with the remedy instead of Triton's error."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import warnings\nwarnings.simplefilter('always')\nimport triton\nimport torch\nimport kernelworks\n"
            "try:\n    kernelworks.softmax(torch.randn(2, 8))\nexcept RuntimeError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "triton was imported before kernelworks" in out.stderr
    assert out.stdout.startswith("refused: triton was imported before kernelworks"), out.stdout


def test_pyproject_declares_exactly_the_tested_range():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, tested in TESTED.items():
        assert f"{name}{tested}" in deps, (name, deps)
