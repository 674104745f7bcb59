"""When compiling cannot pay: a loss whose argument gives a new graph on
every call (the name itself, a string, keyed by its value), on 40
consecutive names, compiled against eager. chainrule.compile traces a few
times, then runs eagerly with one CompileWarning; the whole run must stay
within 1.2x of the eager one (issue 21).

    PYTHONPATH=src python benchmarks/compile_fallback.py
"""

from __future__ import annotations

import dataclasses
import os
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


def main() -> None:
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
