"""Finding kernels, decorators and launches in a module."""

from __future__ import annotations

import ast
import textwrap

from kernelworks.lint.model import ModuleModel


def model(src: str) -> ModuleModel:
    return ModuleModel(ast.parse(textwrap.dedent(src)))


def test_every_way_to_spell_jit():
    m = model("""
        import triton
        import triton.language as tl
        from triton import jit
        from triton import jit as tjit
        import triton.language

        @triton.jit
        def a(x, B: tl.constexpr): ...

        @jit
        def b(x, B: "tl.constexpr"): ...

        @tjit(do_not_specialize=["x"])
        def c(x, B: triton.language.constexpr): ...

        def d_py(x): ...
        d = triton.jit(d_py)

        def not_a_kernel(x): ...
        """)
    assert set(m.functions) == {"a", "b", "c", "d_py"}
    assert all(fn.constexpr == {"B"} for name, fn in m.functions.items() if name != "d_py")
    assert m.jit_function("d") is m.functions["d_py"]


def test_autotune_configs_from_literals_names_and_functions_and_heuristics():
    m = model("""
        import triton
        import triton.language as tl
        from triton import Config

        BASE = [Config({"BLOCK_M": 64}, num_warps=4)]

        def more():
            return [triton.Config(dict(BLOCK_N=n), num_stages=3) for n in (32, 64)]

        @triton.autotune(configs=BASE + more() + [triton.Config(kwargs={"SPLIT": 2})], key=["M"])
        @triton.heuristics({"EVEN": lambda args: args["M"] % 64 == 0})
        @triton.jit
        def k(x, M, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, EVEN: tl.constexpr): ...
        """)
    fn = m.functions["k"]
    assert set(fn.tuned) == {"BLOCK_M", "BLOCK_N", "SPLIT"}
    assert set(fn.heuristic) == {"EVEN"}


def test_launches_map_arguments_and_grids():
    m = model("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(x, y, n, BLOCK: tl.constexpr): ...

        def grid_fn(meta):
            return (triton.cdiv(10, meta["BLOCK"]), 2)

        def run(x, y, n, flag):
            g = (triton.cdiv(n, 128),)
            k[g](x, y, n, BLOCK=128)
            k[lambda meta: (1, 2, 3)](x, *[y, n])
            k[grid_fn](x, y, n=n, BLOCK=64)
            k[(1,) if flag else (2,)](x, y, n, 32)
            k[make()](x, y, n)
        """)
    launches = m.functions["k"].launches
    ranks = [m.grid_rank(launch.grid, launch.host, launch.call) for launch in launches]
    assert ranks == [1, 3, 2, 1, None]
    assert set(launches[0].args) == {"x", "y", "n", "BLOCK"}
    assert set(launches[1].args) == {"x"}  # a *args hides the rest
    assert set(launches[3].args) == {"x", "y", "n", "BLOCK"}
    assert m.rounds_up(launches[0].grid, launches[0].host, launches[0].call)


def test_helpers_know_their_callers():
    m = model("""
        import triton

        @triton.jit
        def helper(x):
            return x

        @triton.jit
        def kernel(x):
            helper(x)

        def run(x):
            kernel[(1,)](x)
        """)
    assert m.functions["helper"].is_helper and not m.functions["kernel"].is_helper
    assert m.functions["kernel"].callees == {"helper"}


LAUNCH_VIA = """
    import triton
    import triton.language as tl
    from kernelworks.runtime.launch import launch
    from mypkg.rt import fast_launch

    @triton.jit
    def k(x, n, BLOCK: tl.constexpr):
        tl.store(x + tl.program_id(1), 0.0)

    def forward(kernel, grid, *args, **meta):
        kernel[grid](*args, **meta)

    def run_known(x, n):
        launch(k, (triton.cdiv(n, 64),), x, n, num_warps=4, BLOCK=64)

    def run_local(x, n):
        forward(k, (1, 2), x, n, BLOCK=32)

    def run_configured(x, n):
        fast_launch(k, (n,), x, n, BLOCK=16)

    def _shared(kernel, x, n):
        kernel[(n,)](x, n, BLOCK=8)

    def run_passed(x, n):
        _shared(k, x, n)
    """


def test_launches_through_wrappers_and_kernel_parameters():
    m = ModuleModel(ast.parse(textwrap.dedent(LAUNCH_VIA)), launchers=["mypkg.rt.fast_launch"])
    launches = m.functions["k"].launches
    blocks = sorted(ast.literal_eval(launch.args["BLOCK"]) for launch in launches if "BLOCK" in launch.args)
    assert blocks == [8, 16, 32, 64]
    by_block = {ast.literal_eval(launch.args["BLOCK"]): launch for launch in launches if "BLOCK" in launch.args}
    assert set(by_block[64].args) == {"x", "n", "num_warps", "BLOCK"}
    assert m.grid_rank(by_block[32].grid, by_block[32].host, by_block[32].call) == 2
    # without the configured name, fast_launch is an ordinary call
    unconfigured = ModuleModel(ast.parse(textwrap.dedent(LAUNCH_VIA)))
    assert 16 not in [ast.literal_eval(x.args["BLOCK"]) for x in unconfigured.functions["k"].launches
                      if "BLOCK" in x.args]
