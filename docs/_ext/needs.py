"""Sphinx extension: ``program-output`` blocks that run only where what they
need is installed. ``:needs: torch`` (module names, comma-separated) on a
block: where each module imports, the command runs as usual; where one does
not, the page shows a note saying the command was not run and which extra
runs it, in place of the output, and the build goes on without a warning.

So ``pip install -e '.[docs]'`` builds the whole site without PyTorch (a
large download the other pages do not need), and a build with the ``torch``
extra too shows the PyTorch tutorial's real output.

A command whose standard error the page hides (``:nostderr:``) and that
fails has that standard error in the build's warnings: the failure says
why, where the page's output alone would not.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinxcontrib.programoutput import Command, ProgramOutputCache, ProgramOutputDirective

logger = logging.getLogger(__name__)

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


class Outputs(ProgramOutputCache):
    """programoutput's cache of the commands' outputs, which also reports
    the hidden standard error of a command that fails."""

    def __missing__(self, command: Command) -> tuple[int, str]:
        if not command.hide_standard_error:
            return super().__missing__(command)
        process = command.execute()  # (its standard error piped)
        out, err = process.communicate()
        encoding = sys.getfilesystemencoding()
        if process.returncode != 0:
            tail = err.decode(encoding, "replace").strip()[-4000:]
            logger.warning(
                "command %s exited %s; its standard error (hidden on the page):\n%s",
                command,
                process.returncode,
                tail or "(empty)",
            )
        result = (process.returncode, out.decode(encoding, "replace").rstrip())
        self[command] = result
        return result


def _outputs(app: Sphinx) -> None:
    if not hasattr(app.env, "programoutput_cache"):
        app.env.programoutput_cache = Outputs()


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinxcontrib.programoutput")
    app.connect("builder-inited", _outputs, priority=100)  # before programoutput's own
    for name in ("program-output", "command-output"):
        app.add_directive(name, ProgramOutputIfInstalled, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
