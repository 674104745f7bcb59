"""Sphinx extension: write the API reference from ``public_api`` at build
time, one page per public module, and fail the build (a warning under
``-W``) when a public name is missing from the site.

Each object is documented once, on the page of the first public module
that exports it; the other modules' pages link to it.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import public_api
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

OUT = "api"


def _directive(module: str, name: str) -> str:
    obj = getattr(__import__(module, fromlist=[name]), name)
    if inspect.isclass(obj):
        return f".. autoclass:: {module}.{name}\n   :members:\n   :show-inheritance:\n"
    if inspect.isroutine(obj):
        return f".. autofunction:: {module}.{name}\n"
    return f".. autodata:: {module}.{name}\n   :no-value:\n"


def _page(module: Any, homes: dict[tuple[str, str], str]) -> str:
    title = f"``{module.__name__}``"
    lines = [title, "=" * len(title), "", f".. automodule:: {module.__name__}", "   :no-members:"]
    parent, _, last = module.__name__.rpartition(".")
    if parent and getattr(sys.modules[parent], last, module) is not module:
        # chainrule.explain is also the function chainrule exports: one entry
        lines.append("   :no-index:")
    lines.append("")
    here, elsewhere = [], []
    for name in public_api.public_names(module):
        home = homes[(module.__name__, name)]
        (here if home == module.__name__ else elsewhere).append((name, home))
    if here:  # a table of contents
        lines += [", ".join(f":py:obj:`~{module.__name__}.{name}`" for name, _ in here), ""]
    for name, _ in here:
        lines.append(_directive(module.__name__, name))
    if elsewhere:
        lines += ["Also exported here", "-" * 18, ""]
        for name, home in elsewhere:
            lines.append(f"- ``{module.__name__}.{name}``: :py:obj:`{home}.{name}`")
        lines.append("")
    return "\n".join(lines)


def write_pages(app: Sphinx) -> None:
    out = Path(app.srcdir) / OUT
    out.mkdir(exist_ok=True)
    homes = public_api.homes()
    names = []
    for module in public_api.modules():
        names.append(module.__name__)
        text = _page(module, homes)
        path = out / f"{module.__name__}.rst"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    index = ["API reference", "=============", "", ".. toctree::", "   :maxdepth: 1", ""]
    names.sort(key=lambda name: name != "chainrule")  # the top-level package first
    index += [f"   {name}" for name in names]
    text = "\n".join(index) + "\n"
    path = out / "index.rst"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def check_every_name(app: Sphinx, env: Any) -> None:
    objects = env.get_domain("py").objects
    for (module, name), home in public_api.homes().items():
        if f"{home}.{name}" not in objects:
            logger.warning("API reference: %s.%s is not documented on the site", module, name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", write_pages)
    app.connect("env-check-consistency", check_every_name)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
