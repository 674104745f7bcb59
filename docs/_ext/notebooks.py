"""Sphinx extension: every tutorial to take away, as a Jupyter notebook
(``.ipynb``) and a Python script (``.py``), made while the site is built
from the page's own source: its prose becomes Markdown cells (comments in
the script), each ``{python-run}`` block a code cell holding what the page
showed under it, each ``{program-output}`` command a ``%%bash`` cell
(``subprocess.run`` in the script). The page links both under its title.

The files are written next to the page in the built site
(``tutorials/<name>.ipynb``); ``tests/test_site_reader.py`` runs each
notebook top to bottom with nbclient and compares what it prints with what
the page shows.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The pages offered for download: every page under this folder.
FOLDER = "tutorials"
#: Where the files are written; ``html_extra_path`` copies ``_generated/site``.
OUT = Path("_generated") / "site"

FENCE = re.compile(r"^(`{3,}|:{3,})\s*(\{([\w-]+)\})?\s*(.*)$")
OPTION = re.compile(r"^:([\w-]+):\s*(.*)$")
#: MyST roles (``{doc}`tutorials/x```) and their text in plain Markdown.
ROLE = re.compile(r"\{[\w:-]+\}`([^`<]*?)\s*(?:<[^>]*>)?`")


@dataclass
class Cell:
    """One cell: ``markdown``, ``python`` (with the page's output) or
    ``command`` (a shell command, as the page ran it)."""

    kind: str
    source: str
    options: dict[str, str] = field(default_factory=dict)
    output: str = ""


def parse(text: str) -> list[Cell]:
    """A MyST page split into cells, in the page's order."""
    cells: list[Cell] = []
    prose: list[str] = []
    lines = text.splitlines()
    i = 0

    def flush() -> None:
        body = "\n".join(prose).strip("\n")
        if body.strip():
            cells.append(Cell("markdown", ROLE.sub(r"`\1`", body)))
        prose.clear()

    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        fence, directive, argument = match[1], match[3], match[4]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence)
        body = lines[i + 1 : end]
        options = {}
        while body and (found := OPTION.match(body[0])):
            options[found[1]] = found[2]
            body.pop(0)
        if directive == "python-run":
            flush()
            cells.append(Cell("python", "\n".join(body).strip("\n"), options))
        elif directive == "program-output":
            flush()
            cells.append(Cell("command", argument.strip(), options))
        elif directive in ("image", "figure", "literalinclude", "include"):
            prose.append(f"*(The page shows `{argument.strip()}` here.)*")
        else:  # a plain code block, or a fence MyST reads some other way
            prose += lines[i : end + 1]
        i = end + 1
    flush()
    return cells


def _lines(text: str) -> list[str]:
    return text.splitlines(True)


def notebook(cells: list[Cell], title: str) -> dict[str, Any]:
    """The cells as an nbformat 4 notebook, the page's outputs included."""
    out = []
    for cell in cells:
        if cell.kind == "markdown":
            out.append({"cell_type": "markdown", "metadata": {}, "source": _lines(cell.source)})
            continue
        metadata: dict[str, Any] = {}
        outputs: list[dict[str, Any]] = []
        if cell.kind == "command":
            source = f"%%bash\n{cell.source}"
        else:
            source = cell.source
            printed, raised = cell.output, cell.options.get("raises")
            if raised and printed.rstrip("\n").split("\n")[-1].startswith(f"{raised}: "):
                *before, last = printed.rstrip("\n").split("\n")
                printed = "".join(f"{line}\n" for line in before)
                message = last[len(raised) + 2 :]
                metadata["tags"] = ["raises-exception"]
            if printed:
                outputs.append({"output_type": "stream", "name": "stdout", "text": _lines(printed)})
            if raised:
                error = {"output_type": "error", "ename": raised, "evalue": message}
                outputs.append({**error, "traceback": []})
        out.append(
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": metadata,
                "outputs": outputs,
                "source": _lines(source),
            }
        )
    for i, cell in enumerate(out):  # nbformat 4.5: every cell has an id
        cell["id"] = f"cell-{i + 1}"
    return {
        "cells": out,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "title": title,
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def script(cells: list[Cell]) -> str:
    """The cells as a Python script: prose as comments, commands through
    ``subprocess``, a block the page shows raising caught and printed as
    the page prints it."""
    parts = []
    if any(c.kind == "command" for c in cells):
        parts.append("import subprocess")
    for cell in cells:
        if cell.kind == "markdown":
            parts.append("\n".join(f"# {line}".rstrip() for line in cell.source.splitlines()))
        elif cell.kind == "command":
            parts.append(f"subprocess.run({cell.source!r}, shell=True, check=True)")
        elif "raises" in cell.options:
            name = cell.options["raises"]
            body = textwrap.indent(cell.source, "    ")
            parts.append(f'try:\n{body}\nexcept {name} as error:\n    print(f"{name}: {{error}}")')
        else:
            parts.append(cell.source)
    return "\n\n".join(parts) + "\n"


def write(srcdir: Path, docname: str, outputs: list[tuple[str, str]]) -> None:
    """Write ``docname``'s notebook and script, given what each of its
    ``{python-run}`` blocks printed (``(code, output)``, in order)."""
    text = (srcdir / f"{docname}.md").read_text(encoding="utf-8")
    cells = parse(text)
    runs = [c for c in cells if c.kind == "python"]
    if [c.source.strip() for c in runs] != [code.strip() for code, _ in outputs]:
        raise ValueError(f"{docname}: the page's blocks and the ones that ran differ")
    for cell, (_, printed) in zip(runs, outputs):
        cell.output = printed
    title = next((c.source.splitlines()[0].lstrip("# ") for c in cells), docname)
    base = srcdir / OUT / docname
    base.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(notebook(cells, title), indent=1, ensure_ascii=False) + "\n"
    base.with_suffix(".ipynb").write_text(text, encoding="utf-8")
    base.with_suffix(".py").write_text(script(cells), encoding="utf-8")


# -- Sphinx -------------------------------------------------------------------

#: ``env`` attribute: docname -> [(code, what it printed)] of its blocks.
RUNS = "chainrule_python_runs"


def record(env: Any, code: str, printed: str) -> None:
    """Called by ``pyrun`` for each block it ran."""
    if env.docname.startswith(f"{FOLDER}/"):
        getattr(env, RUNS).setdefault(env.docname, []).append((code, printed))


def _purge(app: Any, env: Any, docname: str) -> None:
    if not hasattr(env, RUNS):
        setattr(env, RUNS, {})
    getattr(env, RUNS).pop(docname, None)


def _merge(app: Any, env: Any, docnames: set[str], other: Any) -> None:
    """A parallel build: the blocks its other processes ran."""
    _purge(app, env, "")
    runs = getattr(other, RUNS, {})
    getattr(env, RUNS).update({d: runs[d] for d in docnames if d in runs})


def _links(app: Any, doctree: Any) -> None:
    """Under a tutorial's title: links to its notebook and its script."""
    from docutils import nodes

    docname = app.env.docname
    if not docname.startswith(f"{FOLDER}/"):
        return
    name = docname.rsplit("/", 1)[1]
    para = nodes.paragraph(classes=["tutorial-downloads"])
    para += nodes.Text("Take this tutorial away: ")
    for i, (suffix, what) in enumerate(((".ipynb", "a notebook"), (".py", "a Python script"))):
        if i:
            para += nodes.Text(" or ")
        para += nodes.reference("", f"{what} ({suffix})", refuri=name + suffix)
    para += nodes.Text(", made from this page; the notebook holds the outputs shown here.")
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is not None:
        section.insert(1, para)


def _write_all(app: Any, env: Any) -> None:
    for docname in sorted(env.found_docs):
        if docname.startswith(f"{FOLDER}/"):
            write(Path(app.srcdir), docname, getattr(env, RUNS, {}).get(docname, []))


def setup(app: Any) -> dict[str, Any]:
    app.connect("env-purge-doc", _purge)
    app.connect("env-before-read-docs", lambda app, env, docs: _purge(app, env, ""))
    app.connect("env-merge-info", _merge)
    app.connect("doctree-read", _links)
    app.connect("env-updated", _write_all)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
