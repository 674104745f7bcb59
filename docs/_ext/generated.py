"""Sphinx extension: files the pages show, made at build time by
chainrule's own commands rather than pasted: graph drawings from
``chainrule explain --svg``, ``chainrule digits``' output and picture, and
the benchmark tables from ``benchmarks/*.json`` through ``chainrule
bench``'s own table code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

OUT = "_generated"

RELU = ["c = a*b; e = c + d; f = relu(e)", "a=2", "b=-3", "d=10"]
SQUARE = ["c = a*b; d = c + a; e = d**2", "a=2", "b=3"]

#: Files: path under _generated -> ``chainrule explain`` arguments. Files
#: under ``site/`` are copied to the root of the built site as they are.
FILES: dict[str, list[str]] = {
    "relu-graph.svg": [*RELU, "--svg"],
    "square.svg": [*SQUARE, "--svg"],
    "site/walkthrough.html": [*SQUARE, "--html"],
}


def _chainrule(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "chainrule", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ExtensionError(f"chainrule {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def bench_table(results_json: Path) -> str:
    """The committed benchmark run as ``chainrule bench`` prints it."""
    from chainrule.bench import WORKLOADS, Result
    from chainrule.bench.harness import table

    data = json.loads(results_json.read_text(encoding="utf-8"))
    notes = data.get("notes", {})
    results = [
        Result(workload, engine, value, notes.get(workload, {}).get(engine, ""))
        for workload, engines in data["workloads"].items()
        for engine, value in engines.items()
    ]
    meta = data["meta"]
    head = (
        f"chainrule bench ({meta['settings']}): {meta['warmup']} warm-up, "
        f"{meta['repetitions']} timed runs, {meta['statistic']}; "
        f"{meta['python']}, {meta['machine']}"
    )
    if "gpt_sizes_threads" in meta:
        head += f"; {meta['gpt_sizes_threads']} thread(s) a side"
    return head + "\n\n" + table(WORKLOADS, results) + "\n"


def generate(app: Sphinx) -> None:
    out = Path(app.srcdir) / OUT
    run = out / "run"  # where the pages' commands run: empty, so no run finds an old one
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    (out / "site").mkdir(exist_ok=True)
    for name, args in FILES.items():
        _chainrule("explain", *args, str(out / name))
    benchmarks = Path(app.srcdir).parent / "benchmarks"
    # chainrule digits' default run: its output and its picture (as a user's
    # run in ./out prints them)
    digits = out / "digits"
    shutil.rmtree(digits, ignore_errors=True)
    printed = _chainrule("digits", "--out", str(digits)).replace(str(digits), "out")
    (out / "digits-output.txt").write_text(printed, encoding="utf-8")
    runs = ("results", "gpt-sizes", "gpt-sizes-1-thread", "compile", "cnn-step")
    for run in (*runs, "cnn-step-1-thread"):
        table = bench_table(benchmarks / f"{run}.json")
        (out / f"bench-{run}.txt").write_text(table, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
