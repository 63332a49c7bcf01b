"""``kw``: check, time, report on kernels described by op specs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS = ("check", "bench", "report", "render", "calibrate", "ops", "inspect", "lint", "diagnose", "tune")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kw", description="kernelworks: fast, verified Triton kernels and the workbench that proves them.")
    parser.add_argument("--version", action="store_true", help="print versions and the device, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"kernelworks.cli.{name}").add_parser(sub)
    parser.set_defaults(_subcommands=sub.choices)  # main() lets a subcommand report its own unknown flags
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kw`` and ``python -m kernelworks``; returns the exit status."""
    import kernelworks  # sets up the interpreter on GPU-less machines before any kernel is imported

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # with its own usage line, not the top-level one
        (args._subcommands.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.version:
        import torch
        import triton

        from kernelworks.runtime.device import device_name

        print(f"kernelworks {kernelworks.__version__}, torch {torch.__version__}, triton {triton.__version__}, "
              f"device: {device_name()}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(f"kernelworks.cli.{args.command}")
    try:
        return int(module.run(args) or 0)
    except (KeyError, OSError, TypeError, ValueError, RuntimeError, SyntaxError, ImportError) as e:
        # OSError: a missing spec file, an --out that is a file; SyntaxError/ImportError: a user's spec file
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"kw {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
