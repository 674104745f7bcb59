"""Sphinx extension: ``{python-run}`` blocks, Python that runs while the
site is built and is shown with what it printed, so a page's output cannot
go stale (as ``program-output`` does for commands).

A page's blocks run top to bottom in one namespace, as a notebook's cells
do, in an empty directory of their own (``_generated/pages/<page>``). A
block that raises fails the build (a warning under ``-W``) with its
traceback. Options:

``:image: FILE``
    show FILE, which the block wrote in its directory, after the output.
``:alt: TEXT``
    the image's alternative text.
``:raises: NAME``
    the block must raise the exception NAME; its message is shown as the
    output, as Python prints it (``TypeError: ...``).
``:output: markdown``
    what the block printed is Markdown (``explain(f, format="markdown")``):
    show it rendered, a table as a table that fits its column.
``:output: display``
    as a notebook cell: the block's last line is an expression, and its
    value is shown as a notebook shows it (its ``_repr_html_`` or ``_repr_svg_``: a Value's
    drawn graph, ``walkthrough(f)``'s stepping view), live in the page.

``tests/test_docs.py`` runs the same blocks through the same ``Session``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import linecache
import os
import re
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The directive's name, as pages write it: ```` ```{python-run} ````.
NAME = "python-run"
OUT = Path("_generated") / "pages"
OPTION = re.compile(r"^:([a-z-]+):\s*(.*)$")


@dataclass(frozen=True)
class Outcome:
    """What one block printed, and the traceback when it failed."""

    output: str
    error: str | None = None
    html: str | None = None  # the last line's value, as a notebook shows it


class Session:
    """One page's namespace and working directory: its blocks, in order."""

    def __init__(self, cwd: Path, name: str) -> None:
        self.cwd = cwd
        self.name = name
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.count = 0

    def run(self, code: str, raises: str | None = None, display: bool = False) -> Outcome:
        self.count += 1
        # what a reader sees in a warning or traceback: the cell, as a notebook names it
        filename = f"<cell {self.count}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        printed = io.StringIO()
        here = os.getcwd()
        os.chdir(self.cwd)
        shown: Any = None
        try:
            with contextlib.redirect_stdout(printed):
                tree = ast.parse(code, filename)
                last = tree.body.pop() if display and isinstance(tree.body[-1], ast.Expr) else None
                exec(compile(tree, filename, "exec"), self.namespace)
                if last is not None:
                    value = eval(
                        compile(ast.Expression(last.value), filename, "eval"), self.namespace
                    )
                    for method in ("_repr_html_", "_repr_svg_"):  # the notebook's order
                        if shown is None and hasattr(value, method):
                            shown = getattr(value, method)()
        except Exception as e:
            if raises is not None and type(e).__name__ == raises:
                return Outcome(printed.getvalue() + f"{type(e).__name__}: {e}\n")
            where = f"{self.name}, cell {self.count}:\n"
            return Outcome(printed.getvalue(), where + traceback.format_exc())
        finally:
            os.chdir(here)
        if raises is not None:
            return Outcome(printed.getvalue(), f"expected {raises}, and nothing was raised")
        if display and shown is None:
            return Outcome(printed.getvalue(), "display: the last line shows no HTML")
        return Outcome(printed.getvalue(), html=shown)


def split_options(text: str) -> tuple[dict[str, str], str]:
    """A MyST block's leading ``:name: value`` lines, and the code after them."""
    lines = text.splitlines()
    options: dict[str, str] = {}
    while lines and (match := OPTION.match(lines[0])):
        options[match[1]] = match[2]
        lines.pop(0)
    return options, "\n".join(lines).strip("\n") + "\n"


def _directive() -> type:
    import notebooks  # a tutorial's blocks, with what they printed, go to its notebook
    from docutils import nodes
    from docutils.parsers.rst import directives
    from docutils.statemachine import StringList
    from sphinx.util import logging
    from sphinx.util.docutils import SphinxDirective

    logger = logging.getLogger(__name__)

    class PythonRun(SphinxDirective):
        has_content = True
        option_spec = {  # noqa: RUF012 - docutils' protocol
            "image": directives.unchanged_required,
            "alt": directives.unchanged,
            "raises": directives.unchanged_required,
            "output": lambda arg: directives.choice(arg, ("text", "markdown", "display")),
        }

        def _session(self) -> Session:
            session = self.env.temp_data.get(NAME)
            if session is None:
                cwd = Path(self.env.srcdir) / OUT / self.env.docname
                shutil.rmtree(cwd, ignore_errors=True)
                cwd.mkdir(parents=True)
                session = self.env.temp_data[NAME] = Session(cwd, self.env.docname)
            return session

        def run(self) -> list[Any]:
            code = "\n".join(self.content).strip("\n") + "\n"
            session = self._session()
            display = self.options.get("output") == "display"
            outcome = session.run(code, self.options.get("raises"), display)
            notebooks.record(self.env, code, outcome.output)
            if outcome.error:
                logger.warning(
                    "a python-run block failed:\n%s", outcome.error, location=self.get_location()
                )
            shown: list[Any] = [nodes.literal_block(code, code, language="python")]
            if outcome.output and self.options.get("output") == "markdown":
                rendered = nodes.container(classes=["python-run-rendered"])
                lines = StringList(outcome.output.splitlines(), source=self.env.docname)
                self.state.nested_parse(lines, self.content_offset, rendered)
                shown.append(rendered)
            elif outcome.output:
                out = nodes.literal_block(outcome.output, outcome.output, language="text")
                out["classes"].append("python-run-output")
                shown.append(out)
            if outcome.html:
                shown.append(
                    nodes.raw(
                        "", f'<div class="python-run-display">{outcome.html}</div>', format="html"
                    )
                )
            if "image" in self.options:
                name = self.options["image"]
                if not (session.cwd / name).is_file():
                    logger.warning(
                        "python-run: the block wrote no %s", name, location=self.get_location()
                    )
                uri = f"/{OUT.as_posix()}/{self.env.docname}/{name}"
                shown.append(nodes.image(uri=uri, alt=self.options.get("alt", name)))
            return shown

    return PythonRun


def setup(app: Any) -> dict[str, Any]:
    app.add_directive(NAME, _directive())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
