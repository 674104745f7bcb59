"""Bytes per node: a graph captured by ``chainrule.compile`` against the
same graph as eager Values (tracemalloc), for micrograd's demo step and the
GPT step on one name.

    python benchmarks/compile_memory.py
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import chainrule
from chainrule.bench.gpt import CompatOps, GPTStep, compat_adam
from chainrule.bench.harness import FULL
from chainrule.bench.moons import _compat
from chainrule.value.engine import topological_order


def measure(name: str, loss: Callable[[], Any]) -> None:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    root = loss()
    eager = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    nodes = len(topological_order(root)[0])
    del root
    compiled = chainrule.compile(loss)
    compiled()
    memory = compiled.memory()
    print(
        f"{name:10s} {nodes:6d} nodes: eager {eager / nodes:4.0f} B/node, "
        f"compiled {memory['bytes'] / nodes:4.0f} B/node "
        f"({memory['nodes']} slots: nodes, leaves and constants)"
    )


def main() -> None:
    step = _compat(FULL)
    measure("moons-step", step.loss)
    gpt = GPTStep(CompatOps, compat_adam, FULL.gpt_name)
    measure("gpt-name", lambda: gpt.model.batch_loss(gpt.batch))


if __name__ == "__main__":
    main()
