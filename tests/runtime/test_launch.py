"""The low-overhead launcher (runtime/launch.py): its cache key is never coarser than the specialisation of
the installed triton (CI runs 3.6 and 3.8), and on a GPU it launches exactly what ``kernel[grid]`` does."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernelworks.runtime import launch as launch_mod
from kernelworks.runtime.launch import _spec, launch


def _probe_args() -> list[object]:
    ints = [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**63 - 1, 2**63, 2**64 - 16]
    floats = [0.0, 1.0, -2.5, 1e-30, 3e38, 1e300, float("inf")]
    base = torch.empty(64, dtype=torch.float32)
    tensors = [base[i:] for i in range(5)] + [base.half()[i:] for i in (0, 1, 8)] + [base.to(torch.int64)]
    return [*ints, *floats, True, False, None, *tensors]


def test_spec_is_never_coarser_than_triton():
    """Two arguments with one :func:`_spec` key must get one specialisation from triton itself; otherwise
    the fast path would launch a kernel compiled for the other one (wrong alignment, a 1 folded in...)."""
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    seen: dict[object, tuple[object, object]] = {}
    for arg in _probe_args():
        theirs = native(BaseBackend, arg, False, True, True)
        key = _spec(arg)
        first = seen.setdefault(key, (arg, theirs))
        assert first[1] == theirs, f"{first[0]!r} and {arg!r} share key {key} but triton gives {first[1]} / {theirs}"


def test_key_builder_agrees_with_spec():
    """The inline key of every launch (:func:`launch._spec_key`, with its remembered integers) equals the
    reference :func:`_spec` of each argument, first call and repeated, parameters and int subclasses too."""
    import enum

    class Size(enum.IntEnum):
        SIXTEEN = 16

    args = (*_probe_args(), torch.nn.Parameter(torch.empty(3)), Size.SIXTEEN)
    for _ in range(2):
        assert launch_mod._spec_key(args) == tuple(map(_spec, args))


@triton.jit
def _axpy_kernel(p_x, p_y, p_out, n, alpha, s_x, FLIP: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    b_x = tl.load(p_x + o * s_x, mask=m, other=0.0).to(tl.float32)
    b_y = tl.load(p_y + o, mask=m, other=0.0).to(tl.float32)
    b_o = alpha * b_x + b_y
    if FLIP:
        b_o = -b_o
    tl.store(p_out + o, b_o.to(p_out.dtype.element_ty), mask=m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fast_path_launches_what_the_jit_launches(dtype):
    """Every specialisation the key separates (n = 1, a multiple of 16 or not, misaligned views, strides of 1
    and 2, both constexpr values), each launched twice: the second from the launcher's cache."""
    if not launch_mod._FAST_LAUNCH:
        pytest.skip(f"triton {triton.__version__}: the launcher takes the plain path")
    buf = torch.randn(4096, device="cuda", dtype=dtype)
    for n in (1, 16, 17, 1000, 1024):
        for offset in (0, 1, 8):
            for stride in (1, 2):
                for flip in (False, True):
                    x = buf[offset:offset + stride * n:stride]
                    y = buf[2048:2048 + n]
                    want = -(0.5 * x.float() + y.float()) if flip else 0.5 * x.float() + y.float()
                    for _ in range(2):
                        out = torch.full((n,), float("nan"), device="cuda", dtype=dtype)
                        launch(_axpy_kernel, (triton.cdiv(n, 128),), x, y, out, n, 0.5, stride, num_warps=4,
                               FLIP=flip, BLOCK=128)
                        torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
    assert any(key[0] is _axpy_kernel for key in launch_mod._COMPILED), "the fast path never cached a kernel"
    assert all(entry[2] is not None for key, entry in launch_mod._COMPILED.items() if key[0] is _axpy_kernel), \
        "the cached launches did not take the direct C launch"


@pytest.mark.gpu
def test_launch_hooks_keep_tritons_path():
    """A profiler's launch hook (proton sets one) sees every launch, cached ones included: with a hook set
    the launcher goes through ``CompiledKernel[grid]``, which calls it."""
    if not launch_mod._FAST_LAUNCH:
        pytest.skip(f"triton {triton.__version__}: the launcher takes the plain path")
    x = torch.randn(256, device="cuda")
    out = torch.empty_like(x)
    seen = []

    def hook(metadata) -> None:
        seen.append(metadata)

    for _ in range(2):  # compile and cache first
        launch(_axpy_kernel, (2,), x, x, out, 256, 1.0, 1, num_warps=4, FLIP=False, BLOCK=128)
    hooks = triton.knobs.runtime.launch_enter_hook
    hooks.add(hook)
    try:
        assert launch_mod._launch_hooks()
        launch(_axpy_kernel, (2,), x, x, out, 256, 1.0, 1, num_warps=4, FLIP=False, BLOCK=128)
    finally:
        hooks.remove(hook)
    assert len(seen) == 1 and not launch_mod._launch_hooks()
    torch.testing.assert_close(out, 2 * x)
