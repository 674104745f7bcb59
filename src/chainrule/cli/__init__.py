"""The ``chainrule`` command: one subcommand per module in this package.

Each command module has ``register(subparsers)``, which adds its parser and
sets ``func`` to the function that runs it and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .._version import __version__

# One line per command module (chainrule/cli/<name>.py).
COMMANDS: list[str] = [
    "bench",
    "explain",
    "gpt",
    "moons",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chainrule",
        description="Reverse-mode automatic differentiation: train the classic demos, "
        "benchmark the engine, and explain a backward pass step by step.",
    )
    parser.add_argument("--version", action="version", version=f"chainrule {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"chainrule.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
