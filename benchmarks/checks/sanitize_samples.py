"""Tiny deliberately buggy GPU programs, one per compute-sanitizer report kind, for real sample logs::

    compute-sanitizer --tool TOOL python benchmarks/checks/sanitize_samples.py PROGRAM

``benchmarks/checks/sanitize_samples.sh`` runs each under the tool it is for (with ``kw check --sanitize``'s
flags and environment) and keeps the logs, which become the parser's fixtures in
``tests/check/sanitize_logs/real/``. Programs (``--list`` prints them):

- ``clean``: a masked Triton copy; every tool's log of a run that finds nothing.
- ``oob_write`` (memcheck): the copy without its tail mask, 24 lanes storing past the output's end.
- ``uninit_read`` (initcheck): a Triton kernel reading a ``torch.empty`` tensor no one wrote.
- ``padding_read`` (initcheck): a kernel loading whole padded rows, whose padding was never written, and
  discarding the padding: the read that does not matter, which ``--sanitize-ignore`` is for.
- ``torch_uninit`` (initcheck): torch's own reduction over a ``torch.empty`` tensor: a report in a kernel that
  is not a Triton one.
- ``smem_race`` (racecheck): CUDA C compiled with NVRTC (``torch.cuda._compile_kernel``, torch 2.8 and later):
  threads write a shared array and read a neighbour's element with no barrier between, across warps. Triton
  gives no way to touch shared memory directly, so a Triton race is not practical to write.
- ``warp_race`` (racecheck): the same inside one warp, where racecheck may say warning rather than error.
- ``divergent_barrier`` (synccheck): CUDA C again (Triton places its own barriers): ``__syncthreads()`` inside
  a branch part of the block skips, as NVIDIA's ``Synccheck/divergent_threads.cu`` does. On an H100 with CUDA
  13's compute-sanitizer synccheck did **not** report it (0 errors): the threads that skip the barrier go on to
  exit, and PTX releases a barrier held up only by exited threads, so on sm_70+ the run is well defined.
- ``split_barrier`` (synccheck): the kind synccheck does report on recent GPUs (llama.cpp's FlashAttention fix,
  ggml-org/llama.cpp#27955, on an RTX 4070 with CUDA 13): one part of the block waits at the ``__syncthreads()``
  of one branch, the rest at another's. On an H100 (CUDA 13): 48 errors, one per thread of the first warp and
  of the 16 threads at the other barrier.

Each prints one line saying what ran; it exits 0 whatever the tool finds (the tool's exit status says that).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import triton
import triton.language as tl

BLOCK = 1024
N = 1000  # elements: one program of BLOCK lanes, the last 24 past the end


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """y[i] = x[i]; the tail masked at ``n`` only when ``MASKED``."""
    o_i = tl.arange(0, BLOCK)
    if MASKED:
        tl.store(y_ptr + o_i, tl.load(x_ptr + o_i, mask=o_i < n), mask=o_i < n)
    else:
        tl.store(y_ptr + o_i, tl.load(x_ptr + o_i, mask=o_i < n))  # the bug: the store has no mask


@triton.jit
def _scale_kernel(x_ptr, s_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[i] = x[i] · s[i] for i < n."""
    o_i = tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(y_ptr + o_i, tl.load(x_ptr + o_i, mask=m_i) * tl.load(s_ptr + o_i, mask=m_i), mask=m_i)


@triton.jit
def _padded_rows_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """y[r, :n_cols] = 2 · x[r, :n_cols], loading the whole padded row (``BLOCK == stride``) and dropping the
    padding: a vectorised read of bytes no one wrote, harmless."""
    i_r = tl.program_id(0)
    o_c = tl.arange(0, BLOCK)
    b_x = tl.load(x_ptr + i_r * stride + o_c)  # padding included, on purpose
    tl.store(y_ptr + i_r * n_cols + o_c, 2 * b_x, mask=o_c < n_cols)


def clean() -> None:
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    _copy_kernel[(1,)](x, y, N, BLOCK=BLOCK, MASKED=True)


def oob_write() -> None:
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    _copy_kernel[(1,)](x, y, N, BLOCK=BLOCK, MASKED=False)


def uninit_read() -> None:
    x = torch.randn(N, device="cuda")
    scale, y = torch.empty_like(x), torch.empty_like(x)  # the bug: ``scale`` is never written
    _scale_kernel[(1,)](x, scale, y, N, BLOCK=BLOCK)


def padding_read() -> None:
    rows, cols = 4, N
    padded = torch.empty(rows, BLOCK, device="cuda")
    padded[:, :cols] = torch.randn(rows, cols, device="cuda")  # the padding columns stay unwritten
    y = torch.empty(rows, cols, device="cuda")
    _padded_rows_kernel[(rows,)](padded, y, cols, padded.stride(0), BLOCK=BLOCK)


def torch_uninit() -> None:
    torch.empty(8, device="cuda").sum()  # the bug: torch's reduction reads what no one wrote


RACES = r"""
extern "C" __global__ void smem_race(const float* x, float* y) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    tile[t] = x[t];
    y[t] = tile[(t + 1) % blockDim.x];  // the bug: a neighbour's element read with no __syncthreads() before
}

extern "C" __global__ void divergent_barrier(const float* x, float* y, int n) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = 0.0f;
    __syncthreads();
    for (int b = 0; b < 4; ++b) {
        int i = 64 * b + t;
        if (i < n) {  // the last round: threads past n skip the barrier the others wait at
            tile[t] += x[i];
            __syncthreads();
        }
    }
    y[t] = tile[63 - t];
}

extern "C" __global__ void split_barrier(const float* x, float* y) {
    __shared__ float tile[64];
    int t = threadIdx.x;
    if (t < 48) {  // the bug: threads 0-47 wait at this barrier, 48-63 (half of the second warp) at the other
        tile[t] = x[t];
        __syncthreads();
    } else {
        tile[t] = -x[t];
        __syncthreads();
    }
    y[t] = tile[63 - t];
}
"""


def _cuda_kernel(name: str) -> Callable[..., None]:
    """``name`` from :data:`RACES`, compiled with NVRTC through torch (with line info when it takes options)."""
    compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
    if compile_kernel is None:
        raise SystemExit(f"skipped: torch {torch.__version__} has no torch.cuda._compile_kernel (torch 2.8+)")
    try:
        return compile_kernel(RACES, name, nvcc_options=["-lineinfo"])
    except TypeError:
        return compile_kernel(RACES, name)


def smem_race() -> None:
    x, y = torch.randn(256, device="cuda"), torch.empty(256, device="cuda")
    _cuda_kernel("smem_race")(grid=(1, 1, 1), block=(256, 1, 1), args=[x, y])


def warp_race() -> None:
    x, y = torch.randn(32, device="cuda"), torch.empty(32, device="cuda")
    _cuda_kernel("smem_race")(grid=(1, 1, 1), block=(32, 1, 1), args=[x, y])


def divergent_barrier() -> None:
    n = 64 * 4 - 16  # 16 threads of the last round skip its barrier
    x, y = torch.randn(n, device="cuda"), torch.empty(64, device="cuda")
    _cuda_kernel("divergent_barrier")(grid=(1, 1, 1), block=(64, 1, 1), args=[x, y, n])


def split_barrier() -> None:
    x, y = torch.randn(64, device="cuda"), torch.empty(64, device="cuda")
    _cuda_kernel("split_barrier")(grid=(1, 1, 1), block=(64, 1, 1), args=[x, y])


PROGRAMS: dict[str, Callable[[], None]] = {f.__name__: f for f in (
    clean, oob_write, uninit_read, padding_read, torch_uninit, smem_race, warp_race, divergent_barrier,
    split_barrier)}


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        print(" ".join(PROGRAMS))
        return 0
    if len(argv) != 1 or argv[0] not in PROGRAMS:
        print(f"usage: python {sys.argv[0]} PROGRAM|--list; PROGRAM one of {', '.join(PROGRAMS)}", file=sys.stderr)
        return 2
    PROGRAMS[argv[0]]()
    torch.cuda.synchronize()  # every kernel finished while the tool watches
    print(f"sanitize_samples: {argv[0]} ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
