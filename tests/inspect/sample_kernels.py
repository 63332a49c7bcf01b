"""Small kernels for the inspect tests, at module level so the compile worker can import them by path."""

import triton
import triton.language as tl


@triton.jit
def scale_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    """y = 2·x over a contiguous vector: 16-bit data and a size divisible by 16 give 128-bit accesses."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(p_y + o, tl.load(p_x + o, mask=m) * 2, mask=m)


@triton.jit
def dot_kernel(p_a, p_b, p_c, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c[BM, BN] = a[BM, BK] @ b[BK, BN], one tile, row-major, fp32 accumulation."""
    o_m = tl.arange(0, BM)
    o_n = tl.arange(0, BN)
    o_k = tl.arange(0, BK)
    b_a = tl.load(p_a + o_m[:, None] * BK + o_k[None, :])
    b_b = tl.load(p_b + o_k[:, None] * BN + o_n[None, :])
    b_c = tl.dot(b_a, b_b)
    tl.store(p_c + o_m[:, None] * BN + o_n[None, :], b_c.to(p_c.dtype.element_ty))


@triton.jit
def row_sum_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    """y[row] = Σ x[row, :BLOCK] in fp32: a whole row held in registers (spills when BLOCK is large)."""
    i = tl.program_id(0).to(tl.int64)
    o = tl.arange(0, BLOCK)
    b_x = tl.load(p_x + i * n + o, mask=o < n, other=0.0).to(tl.float32)
    b_y = tl.sum(b_x * tl.sigmoid(b_x), axis=0) + tl.sum(tl.exp(b_x), axis=0) * tl.max(b_x, axis=0)
    tl.store(p_y + i, b_y)


def launch_scale(x, y):
    """A launcher the capture tests run: a grid lambda, a constexpr and a launch option."""
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, BLOCK=256, num_warps=2)
    return y


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4)],
                 key=["n"])
@triton.jit
def tuned_scale_kernel(p_x, p_y, n, BLOCK: tl.constexpr):
    """``scale_kernel`` under an autotuner with two configs."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(p_y + o, tl.load(p_x + o, mask=m) * 2, mask=m)


def launch_tuned_scale(x, y):
    """The autotuned launcher: BLOCK and num_warps come from the autotuner's configs."""
    n = x.numel()
    tuned_scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y
