"""``kw inspect OP|FILE:SPEC|FILE:KERNEL``: compile ahead of time for a GPU target (no GPU needed) and report
registers, spills, shared memory, occupancy and the SASS instruction mix, with warnings."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import runpy
from pathlib import Path
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    from kernelworks.inspect.targets import DEFAULT_TARGET, TARGETS

    p = sub.add_parser(
        "inspect", help="compile for a GPU target (no GPU needed): registers, spills, occupancy, SASS mix",
        description="Compile an op's kernels (as its launcher would launch them for a case) or one @triton.jit "
                    "function ahead of time for a target GPU, and report resources, occupancy, the SASS "
                    "instruction mix and warnings. Works on a machine without a GPU.",
        epilog="examples:\n  kw inspect softmax --target sm_90\n  kw inspect softmax --case 13x127 --mode all\n"
               "  kw inspect my_kernels.py:add_kernel --signature 'x_ptr=*fp16,y_ptr=*fp16,n=i32:16' "
               "--constexpr BLOCK=1024 --num-warps 4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="registered op name, path/to/file.py:SPEC, or path/to/file.py:KERNEL")
    p.add_argument("--case", action="append", help="case name or id (default: the first 'quick' bench case); "
                                                   "repeatable")
    p.add_argument("--target", dest="gpu", default=DEFAULT_TARGET, choices=list(TARGETS),
                   help=f"compile target (default {DEFAULT_TARGET})")
    p.add_argument("--mode", choices=("fwd", "train", "bwd", "all"), default="fwd",
                   help="an inference call's kernels, a training call's forward (its inputs requiring grad), "
                        "its backward pass's, or all of them")
    p.add_argument("--config", help="override constexprs / launch options: 'num_warps=8,BLOCK_N=4096'")
    p.add_argument("--all-configs", action="store_true",
                   help="inspect every entry of the spec's configs (each applied like --config) and tabulate")
    p.add_argument("--ptx", action="store_true", help="print each kernel's PTX")
    p.add_argument("--sass", action="store_true", help="print each kernel's SASS")
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.add_argument("--markdown", action="store_true", help="comparison table in Markdown")
    k = p.add_argument_group("FILE:KERNEL form")
    k.add_argument("--signature", help="argument types: 'x_ptr=*fp16,y_ptr=*fp16,n=i32' (':16' marks a scalar "
                                       "divisible by 16; pointers are taken as 16-byte aligned unless ':1')")
    k.add_argument("--constexpr", action="append", default=[], metavar="NAME=VALUE",
                   help="a tl.constexpr value; repeatable")
    k.add_argument("--num-warps", type=int, default=4)
    k.add_argument("--num-stages", type=int, default=3)


def parse_assignments(text: str | list[str] | None, what: str) -> dict[str, Any]:
    """``"a=1,b=x"`` (or a list of ``NAME=VALUE``) to a dict; values as Python literals, else strings."""
    if not text:
        return {}
    items = text if isinstance(text, list) else text.split(",")
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{what}: expected NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[name.strip()] = value.strip()
    return out


def _resolve(target: str) -> Any:
    """An OpSpec for ``NAME``; the object named by ``FILE.py:ATTR`` or ``package.module:ATTR`` otherwise."""
    from kernelworks.spec import load_spec

    if ":" not in target:
        return load_spec(target)
    where, attr = target.rsplit(":", 1)
    if where.endswith(".py") or Path(where).exists():
        path = Path(where).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {where}")
        namespace = runpy.run_path(str(path), run_name=f"_kw_inspect_{path.stem}")
    else:
        namespace = vars(importlib.import_module(where))
    if attr not in namespace:
        raise KeyError(f"{where} has no attribute {attr!r}")
    return namespace[attr]


def _print_text(args: argparse.Namespace, header: str, reports: list, *, table: bool) -> None:
    from kernelworks.inspect.render import format_report, format_table

    print(header)
    if table:
        print()
        print(format_table(reports, markdown=args.markdown))
    for r in reports:
        print()
        print(format_report(r))
        if args.ptx:
            print(f"\n---- PTX {r.name} ----\n{r.ptx}")
        if args.sass:
            print(f"\n---- SASS {r.name} ----\n{r.sass}")


def _emit(args: argparse.Namespace, blocks: list[tuple[str, list, bool]]) -> None:
    """Text blocks (header, reports, with a comparison table?) or, with ``--json``, one JSON list."""
    if args.json:
        dicts = [r.to_dict(with_asm=args.ptx or args.sass) for _, reports, _ in blocks for r in reports]
        print(json.dumps(dicts, indent=2, default=str))
        return
    for i, (header, reports, table) in enumerate(blocks):
        if i:
            print()
        _print_text(args, header, reports, table=table)


def run(args: argparse.Namespace) -> int:
    from kernelworks.inspect.api import find_cases, inspect_kernel, inspect_op
    from kernelworks.inspect.render import target_line
    from kernelworks.inspect.targets import resolve_target
    from kernelworks.spec import OpSpec

    target = resolve_target(args.gpu)
    obj = _resolve(args.target)
    if not isinstance(obj, OpSpec):
        if not args.signature:
            raise ValueError(f"{args.target} is a kernel, not an op spec: give its argument types with "
                             "--signature 'x_ptr=*fp16,n=i32,...'")
        report = inspect_kernel(obj, args.signature, parse_assignments(args.constexpr, "--constexpr"), target,
                                num_warps=args.num_warps, num_stages=args.num_stages)
        _emit(args, [(f"{args.target} · {target_line(target)}", [report], False)])
        return 0

    spec = obj
    modes = (("fwd", "train", "bwd") if spec.grad_inputs else ("fwd",)) if args.mode == "all" else (args.mode,)
    given: list[dict[str, Any] | None] = [parse_assignments(args.config, "--config") or None]
    configs = {mode: given for mode in modes}  # --all-configs: each pass's own search space
    note = ""
    if args.all_configs:
        for mode in modes:
            space = spec.search_space(mode)[0]
            if space:
                configs[mode] = [dict(c) for c in space]
            else:
                note += (f"\nspec {spec.name!r} declares no configs{' for its backward' if mode == 'bwd' else ''}: "
                         "showing the launcher's own choice")
    several = any(len(cfgs) > 1 for cfgs in configs.values())
    blocks = []
    for case in [c for name in (args.case or [None]) for c in find_cases(spec, name)]:
        reports = [r for mode in modes for cfg in configs[mode]
                   for r in inspect_op(spec, case, target, modes=(mode,), config=cfg)]
        blocks.append((f"{spec.name} · case {case.id} · {target_line(target)}{note}", reports, several))
    _emit(args, blocks)
    return 0
