"""The benchmark behind ``chainrule bench``: workloads and the harness.

>>> from chainrule.bench import WORKLOADS
>>> [w.name for w in WORKLOADS]
['moons-step', 'backward-only', 'deep-chain', 'gpt-step', 'gpt-name-step', 'memory', 'gpt-sizes']
"""

from __future__ import annotations

from .batched_gpt import GPT_SIZES, GPT_STEP
from .chain import DEEP_CHAIN
from .gpt import GPT_NAME_STEP
from .harness import (
    FULL,
    FULL_SETTINGS,
    QUICK_SETTINGS,
    TINY,
    Engine,
    Result,
    Settings,
    Sizes,
    Workload,
    baseline,
    built,
    header,
    install_hints,
    measure,
    run,
    table,
    to_json,
    write_json,
)
from .memory import MEMORY
from .moons import BACKWARD_ONLY, MOONS_STEP

WORKLOADS: tuple[Workload, ...] = (
    MOONS_STEP,
    BACKWARD_ONLY,
    DEEP_CHAIN,
    GPT_STEP,
    GPT_NAME_STEP,
    MEMORY,
    GPT_SIZES,
)

__all__ = [
    "FULL",
    "FULL_SETTINGS",
    "QUICK_SETTINGS",
    "TINY",
    "WORKLOADS",
    "Engine",
    "Result",
    "Settings",
    "Sizes",
    "Workload",
    "baseline",
    "built",
    "header",
    "install_hints",
    "measure",
    "run",
    "table",
    "to_json",
    "write_json",
]
