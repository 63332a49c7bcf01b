"""One bad and one good example (at least) per rule, plus the tricky cases each rule must get right."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from kernelworks.lint import RULES, Severity, lint_source

HEADER = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n"


def findings(src: str, code: str | None = None):
    out = lint_source(HEADER + textwrap.dedent(src), "k.py")
    return [f for f in out if code is None or f.code == code]


def codes(src: str) -> set[str]:
    return {f.code for f in findings(src)}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_every_rule_documents_a_bad_and_a_good_example(rule):
    doc = importlib.import_module(type(rule).__module__).__doc__ or ""
    assert doc.startswith(rule.code) and "Bad" in doc and "Good" in doc
    assert rule.summary and rule.hint and isinstance(rule.severity, Severity)


# ------------------------------------------------------------------------------------------------ KW001

ADD = """
@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    {body}

def add(x, y):
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
"""


def test_kw001_unmasked_block_over_a_rounded_up_grid():
    hits = findings(ADD.format(body="tl.store(y_ptr + offs, tl.load(x_ptr + offs))"), "KW001")
    assert len(hits) == 2 and hits[0].severity is Severity.ERROR and "mask" in hits[0].hint


def test_kw001_masked_is_clean():
    assert not codes(ADD.format(body="m = offs < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)"))


def test_kw001_mask_not_derived_from_the_offsets():
    body = "m = tl.arange(0, BLOCK) < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)"
    hits = findings(ADD.format(body=body), "KW001")
    assert len(hits) == 2 and "does not bound" in hits[0].message


def test_kw001_a_mask_with_only_a_lower_bound():
    """``offs >= 0`` is built from the offsets but bounds nothing at the end: the last block still runs past."""
    body = "m = offs >= 0\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)"
    hits = findings(ADD.format(body=body), "KW001")
    assert len(hits) == 2 and "only from below" in hits[0].message
    both = "m = (offs >= 0) & (offs < n)\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)"
    assert not codes(ADD.format(body=both))


def test_kw001_grid_of_whole_rows_needs_no_mask():
    src = """
    @triton.jit
    def row_copy(x_ptr, y_ptr, D: tl.constexpr):
        offs = tl.program_id(0) * D + tl.arange(0, D)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))

    def copy(x, y):
        row_copy[(x.shape[0],)](x, y, D=x.shape[1])
    """
    assert not codes(src)


def test_kw001_block_wider_than_row_from_next_power_of_2():
    src = """
    @triton.jit
    def k(x_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        tl.store(x_ptr + row * stride + cols, 0.0)

    def f(x):
        k[(x.shape[0],)](x, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    """
    assert "next_power_of_2" in findings(src, "KW001")[0].message


def test_kw001_compared_elsewhere_then_unmasked():
    src = """
    @triton.jit
    def k(x_ptr, w_ptr, stride, N, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
        w = tl.load(w_ptr + cols)
        tl.store(x_ptr + row * stride + cols, x * w, mask=cols < N)
    """
    hits = findings(src, "KW001")
    assert [h.line for h in hits] == [12] and "cols < N" in hits[0].message


def test_kw001_loop_tiles_and_walking_pointers():
    src = """
    @triton.jit
    def k(x_ptr, out_ptr, n, M, stride, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for s in range(0, n, BLOCK):
            acc += tl.load(x_ptr + s + tl.arange(0, BLOCK))
        p = x_ptr + tl.arange(0, BLOCK)
        for _ in range(0, tl.cdiv(M, BLOCK)):
            acc += tl.load(p)
            p += BLOCK * stride
        tl.store(out_ptr, tl.sum(acc, axis=0))
    """
    assert [h.line for h in findings(src, "KW001")] == [11, 14]


@pytest.mark.parametrize("safe", [
    "o = offs % n\n    tl.store(y_ptr + o, tl.load(x_ptr + o))",
    "o = tl.minimum(offs, n - 1)\n    tl.store(y_ptr + o, tl.load(x_ptr + o))",
    "o = tl.where(offs < n, offs, 0)\n    tl.store(y_ptr + o, tl.load(x_ptr + o))",
    "tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=(offs < n) & (offs >= 0), other=0.0), mask=offs < n)",
    "if EVEN_N:\n        tl.store(y_ptr + offs, tl.load(x_ptr + offs))",
    "tl.static_assert(n % BLOCK == 0)\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs))",
    "tl.store(y_ptr + tl.program_id(0), tl.load(x_ptr + tl.program_id(0)))",
])
def test_kw001_safe_patterns(safe):
    src = ADD.replace("BLOCK: tl.constexpr", "BLOCK: tl.constexpr, EVEN_N: tl.constexpr = False")
    assert "KW001" not in codes(src.format(body=safe))


def test_kw001_block_pointers_are_not_checked():
    src = """
    @triton.jit
    def k(x_ptr, M, N, s, BM: tl.constexpr, BN: tl.constexpr):
        p = tl.make_block_ptr(x_ptr, (M, N), (s, 1), (tl.program_id(0) * BM, 0), (BM, BN), (1, 0))
        tl.store(p, tl.load(p, boundary_check=(0, 1)), boundary_check=(0, 1))
    """
    assert not codes(src)


# ------------------------------------------------------------------------------------------------ KW002

MM_LOOP = """
@triton.jit
def k(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    r = tl.arange(0, BM)
    acc = {init}
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + r[:, None] * BK + tl.arange(0, BK)[None, :])
        b = tl.load(b_ptr + tl.arange(0, BK)[:, None] * BN + tl.arange(0, BN)[None, :])
        {update}
    tl.store(c_ptr + r[:, None] * BN + tl.arange(0, BN)[None, :], acc)
"""


@pytest.mark.parametrize(("init", "update", "bad"), [
    ("tl.zeros((BM, BN), dtype=tl.float16)", "acc += tl.dot(a, b).to(tl.float16)", True),
    ("tl.zeros((BM, BN), dtype=tl.bfloat16)", "acc = tl.dot(a, b, acc)", True),
    ("tl.zeros((BM, BN), dtype=tl.float32).to(tl.float16)", "acc = acc + tl.dot(a, b).to(tl.float16)", True),
    ("tl.zeros((BM, BN), dtype=tl.float32)", "acc += tl.dot(a, b, out_dtype=tl.float16)", True),
    ("tl.zeros((BM, BN), dtype=tl.float32)", "acc = tl.dot(a, b, acc)", False),
    ("tl.zeros((BM, BN), dtype=tl.float32)", "acc += tl.dot(a, b)", False),
    ("tl.zeros((BM, BN), dtype=a_ptr.dtype.element_ty)", "acc += tl.dot(a, b).to(acc.dtype)", False),
])
def test_kw002(init, update, bad):
    assert ("KW002" in codes(MM_LOOP.format(init=init, update=update))) is bad


def test_kw002_low_precision_outside_a_loop_is_fine():
    src = """
    @triton.jit
    def k(x_ptr, B: tl.constexpr):
        acc = tl.zeros([B], dtype=tl.float16)
        acc += tl.load(x_ptr + tl.arange(0, B))
        tl.store(x_ptr + tl.arange(0, B), acc)
    """
    assert "KW002" not in codes(src)


# ------------------------------------------------------------------------------------------------ KW003

ELEMENTWISE = """
@triton.jit
def k(x_ptr, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    {expr}
    tl.store(x_ptr + offs, y, mask=offs < n)
"""


@pytest.mark.parametrize(("expr", "bad"), [
    ("y = math.exp(x)", True),
    ("y = torch.sigmoid(x)", True),
    ("y = x.to(torch.float16)", True),
    ("y = sum(x)", True),
    ("y = max(x, 0.0)", True),
    ("print(x)\n    y = x", True),
    ("y = x * triton.cdiv(n, B)", True),
    ("y = tl.exp(x) + tl.math.exp2(x) + triton.language.abs(x)", False),
    ("y = x * max(B // 4, 1) * math.sqrt(2.0)", False),
    ("y = x * triton.cdiv(B, 32)", False),
    ("y = x * min(n, 8)", False),
    ("tl.static_print(B)\n    tl.device_print('x', x)\n    y = x", False),
])
def test_kw003(expr, bad):
    assert ("KW003" in codes(ELEMENTWISE.format(expr=expr))) is bad


def test_kw003_builtin_on_blocks_is_a_warning_and_torch_an_error():
    assert findings(ELEMENTWISE.format(expr="y = max(x, 0.0)"), "KW003")[0].severity is Severity.WARNING
    assert findings(ELEMENTWISE.format(expr="y = torch.exp(x)"), "KW003")[0].severity is Severity.ERROR


def test_kw003_calls_of_jit_helpers_are_fine_and_checked_themselves():
    src = """
    @triton.jit
    def _helper(x):
        return math.exp(x)

    @triton.jit
    def k(x_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        tl.store(x_ptr + offs, _helper(tl.load(x_ptr + offs)))
    """
    assert [f.line for f in findings(src, "KW003")] == [9]


# ------------------------------------------------------------------------------------------------ KW004

DOT = """
@triton.jit
def k(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :]){cast}
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :]){cast}
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))

def f(a, b, c):
    k[(1,)](a, b, c, BM=64, BN=64, BK={bk})
"""


@pytest.mark.parametrize(("bk", "cast", "bad"), [
    (8, "", True), (16, "", False), (64, "", False),
    (16, ".to(tl.int8)", True), (32, ".to(tl.int8)", False), (16, ".to(tl.float8e4nv)", True),
])
def test_kw004_small_k(bk, cast, bad):
    assert ("KW004" in codes(DOT.format(bk=bk, cast=cast))) is bad


def test_kw004_one_d_operands():
    src = """
    @triton.jit
    def k(a_ptr, b_ptr, out_ptr, D: tl.constexpr):
        d = tl.arange(0, D)
        tl.store(out_ptr, tl.dot(tl.load(a_ptr + d), tl.load(b_ptr + d)))
    """
    assert "1-D" in findings(src, "KW004")[0].message


def test_kw004_literal_arange_k():
    src = """
    @triton.jit
    def k(a_ptr, b_ptr, c_ptr):
        i, j = tl.arange(0, 16), tl.arange(0, 8)
        a = tl.load(a_ptr + i[:, None] * 8 + j[None, :])
        b = tl.load(b_ptr + j[:, None] * 16 + i[None, :])
        tl.store(c_ptr + i[:, None] * 16 + i[None, :], tl.dot(a, b))
    """
    assert "K = 8" in findings(src, "KW004")[0].message


# ------------------------------------------------------------------------------------------------ KW005

PID = """
@triton.jit
def k(x_ptr, n, B: tl.constexpr):
    pid = tl.program_id({axis})
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(x_ptr + offs + pid, 0.0, mask=offs < n)

def f(x, n):
    {grid_def}
    k[grid](x, n, B=128)
"""


@pytest.mark.parametrize(("axis", "grid_def", "bad"), [
    (1, "grid = (triton.cdiv(n, 128),)", True),
    (1, "grid = lambda meta: (triton.cdiv(n, meta['B']),)", True),
    (2, "grid = (triton.cdiv(n, 128), 4)", True),
    (1, "grid = (triton.cdiv(n, 128), 4)", False),
    (0, "grid = (triton.cdiv(n, 128), 1, 1)", False),
    (1, "grid = lambda meta: (triton.cdiv(n, meta['B']), 2)", False),
    (1, "grid = make_grid(n)", False),
])
def test_kw005_grid_rank(axis, grid_def, bad):
    assert ("KW005" in codes(PID.format(axis=axis, grid_def=grid_def))) is bad


def test_kw005_axis_above_two():
    src = """
    @triton.jit
    def k(x_ptr):
        tl.store(x_ptr + tl.program_id(3), 0.0)
    """
    assert "axes 0, 1 and 2" in findings(src, "KW005")[0].message


# ------------------------------------------------------------------------------------------------ KW006

TUNED = """
@triton.autotune(configs=[triton.Config({{"BLOCK": 128}}, num_warps=4), triton.Config({{"BLOCK": 256}})],
                 key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)

def f(x, n):
    k[lambda m: (triton.cdiv(n, m["BLOCK"]),)]({args})
"""


@pytest.mark.parametrize(("args", "bad"), [
    ("x, n, BLOCK=128", True),
    ("x, n, 128", True),
    ("x, n, **{'BLOCK': 64}", True),
    ("x, n", False),
    ("x, n, num_warps=8", False),
])
def test_kw006(args, bad):
    assert ("KW006" in codes(TUNED.format(args=args))) is bad


# ------------------------------------------------------------------------------------------------ KW007

ROW = """
@triton.jit
def k(x_ptr, stride, n_cols, B: tl.constexpr):
    row = {row}
    cols = tl.arange(0, B)
    p = x_ptr + {offset} + cols
    tl.store(p, tl.load(p, mask=cols < n_cols) * 2, mask=cols < n_cols)
"""


@pytest.mark.parametrize(("row", "offset", "bad"), [
    ("tl.program_id(0)", "row * stride", True),
    ("tl.program_id(0)", "(row * stride).to(tl.int64)", True),
    ("tl.program_id(0)", "stride * row", True),
    ("tl.program_id(0).to(tl.int64)", "row * stride", False),
    ("tl.program_id(0)", "row.to(tl.int64) * stride", False),
    ("tl.program_id(0)", "row * B", False),
    ("tl.program_id(0) % 8", "row * stride", False),
])
def test_kw007(row, offset, bad):
    assert ("KW007" in codes(ROW.format(row=row, offset=offset))) is bad


# ------------------------------------------------------------------------------------------------ KW008

def test_kw008_row_length_as_stride():
    src = """
    @triton.jit
    def k(x_ptr, n_cols, B: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, B)
        tl.store(x_ptr + row * n_cols + cols, 1.0, mask=cols < n_cols)
    """
    hit = findings(src, "KW008")[0]
    assert hit.severity is Severity.WARNING and "heuristic" in hit.message


@pytest.mark.parametrize("src", [
    # a stride parameter exists
    """
    @triton.jit
    def k(x_ptr, stride_x, n_cols, B: tl.constexpr):
        cols = tl.arange(0, B)
        tl.store(x_ptr + tl.program_id(0).to(tl.int64) * stride_x + cols, 1.0, mask=cols < n_cols)
    """,
    # batch offset of contiguous [T, K] blocks: T bounds the rows, not the unit-stride columns
    """
    @triton.jit
    def k(x_ptr, T, K: tl.constexpr, BT: tl.constexpr):
        t = tl.program_id(0) * BT + tl.arange(0, BT)
        kk = tl.arange(0, K)
        p = x_ptr + tl.program_id(1).to(tl.int64) * T * K + t[:, None] * K + kk[None, :]
        tl.store(p, 0.0, mask=(t < T)[:, None])
    """,
    # a flat 1-D kernel
    """
    @triton.jit
    def k(x_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(x_ptr + offs, 0.0, mask=offs < n)
    """,
])
def test_kw008_not_flagged(src):
    assert "KW008" not in codes(src)


# ------------------------------------------------------------------------------------------------ KW009

@pytest.mark.parametrize(("value", "bad"), [
    ("x", True), ("x * 0.5", True), ("1", False), ("x.to(tl.int32)", False), ("tl.full([B], 1, tl.int32)", False),
])
def test_kw009(value, bad):
    src = f"""
    @triton.jit
    def k(x_ptr, out_ptr, B: tl.constexpr):
        offs = tl.arange(0, B)
        x = tl.load(x_ptr + offs)
        tl.atomic_add(out_ptr + offs, {value})
    """
    hits = findings(src, "KW009")
    assert bool(hits) is bad
    assert all(h.severity is Severity.INFO for h in hits)


# ------------------------------------------------------------------------------------------------ KW010

@pytest.mark.parametrize(("a", "kwargs", "bad"), [
    ("a.to(tl.float32)", "", True),
    ("tl.zeros((BM, BK), dtype=tl.float32) + a", "", True),
    ("a.to(tl.float32)", ", input_precision='ieee'", False),
    ("a.to(tl.float32)", ", allow_tf32=False", False),
    ("a", "", False),
    ("a.to(tl.float16)", "", False),
])
def test_kw010(a, kwargs, bad):
    src = f"""
    @triton.jit
    def k(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot({a}, b{kwargs}))
    """
    assert ("KW010" in codes(src)) is bad


# ------------------------------------------------------------------------------------------------ KW011

@pytest.mark.parametrize(("sig", "arange", "bad"), [
    ("x_ptr, n, BLOCK", "tl.arange(0, BLOCK)", True),
    ("x_ptr, n", "tl.arange(0, n)", True),
    ("x_ptr, n, BLOCK", "tl.arange(0, 2 * BLOCK)", True),
    ("x_ptr, n, BLOCK: tl.constexpr", "tl.arange(0, BLOCK)", False),
    ("x_ptr, n, BLOCK: tl.constexpr", "tl.arange(0, BLOCK // 2)", False),
    ("x_ptr, n", "tl.arange(0, 128)", False),
])
def test_kw011(sig, arange, bad):
    src = f"""
    @triton.jit
    def k({sig}):
        offs = {arange}
        tl.store(x_ptr + offs, 0.0, mask=offs < n)
    """
    assert ("KW011" in codes(src)) is bad


def test_kw011_skips_helpers_whose_caller_passes_constexprs():
    src = """
    @triton.jit
    def _offsets(BLOCK):
        return tl.arange(0, BLOCK)

    @triton.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        offs = _offsets(BLOCK)
        tl.store(x_ptr + offs, 0.0, mask=offs < n)
    """
    assert "KW011" not in codes(src)


# ------------------------------------------------------------------------------------------------ KW012

_LAUNCHER = """
@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)

def run(x, lengths):
    {pre}
    _k[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
    {post}
"""


@pytest.mark.parametrize(("pre", "post", "bad"), [
    ("n = int(lengths.max().item())", "", True),
    ("sizes = lengths.tolist()", "", True),
    ("", "torch.cuda.synchronize()", True),
    ("idx = lengths.nonzero()", "", True),
    ("host = lengths.cpu()", "", True),
    ("lengths = lengths.to(torch.int32)", "", False),
    ("", "return x", False),
])
def test_kw012(pre, post, bad):
    assert ("KW012" in codes(_LAUNCHER.format(pre=pre, post=post))) is bad


def test_kw012_reads_only_the_launching_function():
    src = """
    @triton.jit
    def _k(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, 0.0, mask=offs < n)

    def check(lengths):
        if int(lengths.min().item()) < 0:
            raise ValueError("negative length")

    def run(x):
        _k[(triton.cdiv(x.numel(), 256),)](x, x.numel(), BLOCK=256)
    """
    assert "KW012" not in codes(src)


# ------------------------------------------------------------------------------------------------ KW013

@pytest.mark.parametrize(("body", "bad"), [
    ("acc = tl.sum(a[:, :, None] * b[None, :, :], axis=1)", True),
    ("p = a[:, :, None] * b[None, :, :]\n        acc = tl.sum(p, axis=1)", True),
    ("acc = tl.sum(tl.expand_dims(a, 2) * tl.expand_dims(b, 0), axis=1)", True),
    ("acc = tl.sum(a * b, axis=1)", False),
    ("acc = tl.sum(a * v[None, :], axis=1)", False),
    ("acc = tl.sum(tl.expand_dims(v, 1) * tl.expand_dims(v, 0), axis=1)", False),
    ("acc = tl.dot(a, b)", False),
])
def test_kw013(body, bad):
    src = f"""
    @triton.jit
    def k(a_ptr, b_ptr, v_ptr, c_ptr, BM: tl.constexpr, BK: tl.constexpr):
        rm = tl.arange(0, BM)
        rk = tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * BM + rm[None, :])
        v = tl.load(v_ptr + rk)
        {body}
        tl.store(c_ptr + rm, rm)
    """
    assert ("KW013" in codes(src)) is bad


# ------------------------------------------------------------------------------ issue 18: KW003, KW007, KW008

@pytest.mark.parametrize(("helper", "bad"), [
    ("return max(x, 0.0)", True),           # a builtin in a helper, on the block the kernel passes
    ("return abs(x) * 2", True),
    ("return tl.maximum(x, 0.0)", False),
    ("return x * max(S, 1)", False),        # on a constexpr
])
def test_kw003_builtins_in_helpers_seen_through_the_call(helper, bad):
    src = f"""
    @triton.jit
    def _act(x, S: tl.constexpr):
        {helper}

    @triton.jit
    def k(x_ptr, n, B: tl.constexpr):
        offs = tl.program_id(0) * B + tl.arange(0, B)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, _act(x, 4), mask=offs < n)
    """
    assert ("KW003" in codes(src)) is bad


@pytest.mark.parametrize(("expr", "bad"), [
    ("sum(tl.reshape(x, (2, B // 2)), axis=1)", True),   # a reshaped block
    ("max(tl.max(x2, axis=1), 0.0)", True),              # a block of row maxima
    ("round(x / tl.max(x, axis=0))", True),              # block / scalar is a block
    ("max(tl.sum(x), 1e-6)", False),                     # a full reduction is a scalar
])
def test_kw003_block_shapes_through_reductions_and_reshapes(expr, bad):
    src = f"""
    @triton.jit
    def k(x_ptr, y_ptr, B: tl.constexpr):
        r = tl.arange(0, B)
        x = tl.load(x_ptr + r)
        x2 = tl.load(x_ptr + r[:, None] * B + r[None, :])
        y = {expr}
        tl.store(y_ptr, 0.0)
    """
    assert ("KW003" in codes(src)) is bad


@pytest.mark.parametrize(("loop", "offset", "bad"), [
    ("for t in range(tl.program_id(0), n_tiles, NP):", "t * B * stride", True),
    ("for t in range(tl.program_id(0).to(tl.int64), n_tiles, NP):", "t * B * stride", False),
    ("for t in range(tl.program_id(0), n_tiles, NP):", "t.to(tl.int64) * B * stride", False),
    ("for t in range(0, n_tiles):", "t * B * stride", False),   # not a persistent loop: not a program id
])
def test_kw007_persistent_loop_counters(loop, offset, bad):
    src = f"""
    @triton.jit
    def k(x_ptr, stride, n_tiles, NP: tl.constexpr, B: tl.constexpr):
        cols = tl.arange(0, B)
        {loop}
            tl.store(x_ptr + {offset} + cols, 0.0)
    """
    assert ("KW007" in codes(src)) is bad


@pytest.mark.parametrize(("row", "bad"), [
    ("(i_b * T + tl.program_id(0)).to(tl.int64) * K", False),   # an int32 row index scaled in int64
    ("(i_b * T * K).to(tl.int64)", True),                       # an element offset cast too late
])
def test_kw007_row_index_cast_then_scaled(row, bad):
    src = f"""
    @triton.jit
    def k(x_ptr, T, K: tl.constexpr):
        i_b = tl.program_id(1)
        tl.store(x_ptr + {row} + tl.arange(0, K), 0.0)
    """
    assert ("KW007" in codes(src)) is bad


KW008_ROWS = """
@triton.jit
def k(x_ptr, y_ptr, {extra}n_cols, B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, B)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
    tl.store(y_ptr + row * n_cols + cols, x, mask=cols < n_cols)

def f(x):
    {pre}
    y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    k[(x.shape[0],)]({arg}, y, {extra_args}x.shape[1], B=1024)
"""


@pytest.mark.parametrize(("extra", "extra_args", "pre", "arg", "bad"), [
    ("", "", "pass", "x", True),                                   # unknown layout, no strides
    ("", "", "x = x.contiguous()", "x", False),                    # made contiguous before the launch
    ("", "", "pass", "x.contiguous()", False),
    ("", "", "x, z = x.view(-1, 8).contiguous(), 1", "x", False),  # through a tuple assignment
    ("stride_x, ", "x.stride(0), ", "pass", "x", True),            # a stride passed and never used
])
def test_kw008_contiguous_launches_and_unused_strides(extra, extra_args, pre, arg, bad):
    src = KW008_ROWS.format(extra=extra, extra_args=extra_args, pre=pre, arg=arg)
    assert ("KW008" in codes(src)) is bad


@pytest.mark.parametrize(("view", "bad"), [
    ("q.transpose(1, 2)", True), ("q[:, :, :4]", True), ("q.chunk(2, dim=-1)[0]", False), ("q.T", True),
    ("q.transpose(1, 2).contiguous()", False), ("q[1:]", False),
])
def test_kw008_strided_view_passed_to_a_kernel_without_strides(view, bad):
    src = f"""
    @triton.jit
    def k(x, y, T, K: tl.constexpr, BT: tl.constexpr):
        o_t = tl.program_id(0) * BT + tl.arange(0, BT)
        p = tl.program_id(1).to(tl.int64) * T * K + o_t[:, None] * K + tl.arange(0, K)[None, :]
        tl.store(y + p, tl.load(x + p, mask=(o_t < T)[:, None]), mask=(o_t < T)[:, None])

    def f(q, y):
        v = {view}
        k[(triton.cdiv(q.shape[1], 64), q.shape[0])](v, y, q.shape[1], K=q.shape[-1], BT=64)
    """
    hits = findings(src, "KW008")
    assert bool(hits) is bad
    assert all("strided view" in h.message for h in hits)


# ------------------------------------------------------------------------------------------------ KW014

MASKED = """
@triton.jit
def k(x_ptr, y_ptr, M, N, n, last_pos, s, BM: tl.constexpr, BN: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * s + offs_n[None, :], 0.0, mask=mask)
    {body}

def f(x, y):
    M, N = x.shape
    k[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, y, M, N, x.numel(), 0, x.stride(0), BM=32, BN=32)
"""


@pytest.mark.parametrize(("body", "bad"), [
    ("b = tl.load(x_ptr + offs_n, mask=offs_n < M)", True),          # axis 1 spans N, not M
    ("b = tl.load(x_ptr + offs_n, mask=offs_n < N)", False),
    ("b = tl.load(x_ptr + offs_m, mask=offs_m <= M)", True),         # off by one
    ("b = tl.load(x_ptr + offs_m, mask=offs_m < M + 1)", True),
    ("b = tl.load(x_ptr + offs_m, mask=offs_m <= M - 1)", False),
    ("b = tl.load(x_ptr + offs_m, mask=offs_m <= last_pos)", False),  # an inclusive position
])
def test_kw014(body, bad):
    assert ("KW014" in codes(MASKED.format(body=body))) is bad


def test_kw014_block_sized_for_another_bound():
    src = """
    @triton.jit
    def k(t_ptr, q_ptr, d, B: tl.constexpr):
        cols = tl.arange(0, B)
        half = d // 2
        c = tl.load(t_ptr + cols, mask=cols < {bound})
        tl.store(q_ptr + cols, tl.load(q_ptr + cols, mask=cols < half) * c, mask=cols < half)

    def f(t, q, d):
        k[(1,)](t, q, d, B=triton.next_power_of_2(d // 2))
    """
    hit = findings(src.format(bound="d"), "KW014")
    assert hit and "sized for `d // 2`" in hit[0].message
    assert not findings(src.format(bound="half"), "KW014")


# ------------------------------------------------------------------------------------------------ KW015

SHIFTED = """
@triton.jit
def k(x_ptr, cu_seqlens, y_ptr, n, B: tl.constexpr, W: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    {body}

def f(x, y):
    k[(triton.cdiv(x.numel(), 256),)](x, x, y, x.numel(), B=256, W=4)
"""


@pytest.mark.parametrize(("body", "bad"), [
    ("v = tl.load(x_ptr + offs + 1, mask=offs < n)", True),
    ("v = tl.load(x_ptr + (offs + 2), mask=offs < n - 1)", True),
    ("v = tl.load(x_ptr + offs + 1, mask=offs + 1 < n)", False),
    ("v = tl.load(x_ptr + offs + 1, mask=offs < n - 1)", False),
    ("v = tl.load(x_ptr + offs - 1, mask=offs < n)", True),
    ("v = tl.load(x_ptr + offs - 1, mask=(offs >= 1) & (offs < n))", False),
    ("v = tl.load(x_ptr + offs - 1, mask=(offs > 0) & (offs < n))", False),
    ("for j in tl.static_range(W):\n        v = tl.load(x_ptr + (offs - j), mask=offs < n)", True),
    ("for j in tl.static_range(W):\n        v = tl.load(x_ptr + (offs - j), mask=(offs - j >= 0) & (offs < n))", False),
    ("v = tl.load(cu_seqlens + offs + 1, mask=offs < n)", False),    # an n + 1 prefix array
    ("v = tl.load(x_ptr + offs * 2 + 1, mask=offs < n)", False),     # + 1 in other units (interleaved)
])
def test_kw015(body, bad):
    assert ("KW015" in codes(SHIFTED.format(body=body))) is bad


# ------------------------------------------------------------------------------------------------ KW016

BPTR = """
@triton.jit
def k(x, T, s, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr{extra}):
    p = tl.make_block_ptr(x, (T, K), (s, 1), (tl.program_id(0) * BT, 0), ({b0}, {b1}), (1, 0))
    {body}

def f(x):
    k[(triton.cdiv(x.shape[0], 64),)](x, x.shape[0], x.stride(0), K=x.shape[1], BT=64,
                                      BK=triton.next_power_of_2(x.shape[1]))
"""


@pytest.mark.parametrize(("b1", "body", "extra", "bad"), [
    ("K", "v = tl.load(p)", "", True),                                       # T is ragged
    ("K", "v = tl.load(p, boundary_check=(0,))", "", False),                 # K is the whole dimension
    ("BK", "v = tl.load(p, boundary_check=(0,))", "", True),                 # BK padded to a power of two
    ("BK", "v = tl.load(p, boundary_check=(0, 1), padding_option='zero')", "", False),
    ("K", "tl.store(p, tl.zeros((BT, K), tl.float32))", "", True),
    ("K", "if EVEN_T:\n        v = tl.load(p)", ", EVEN_T: tl.constexpr", False),
])
def test_kw016(b1, body, extra, bad):
    assert ("KW016" in codes(BPTR.format(b0="BT", b1=b1, body=body, extra=extra))) is bad


def test_kw016_tensor_descriptors_are_not_checked():
    src = """
    @triton.jit
    def k(x, M, K, BM: tl.constexpr, BK: tl.constexpr):
        d = tl.make_tensor_descriptor(x, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        v = d.load([tl.program_id(0) * BM, 0])
        d.store([tl.program_id(0) * BM, 0], v)
    """
    assert "KW016" not in codes(src)


# ------------------------------------------------------------------------------------------------ KW017

ATOMIC = """
@triton.jit
def k(ids_ptr, out_ptr, n, n_slots, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * B + tl.arange(0, B)
    {body}

def f(ids, out):
    k[({grid},)](ids, out, ids.numel(), out.numel(), B=256)
"""


@pytest.mark.parametrize(("body", "grid", "bad"), [
    ("e = tl.load(ids_ptr + offs, mask=offs < n, other=0)\n    tl.atomic_add(out_ptr + e, 1)",
     "triton.cdiv(ids.numel(), 256)", True),
    ("e = tl.load(ids_ptr + offs, mask=offs < n, other=0)\n    tl.atomic_add(out_ptr + e, 1, mask=offs < n)",
     "triton.cdiv(ids.numel(), 256)", False),
    ("tl.atomic_max(out_ptr + offs, 1)", "triton.cdiv(ids.numel(), 256)", True),
    ("tl.atomic_max(out_ptr + offs, 1, mask=offs < n)", "triton.cdiv(ids.numel(), 256)", False),
    ("tl.atomic_xchg(out_ptr + pid, 1)", "triton.cdiv(out.numel(), 8) * 8", True),
    ("if pid >= n_slots:\n        return\n    tl.atomic_xchg(out_ptr + pid, 1)", "triton.cdiv(out.numel(), 8) * 8",
     False),
    ("tl.atomic_xchg(out_ptr + pid, 1)", "out.numel()", False),
    ("tl.atomic_add(out_ptr + pid, tl.sum(tl.load(ids_ptr + offs, mask=offs < n, other=0)))",
     "triton.cdiv(ids.numel(), 256)", False),   # a scalar per program: the reduction ignores masked lanes
])
def test_kw017(body, grid, bad):
    assert ("KW017" in codes(ATOMIC.format(body=body, grid=grid))) is bad
