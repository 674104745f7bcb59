"""When compiling cannot pay, compiled against eager; each run must stay
within 1.2x of the eager one, with few traces and one CompileWarning.

* a loss whose argument gives a new graph on every call (the name itself,
  a string, keyed by its value), on 40 consecutive names (issue 21);
* a cheap function whose argument's length cycles through 5, 20, 50 or
  200 values over 150 calls, and the same 10x cheaper and 10x dearer
  (issues 32 and 34: the budget in time, whatever a trace costs).

    PYTHONPATH=src python benchmarks/compile_fallback.py [--quick]
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import sys
import time
import warnings

import chainrule
from chainrule.bench import gpt_loop
from chainrule.bench.gpt import encode
from chainrule.bench.harness import FULL


def run(names: list[str], compiled: bool) -> tuple[float, object]:
    loop = gpt_loop.NamesLoop(names)
    loss = loop.model.loss

    def by_name(name: str) -> chainrule.Value:  # the string picks the graph
        return loss(encode(name))

    fn = chainrule.compile(by_name) if compiled else by_name
    start = time.perf_counter()
    for name in names:
        out = fn(name)
        out.backward()
        loop.update()
    return time.perf_counter() - start, fn


def cycling(lengths: int, width: int, calls: int = 150) -> tuple[float, float, int, int]:
    """Eager and compiled seconds, traces and warnings of ``f(xs)`` (a
    tanh of a dot product of ``width`` weights per entry), its backward
    included, with ``len(xs)`` cycling through ``lengths`` values."""
    rng = random.Random(lengths * 1000 + width)
    w = [chainrule.Value(rng.uniform(-1, 1)) for _ in range(width)]

    def f(xs: list[float]) -> chainrule.Value:
        return sum((wi * x).tanh() for x in xs for wi in w)

    sizes = [1 + k % lengths for k in range(calls)]
    inputs = [[rng.uniform(-1, 1) for _ in range(n)] for n in sizes]
    totals = []
    for compiled in (False, True):
        fn: object = chainrule.compile(f) if compiled else f
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            for xs in inputs:
                out = fn(xs)  # type: ignore[operator]
                out.backward()
            totals.append(time.perf_counter() - start)
    traces = fn.traces  # type: ignore[attr-defined]
    return totals[0], totals[1], traces, len(caught)


def main_cycling() -> None:
    worst = 0.0
    print("lengths  width  eager s  compiled s  ratio  traces  warnings")
    for width in (1, 10, 100):  # 10x cheaper, the function, 10x dearer
        for lengths in (5, 20, 50, 200):
            best = None
            for _ in range(3):  # the fastest of three of each, on a shared machine
                eager, compiled, traces, warned = cycling(lengths, width)
                if best is None or compiled / eager < best[1] / best[0]:
                    best = (eager, compiled, traces, warned)
            assert best is not None
            eager, compiled, traces, warned = best
            worst = max(worst, compiled / eager)
            print(
                f"{lengths:7d}  {width:5d}  {eager:7.3f}  {compiled:10.3f}  "
                f"{compiled / eager:5.2f}  {traces:6d}  {warned:8d}"
            )
    print(f"worst ratio {worst:.2f}x (must be <= 1.2); load average {os.getloadavg()}")
    assert math.isfinite(worst)


def main() -> None:
    main_cycling()
    if "--quick" in sys.argv:
        return
    names = gpt_loop.loop_names(dataclasses.replace(FULL, loop_names=40))
    eager, _ = run(names, compiled=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seconds, fn = run(names, compiled=True)
    stats = fn.stats()  # type: ignore[attr-defined]
    print(f"eager    {eager:.2f} s")
    print(f"compiled {seconds:.2f} s ({seconds / eager:.2f}x eager), traces {stats['traces']}")
    print(f"warnings {len(caught)}: {caught[0].message if caught else '-'}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
