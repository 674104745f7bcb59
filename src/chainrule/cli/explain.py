"""``chainrule explain``: the backward pass of a formula, step by step.

    chainrule explain "relu(a*b + d)" a=2 b=-3 d=10 --svg graph.svg
    chainrule explain "c = a*b; d = c + a; e = d**2" a=2 b=3 --trace --html page.html

The formula is read by :mod:`chainrule.explainer.formula` (never ``eval``), its graph is
built and backpropagated, and the table of :func:`chainrule.explain` is
printed; ``--trace`` prints every ``+=`` update in order, and ``--html``
writes the interactive page of :mod:`chainrule.explainer.walkthrough`. A mistake in
the formula is reported with a caret under it. Files are written
atomically: a full disk leaves no empty or half-written page.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from ..explainer.draw import DEFAULT_MAX_NODES, GraphTooLarge, GraphvizNotFound, draw, to_dot
from ..explainer.formula import ExprError, evaluate
from ..explainer.table import explain, trace
from ..explainer.walkthrough import write_walkthrough
from ..io.sealed import replace_file
from ..value.engine import Value
from .options import CommandError, int_at_least
from .preflight import output_file_problem

_BINDING = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)

EPILOG = """\
formula: numbers, names, + - * / ** and parentheses, and the functions
exp log sqrt tanh sigmoid relu softplus sin cos abs max min; or named
steps separated by ';':  "c = a*b; e = c + d; f = relu(e)".
A formula that starts with '-' goes after '--':  chainrule explain -- "-a*b" a=1 b=2
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain",
        help="print the backward pass of a formula as a table, node by node",
        description="Build the graph of FORMULA with the given values, run the backward\n"
        "pass and print, for every node in reverse topological order, its\n"
        "operation, data, local gradients and grad.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        dash_hint="a formula",
    )
    p.add_argument("formula", metavar="FORMULA", help='e.g. "relu(a*b + d)"')
    p.add_argument("bindings", metavar="NAME=VALUE", nargs="*", help="e.g. a=2 b=-3 d=10")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--trace",
        action="store_true",
        help="also print every update child.grad += local * node.grad, in order",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write an interactive page that steps through the backward pass",
    )
    p.add_argument("--svg", metavar="FILE", help="also draw the graph as SVG (needs Graphviz)")
    p.add_argument("--dot", metavar="FILE", help="also write the graph as Graphviz DOT text")
    p.add_argument(
        "--digits", type=int, default=6, metavar="N", help="significant digits (default 6)"
    )
    p.add_argument(
        "--max-nodes",
        type=int_at_least(1),
        default=DEFAULT_MAX_NODES,
        metavar="N",
        help="draw graphs of up to N values in --html, --svg and --dot; larger ones "
        f"are refused (--html) or drawn as a summary (default {DEFAULT_MAX_NODES})",
    )
    p.set_defaults(func=run)


def parse_bindings(items: list[str]) -> dict[str, float]:
    """``["a=2", "b=-3"]`` as ``{"a": 2.0, "b": -3.0}``; ValueError with a
    one-line message for anything else."""
    values: dict[str, float] = {}
    for item in items:
        m = _BINDING.fullmatch(item.strip())
        if m is None:
            raise ValueError(f"{item!r} is not NAME=VALUE (e.g. a=2)")
        name, text = m.groups()
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{item!r}: {text!r} is not a number") from None
        if name in values:
            raise ValueError(f"{name} is given twice")
        values[name] = number
    return values


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.digits <= 17:
        raise CommandError("--digits must be between 1 and 17", 2)
    for path in (args.dot, args.svg, args.html):
        problem = path and output_file_problem(Path(path))  # before the work
        if problem:
            raise CommandError(f"cannot write {path}: {problem}")
    try:
        values = parse_bindings(args.bindings)
    except ValueError as e:
        raise CommandError(str(e), 2) from None
    try:
        root: Value = evaluate(args.formula, values)
    except ExprError as e:
        caret = e.caret()
        raise CommandError(f"{e}" + (f"\n{caret}" if caret else ""), 2) from None
    root.backward()  # a fresh graph: the drawing then shows one pass's grads
    fmt = "markdown" if args.markdown else "text"
    print(explain(root, fmt, digits=args.digits))
    if args.trace:
        print()
        print(trace(root, digits=args.digits))
    if args.html:
        try:
            write_walkthrough(root, args.html, digits=args.digits, max_nodes=args.max_nodes)
        except GraphTooLarge as e:
            raise CommandError(
                f"--html: the graph has {e.nodes} values, more than --max-nodes {e.max_nodes}; "
                f"give --max-nodes {e.nodes} to draw the page"
            ) from None
        except OSError as e:
            raise CommandError(f"cannot write {args.html}: {e.strerror or e}") from None
        print(f"wrote {args.html}", file=sys.stderr)
    if args.dot:
        try:
            text = to_dot(root, max_nodes=args.max_nodes) + "\n"
            replace_file(args.dot, text.encode("utf-8"))
        except OSError as e:
            raise CommandError(f"cannot write {args.dot}: {e.strerror or e}") from None
    if args.svg:
        try:
            draw(root, args.svg, format="svg", max_nodes=args.max_nodes)
        except OSError as e:
            raise CommandError(f"cannot write {args.svg}: {e.strerror or e}") from None
        except (GraphvizNotFound, RuntimeError) as e:
            raise CommandError(str(e)) from None
        print(f"wrote {args.svg}", file=sys.stderr)
    return 0
