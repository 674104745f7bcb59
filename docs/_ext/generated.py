"""Sphinx extension: files the pages show, made at build time by
chainrule's own code rather than pasted: ``chainrule explain``'s tables
(``--markdown``, so that the page shows a table that fits its column), its
graph drawings (``draw``, top to bottom), the interactive page,
``chainrule digits``' output and picture, and the benchmark tables from
``benchmarks/*.json`` through ``chainrule bench``'s own table code.
"""

from __future__ import annotations

import json
import re
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
    "explain-relu.md": [*RELU, "--markdown"],
    "explain-square.md": [*SQUARE, "--markdown"],
    "site/walkthrough.html": [*SQUARE, "--html"],
    "site/walkthrough-relu.html": [*RELU, "--html"],
}

#: Drawings: path under _generated -> the formula and its values, drawn top
#: to bottom so that a page column shows the labels at full size.
DRAWINGS: dict[str, list[str]] = {"relu-graph.svg": RELU, "square.svg": SQUARE}


def _chainrule(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "chainrule", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ExtensionError(f"chainrule {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def draw_formula(source: str, values: list[str], path: Path) -> None:
    """``chainrule explain FORMULA NAME=VALUE ... --svg`` drawn top to bottom."""
    from chainrule import draw
    from chainrule.explainer.formula import evaluate

    root = evaluate(source, {k: float(v) for k, v in (a.split("=") for a in values)})
    root.backward()
    draw(root, path, rankdir="TB")


def bench_table(results_json: Path) -> str:
    """The committed benchmark run as ``chainrule bench`` prints it."""
    from chainrule.bench import WORKLOADS, Result
    from chainrule.bench.harness import runs_line, table

    data = json.loads(results_json.read_text(encoding="utf-8"))
    notes = data.get("notes", {})
    loads = data.get("loads", {})  # not in runs before the loads were recorded
    results = []
    for workload, engines in data["workloads"].items():
        for engine, value in engines.items():
            result = Result(workload, engine, value, notes.get(workload, {}).get(engine, ""))
            load = loads.get(workload, {}).get(engine)
            if load:
                result.load = (load["before"], load["after"])
                result.representative = load["representative"]
            results.append(result)
    meta = data["meta"]
    warm = meta.get("warmup_seconds", 0.0)  # not in runs before it was a setting
    head = runs_line(meta["settings"], meta["warmup"], warm, meta["repetitions"], meta.get("runs"))
    head += f"; {meta['python']}, {meta['machine']}"
    if meta.get("cpus"):
        head += f", {meta['cpus']} CPUs"
    if meta.get("load_average"):
        head += f", load average {' '.join(map(str, meta['load_average']))}"
    if "gpt_sizes_threads" in meta:
        head += f"; {meta['gpt_sizes_threads']} thread(s) a side"
    return head + "\n\n" + table(WORKLOADS, results) + "\n"


def as_markdown(printed: str) -> str:
    """``chainrule bench``'s table as printed (its header line, a blank line,
    then columns under a rule of dashes) as a paragraph and a Markdown
    table, so that the page shows a table that wraps and scrolls in its
    frame rather than a line of text wider than the column."""
    head, _, body = printed.partition("\n\n")
    lines = body.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"-+", lines[1])]
    spans = list(zip(starts, [*starts[1:], None]))

    def cells(line: str) -> list[str]:
        return [line[a:b].strip().replace("|", "\\|") for a, b in spans]

    table = ["| " + " | ".join(cells(lines[0])) + " |", "|" + "---|" * len(spans)]
    table += ["| " + " | ".join(cells(line)) + " |" for line in lines[2:]]
    return f"{head}\n\n" + "\n".join(table) + "\n"


#: Added to the stepping pages the site shows: the site's icon. (On a phone
#: the page's own stylesheet reflows its table.)
SITE_HEAD = '<link rel="icon" href="_static/favicon.svg">'


def _for_the_site(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("</head>", SITE_HEAD + "</head>", 1), encoding="utf-8")


def generate(app: Sphinx) -> None:
    out = Path(app.srcdir) / OUT
    run = out / "run"  # where the pages' commands run: empty, so no run finds an old one
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    # tutorials/continue-on-torch: its own run (its checkpoint is not tensor.md's),
    # where `examples/continue_on_torch.py` is the repository's
    (run / "torch").mkdir()
    (run / "torch" / "examples").symlink_to(Path(app.srcdir).parent / "examples")
    (out / "site").mkdir(exist_ok=True)
    for name, args in FILES.items():
        if "--markdown" in args:
            (out / name).write_text(_chainrule("explain", *args), encoding="utf-8")
        else:
            _chainrule("explain", *args, str(out / name))
            _for_the_site(out / name)
    for name, (source, *values) in DRAWINGS.items():
        draw_formula(source, values, out / name)
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
        (out / f"bench-{run}.md").write_text(as_markdown(table), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
