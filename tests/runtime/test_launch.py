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


# ----------------------------------------------------------------------------- plans that do not fit a GPU


class _SmallSmemKernel:
    """Stands in for a JIT kernel compiled on a GPU whose shared memory holds ``fits`` pipeline stages: more
    raise Triton's ``OutOfResources`` before launching, as ``CompiledKernel._init_handles`` does."""

    __name__ = "_small_smem_kernel"

    def __init__(self, fits: int, resource: str = "shared memory") -> None:
        self.fits, self.resource, self.tried = fits, resource, []

    def __getitem__(self, grid):
        def run(*args, num_warps, **options):
            stages = options.get("num_stages", launch_mod.TRITON_DEFAULT_STAGES)
            self.tried.append(stages)
            if stages > self.fits:
                raise triton.runtime.errors.OutOfResources(stages * 48 * 1024, self.fits * 48 * 1024,
                                                           self.resource)
            return ("compiled", stages, options.get("BLOCK"))
        return run


def test_a_plan_past_the_shared_memory_runs_with_fewer_stages(monkeypatch):
    """Asked for 5 stages where 2 fit: 5, 4, 3 are refused before any launch, 2 runs with the plan's tiles, and
    the next compile of that plan (another argument specialisation) goes straight to 2."""
    monkeypatch.setattr(launch_mod, "_FITTED", {})
    kernel = _SmallSmemKernel(fits=2)
    got = launch_mod._run_fitting(kernel, (1,), (), 4, {"BLOCK": 64, "num_stages": 5}, 0)
    assert got == ("compiled", 2, 64) and kernel.tried == [5, 4, 3, 2]
    assert launch_mod.fitted_stages() == {"_small_smem_kernel": (5, 2)}
    kernel.tried.clear()
    launch_mod._run_fitting(kernel, (1,), (), 4, {"BLOCK": 64, "num_stages": 5}, 0)
    assert kernel.tried == [2]
    kernel.tried.clear()  # no num_stages: Triton's default is where the stepping starts
    assert launch_mod._run_fitting(kernel, (1,), (), 4, {"BLOCK": 32}, 0)[1] == 2 and kernel.tried == [3, 2]


@pytest.mark.parametrize("why", ["forced", "threads", "one stage"])
def test_what_fewer_stages_cannot_fix_still_raises(monkeypatch, why):
    """A forced plan (the tuner's, a sweep's) runs as named or raises; so does a limit other than shared memory,
    and a kernel that does not fit with one stage."""
    from kernelworks.runtime.plans import ForcedPlan

    monkeypatch.setattr(launch_mod, "_FITTED", {})
    kernel = _SmallSmemKernel(fits=0 if why == "one stage" else 2, resource="threads" if why == "threads" else
                              "shared memory")
    forced = ForcedPlan[dict]("probe").forced({"num_stages": 4}) if why == "forced" else None
    if forced is not None:  # the same plan fitted to 2 stages earlier: the forced run must not reuse that
        launch_mod._run_fitting(kernel, (1,), (), 4, {"num_stages": 4}, 0)
        kernel.tried.clear()
    with pytest.raises(triton.runtime.errors.OutOfResources):
        if forced is not None:
            with forced:
                launch_mod._run_fitting(kernel, (1,), (), 4, {"num_stages": 4}, 0)
        else:
            launch_mod._run_fitting(kernel, (1,), (), 4, {"num_stages": 4}, 0)
    assert kernel.tried == ([4] if why != "one stage" else [4, 3, 2, 1])
    assert bool(launch_mod._FITTED) == (why != "threads")


@triton.jit
def _deep_matmul_kernel(p_a, p_b, p_c, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm, rn, rk = tl.arange(0, BLOCK_M), tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(p_a + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(p_b + (k + rk)[:, None] * BLOCK_N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(p_c + rm[:, None] * BLOCK_N + rn[None, :], acc)


@pytest.mark.gpu
def test_a_plan_too_deep_for_the_gpu_runs_and_is_right(monkeypatch):
    """On the GPU: a 128×256×128 bf16 tile pipelined 8 deep asks for ~670 KiB of shared memory (any GPU's
    limit is ≤ 227 KiB); the launch steps the stages down until it fits, and the product is right."""
    monkeypatch.setattr(launch_mod, "_FITTED", {})
    a = torch.randn(128, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 256, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):  # compile (stepping down), then the cached launch
        c = torch.full((128, 256), float("nan"), device="cuda")
        launch(_deep_matmul_kernel, (1,), a, b, c, 1024, num_warps=8, BLOCK_M=128, BLOCK_N=256, BLOCK_K=128,
               num_stages=8)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-1)
    asked, ran = launch_mod.fitted_stages()["_deep_matmul_kernel"]
    assert asked == 8 and 1 <= ran < 8
