"""KW006: a parameter that ``@triton.autotune`` configs set is also passed at a launch.

Triton raises "Conflicting meta-parameters" when a launch passes a value for a key the autotuner sets, and
on versions that do not, the launch value silently wins over tuning. ``num_warps``/``num_stages``/
``num_ctas``/``maxnreg`` are launch options, not parameters, and are not checked.

Bad::

    @triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
    @triton.jit
    def _kernel(x_ptr, n, BLOCK: tl.constexpr): ...

    _kernel[grid](x, n, BLOCK=256)                   # KW006

Good::

    _kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
"""

from __future__ import annotations

from collections.abc import Iterator

from kernelworks.lint.analysis import Analysis
from kernelworks.lint.findings import Severity
from kernelworks.lint.rules.base import Hit, Rule

_LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                             "pre_hook", "num_buffers_warp_spec", "num_consumer_groups", "reg_dec_producer",
                             "reg_inc_consumer"})


class AutotunedArgPassed(Rule):
    code = "KW006"
    severity = Severity.ERROR
    summary = "parameter set by @triton.autotune configs is also passed at the launch"
    hint = "drop the argument from the launch (the autotuner supplies it); read it in the grid via meta[...]"

    def check(self, analysis: Analysis) -> Iterator[Hit]:
        for fn in analysis.functions:
            tuned = set(fn.tuned) - _LAUNCH_OPTIONS
            for launch in fn.launches:
                for param in sorted(tuned & set(launch.args)):
                    node = launch.args[param]
                    yield Hit(node, f"`{param}` is set by the @triton.autotune configs of `{fn.name}` and also "
                                    "passed here: Triton rejects the conflicting meta-parameter",
                              f"remove `{param}` from the launch; use meta['{param}'] in the grid")
