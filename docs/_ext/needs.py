"""Sphinx extension: ``program-output`` blocks that run only where what they
need is installed. ``:needs: torch`` (module names, comma-separated) on a
block: where each module imports, the command runs as usual; where one does
not, the page shows a note saying the command was not run and which extra
runs it, in place of the output, and the build goes on without a warning.

So ``pip install -e '.[docs]'`` builds the whole site without PyTorch (a
large download the other pages do not need), and a build with the ``torch``
extra too shows the PyTorch tutorial's real output.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinxcontrib.programoutput import ProgramOutputDirective

#: Module -> the extra that installs it, as the note names it.
EXTRAS = {"torch": "torch"}


def missing(modules: list[str]) -> list[str]:
    """The modules of ``modules`` this Python cannot import."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


class ProgramOutputIfInstalled(ProgramOutputDirective):
    """``program-output``, plus ``:needs: MODULE[, MODULE ...]``."""

    option_spec = {**ProgramOutputDirective.option_spec, "needs": directives.unchanged_required}  # noqa: RUF012

    def run(self) -> list[Any]:
        needs = [m.strip() for m in self.options.get("needs", "").split(",") if m.strip()]
        absent = missing(needs)
        if not absent:
            return list(super().run())
        extras = ",".join(dict.fromkeys(["docs", *(EXTRAS.get(m, m) for m in absent)]))
        install = f"pip install -e '.[{extras}]'"
        # literals: the commands as typed (no curly quotes, no en dashes)
        paragraph = nodes.paragraph()
        paragraph += nodes.Text("Not run in this build of the site: ")
        paragraph += nodes.literal(self.arguments[0], self.arguments[0])
        paragraph += nodes.Text(f" needs {' and '.join(absent)}, which is not installed here (")
        paragraph += nodes.literal(install, install)
        paragraph += nodes.Text(" runs it).")
        note = nodes.note()
        note += paragraph
        return [note]


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinxcontrib.programoutput")
    for name in ("program-output", "command-output"):
        app.add_directive(name, ProgramOutputIfInstalled, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
