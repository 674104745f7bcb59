"""The benchmark behind ``chainrule bench``: workloads and the harness.

>>> from chainrule.bench import WORKLOADS
>>> [w.name for w in WORKLOADS]  # doctest: +NORMALIZE_WHITESPACE
['moons-step', 'backward-only', 'deep-chain', 'gpt-step', 'gpt-name-step', 'gpt-names',
 'memory', 'gpt-sizes', 'cnn-step']

A layer above the engines, the training API, ``compiler`` and ``explainer``,
which it may import; only ``cli`` imports it.
"""

from __future__ import annotations

from .batched_gpt import GPT_SIZES, GPT_STEP
from .chain import DEEP_CHAIN
from .cnn import CNN_STEP
from .gpt import GPT_NAME_STEP
from .gpt_loop import GPT_NAMES
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
    load_note,
    measure,
    run,
    runs_apart,
    table,
    timed_runs,
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
    GPT_NAMES,
    MEMORY,
    GPT_SIZES,
    CNN_STEP,
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
    "load_note",
    "measure",
    "run",
    "runs_apart",
    "table",
    "timed_runs",
    "to_json",
    "write_json",
]
