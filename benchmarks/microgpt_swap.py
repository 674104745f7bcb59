"""microgpt's training script, unchanged, on its own ``Value`` and on chainrule's.

chainrule cannot ship microgpt's script, so bring your copy (and the
``input.txt`` of names it reads, next to it)::

    python benchmarks/microgpt_swap.py path/to/microgpt.py
    python benchmarks/microgpt_swap.py path/to/microgpt.py --steps 20 --rounds 3

The script runs as written, twice per round in one process: once with its
own 14-line ``Value`` class, once with ``from chainrule.engine import Value``
inserted right after that class (the swap a user makes). Only its
``num_steps = ...`` line is replaced by ``--steps``, so a run takes seconds
rather than an hour. After untimed warm-up runs the engines alternate (and
take turns going first), every run starts after a full garbage collection, and the cyclic collector
stays on, as it is for the user.

Every run must print the same text (the samples included) and give the
same loss at every step, compared as exact floats; the script prints the
median milliseconds per step of each engine (a step: from one "step ..."
line to the next, forward + backward + Adam) and their ratio. It needs
nothing beyond the standard library and chainrule's scalar engine, so it
runs on CPython 3.14 under Pyodide too (``py314`` mounts only the current
directory: keep the copy under it)::

    ../shared/py314/py314 benchmarks/microgpt_swap.py out/microgpt/microgpt.py
"""

from __future__ import annotations

import argparse
import ast
import gc
import io
import itertools
import os
import platform
import statistics
import sys
import time
from typing import Any

ENGINES = ("microgpt", "chainrule")


def programs(path: str, steps: int) -> dict[str, Any]:
    """The script compiled twice: as it is, and with chainrule's Value
    swapped in after its own class; both with ``num_steps = steps``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    body = tree.body
    where = [i for i, s in enumerate(body) if isinstance(s, ast.ClassDef) and s.name == "Value"]
    if len(where) != 1:
        raise SystemExit(f"{path}: expected one top-level `class Value`, found {len(where)}")
    steps_lines = [
        s
        for s in body
        if isinstance(s, ast.Assign)
        and [getattr(t, "id", None) for t in s.targets] == ["num_steps"]
    ]
    if len(steps_lines) != 1:
        raise SystemExit(f"{path}: expected one top-level `num_steps = ...` line")
    steps_lines[0].value = ast.copy_location(ast.Constant(steps), steps_lines[0].value)
    swap = ast.parse("from chainrule.engine import Value").body[0]
    swapped = ast.Module(body[: where[0] + 1] + [swap] + body[where[0] + 1 :], type_ignores=[])
    return {
        "microgpt": compile(ast.fix_missing_locations(tree), path, "exec"),
        "chainrule": compile(ast.fix_missing_locations(swapped), path, "exec"),
    }


def run(code: Any, path: str) -> tuple[str, list[str], list[float]]:
    """One run of the script: its printed text, the exact loss at every
    step and the seconds each step took."""
    text = io.StringIO()
    losses: list[str] = []
    stamps: list[float] = []
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": path}

    def recording_print(*args: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if args and isinstance(args[0], str) and args[0].startswith("step"):
            losses.append(repr(namespace["loss"].data))
            stamps.append(now)
        elif not losses:  # the last line before the first step starts its clock
            stamps[:] = [now]
        kwargs.pop("file", None)
        print(*args, **kwargs, file=text)

    namespace["print"] = recording_print
    gc.collect()
    exec(code, namespace)
    return text.getvalue(), losses, [b - a for a, b in itertools.pairwise(stamps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", help="your copy of microgpt's microgpt.py")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (20)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each engine (3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each first (1)")
    args = parser.parse_args()
    path = os.path.abspath(args.script)
    folder = os.path.dirname(path)
    if not os.path.exists(os.path.join(folder, "input.txt")):
        raise SystemExit(f"put the names file input.txt next to {path} (no download here)")
    os.chdir(folder)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))  # the literal engine recurses
    codes = programs(path, args.steps)
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    outputs = set()
    for r in range(-args.warmup, args.rounds):
        for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
            text, losses, steps = run(codes[engine], path)
            outputs.add((text, tuple(losses)))
            if r >= 0:
                times[engine] += steps
            name = f"round {r + 1}" if r >= 0 else "warm-up"
            print(f"{name:8s} {engine:9s} {1e3 * statistics.median(steps):8.1f} ms/step")
    if len(outputs) != 1:
        raise SystemExit("the engines' losses or samples differ")
    ms = {e: 1e3 * statistics.median(times[e]) for e in ENGINES}
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        load = "n/a"
    print(
        f"{platform.python_implementation()} {platform.python_version()} "
        f"({sys.platform}), {args.rounds} rounds of {args.steps} steps, load average {load}"
    )
    print("losses and samples: bitwise equal")
    for e in ENGINES:
        print(f"{e:9s} {ms[e]:8.1f} ms/step (median)")
    print(f"chainrule / microgpt: {ms['chainrule'] / ms['microgpt']:.3f}")


if __name__ == "__main__":
    main()
