"""One check case, run once on the GPU, for compute-sanitizer to watch::

    compute-sanitizer --tool memcheck python -m kernelworks.check.sanitize_child TARGET CASE [--seed N]
        [--provider NAME]

``TARGET`` is what :func:`~kernelworks.spec.load_spec` resolves (a registered op, ``path/to/file.py:SPEC``);
``CASE`` a check case's name or id. :func:`kernelworks.check.sanitize.sanitize_case` starts it, one fresh
process per case and tool, so nothing of the parent (a pytest session, a warm caching allocator, kernels
already compiled in that process) is inherited. The inputs are the spec's own for the case and seed (the
ones ``kw check`` makes); the provider's forward runs once, and where the spec declares ``grad_inputs`` (and
the provider has a backward) it runs with those inputs as leaves and the backward of a random upstream
gradient follows; then the device is synchronised, so every kernel has finished while the tool watches.
Nothing is compared: the checklist does that.

Exit status: 0 the case ran; :data:`SKIPPED` it could not run here (the reason on stdout after
:data:`SKIP_MARK`: a provider not installed, a case the provider does not support); 2 no GPU; anything else
the case raised (its traceback on stderr). Whatever happened once the case started, a :data:`KERNELS_MARK`
line on stdout names the Triton kernels loaded while the provider ran, the op's own: a report in any other
kernel (torch's, cuBLAS's, the input maker's) is labelled outside the op (:mod:`kernelworks.check.sanitize_log`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from kernelworks.spec import OpSpec

SKIPPED = 3
SKIP_MARK = "kw-sanitize-skip: "
KERNELS_MARK = "kw-sanitize-kernels: "
"""Starts the child's line naming the Triton kernels the provider loaded, space-separated."""


@contextlib.contextmanager
def recording_kernel_loads(names: set[str]) -> Iterator[None]:
    """Within the block, the name of every Triton kernel loaded onto the device is added to ``names`` (Triton's
    ``knobs.runtime.kernel_load_end_hook``, triton 3.6 and 3.8: a kernel loads on its first launch in a
    process, whichever path launches it). A triton without that hook chain records nothing."""
    import triton

    chain = getattr(getattr(getattr(triton, "knobs", None), "runtime", None), "kernel_load_end_hook", None)
    if not hasattr(chain, "add"):
        yield
        return

    def loaded(module: object, function: object, name: str, *rest: object) -> None:
        names.add(name)

    chain.add(loaded)
    try:
        yield
    finally:
        chain.remove(loaded)


def run_case(spec: OpSpec, case_name: str, seed: int = 0, provider: str | None = None,
             device: torch.device | None = None, kernels: set[str] | None = None) -> str:
    """Run ``case_name`` of ``spec`` once (forward, then backward when the spec has gradients) and synchronise;
    returns the mode that ran (``fwd`` or ``fwd+bwd``). ``kernels`` receives the names of the Triton kernels
    loaded while the provider ran. Raises what the provider raises."""
    import torch

    from kernelworks.check.engine import as_outputs, with_grad_leaves
    from kernelworks.spec import STEP

    (case,) = spec.find_cases([case_name], bench=False)
    prov = spec.provider(provider)
    device = device or torch.device("cuda")
    torch.manual_seed(seed)
    inputs = spec.inputs(case, device)
    names = [n for n in spec.grad_inputs if isinstance(inputs.get(n), torch.Tensor)]
    backward = bool(names and prov.supports_backward)
    with recording_kernel_loads(set() if kernels is None else kernels):  # the inputs' kernels are not the op's
        if backward:
            leaves = with_grad_leaves(inputs, names, None)
            outs = [o for o in as_outputs(prov.fn(**leaves)) if o.is_floating_point() and o.requires_grad]
            torch.autograd.grad(outs, [leaves[n] for n in names], [torch.randn_like(o) for o in outs])
        else:
            with torch.no_grad():
                prov.fn(**inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return STEP if backward else "fwd"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelworks.check.sanitize_child",
                                     description="Run one check case once on the GPU, for compute-sanitizer.")
    parser.add_argument("target", help="registered op name or path/to/file.py:SPEC")
    parser.add_argument("case", help="check case name or id")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--provider", help="provider to run (default: the spec's subject)")
    args = parser.parse_args(argv)

    import torch

    import kernelworks  # noqa: F401  (the same set-up as any user of the package)
    from kernelworks.spec import load_spec

    if not torch.cuda.is_available():
        print("no CUDA GPU is visible", file=sys.stderr)
        return 2
    spec = load_spec(args.target)
    ok, why = spec.provider(args.provider).available()
    if not ok:
        print(SKIP_MARK + why, flush=True)
        return SKIPPED
    kernels: set[str] = set()
    try:
        mode = run_case(spec, args.case, args.seed, args.provider, kernels=kernels)
    except NotImplementedError as e:
        print(SKIP_MARK + f"unsupported: {e}", flush=True)
        return SKIPPED
    finally:  # also when the case raised: the reports of a crash are the ones to place
        print(KERNELS_MARK + " ".join(sorted(kernels)), flush=True)
    print(f"kw-sanitize: {args.target} {args.case} {mode} ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
