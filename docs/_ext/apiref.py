"""Sphinx extension: write the API reference from ``public_api`` at build
time, one page per public module, and fail the build (a warning under
``-W``) when a public name is missing from the site.

Each object is documented once, on the page of the first public module
that exports it; the other modules' pages link to it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import public_api
from sphinx import addnodes
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


def one_line(text: str) -> str:
    """A docstring's summary: its first sentence, on one line (a ". "
    inside inline markup does not end it; a closing colon becomes a
    full stop)."""
    text = " ".join(text.split("\n\n")[0].split())
    end = text.find(". ")
    while end >= 0 and _inside_markup(text[:end]):
        end = text.find(". ", end + 2)
    first = text if end < 0 else text[: end + 1]
    return first.rstrip(":") + "." if first.endswith(":") else first


def _inside_markup(before: str) -> bool:
    """Whether text that starts with ``before`` is inside a literal or a role."""
    return before.count("``") % 2 == 1 or before.replace("``", "").count("`") % 2 == 1


def _table(module: str, rows: list[tuple[str, str, str]]) -> list[str]:
    """``name | summary`` rows, each name a link to where it is documented."""
    lines = [".. list-table::", "   :class: api-summary", "   :widths: 1 3", ""]
    for name, home, text in rows:
        lines += [f"   * - :py:obj:`{name} <{home}.{name}>`", f"     - {text}"]
    return [*lines, ""]


def _page(module: Any, homes: dict[tuple[str, str], str]) -> str:
    """A module's page: its docstring, a table of its public names with
    their one-line summaries, then each object documented here under a
    heading of its own (an anchor, and an entry in the page's contents)."""
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
        text = one_line(public_api.docstring(module, name))
        (here if home == module.__name__ else elsewhere).append((name, home, text))
    if here:
        lines += _table(module.__name__, here)
    if elsewhere:
        lines += ["Also exported here, documented with their own modules:", ""]
        lines += _table(module.__name__, elsewhere)
    for name, _, _ in here:
        heading = f"``{name}``"
        lines += [heading, "-" * len(heading), "", _directive(module.__name__, name)]
    return "\n".join(lines)


def summary(module: Any) -> str:
    """The first sentence of a module's docstring, on one line."""
    text = " ".join((inspect.getdoc(module) or "").split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _index(names: list[str]) -> str:
    """The reference's front page: every public module with its summary."""
    lines = ["API reference", "=============", ""]
    lines += ["Every public module, with the first line of its docstring; each module's page"]
    lines += ["lists its public names with theirs. The :ref:`genindex` lists every name,"]
    lines += ["the :ref:`modindex` every module.", ""]
    lines += [".. list-table::", "   :widths: 1 3", ""]
    for name in names:
        lines += [f"   * - :doc:`{name}`", f"     - {summary(sys.modules[name])}"]
    lines += ["", ".. toctree::", "   :hidden:", "", *(f"   {name}" for name in names)]
    return "\n".join(lines) + "\n"


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
    names.sort(key=lambda name: name != "chainrule")  # the top-level package first
    text = _index(names)
    path = out / "index.rst"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def check_every_name(app: Sphinx, env: Any) -> None:
    objects = env.get_domain("py").objects
    for (module, name), home in public_api.homes().items():
        if f"{home}.{name}" not in objects:
            logger.warning("API reference: %s.%s is not documented on the site", module, name)


@functools.cache
def documented() -> dict[int, str]:
    """``id(object) -> the dotted name it is documented under``, for every
    class and function on the site and the methods and properties of those
    classes (constants are left out: equal numbers share ids)."""
    found: dict[int, str] = {}
    for (module, name), home in public_api.homes().items():
        obj = getattr(sys.modules[module], name)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        found.setdefault(id(obj), f"{home}.{name}")
        if inspect.isclass(obj):  # :members: documents what the class itself defines
            for member in public_api.members(obj):
                if member.name in vars(obj):
                    attr = vars(obj)[member.name]
                    attr = getattr(attr, "__func__", attr)  # staticmethod, classmethod
                    found.setdefault(id(attr), f"{home}.{name}.{member.name}")
    return found


def _lookup(dotted: str) -> Any:
    """The object a dotted ``chainrule...`` name reaches, or None."""
    parts = dotted.split(".")
    if parts[0] != "chainrule":
        return None
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return None
        return obj
    return None


def resolve_by_object(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """A reference Sphinx cannot find under the name written, resolved as
    Python resolves that name where the docstring is (``to_dot`` in
    ``chainrule.explainer.draw``, ``chainrule.Tensor``) and linked to the page that
    documents that object. Names that reach nothing documented stay
    unresolved, and so warnings."""
    if node.get("refdomain") != "py" or node.get("reftype") == "mod":
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    scopes = [f"{module}.{cls}" if module and cls else None, module, None]
    # a docstring's own module, where Sphinx documents the object elsewhere
    source = str(node.source or "")
    if "docstring of " in source:
        scopes.append(source.split("docstring of ", 1)[1].rpartition(".")[0])
    for scope in scopes:
        obj = _lookup(f"{scope}.{target}" if scope else target)
        if obj is None:
            continue
        obj = getattr(obj, "__func__", obj)  # a classmethod, bound
        name = documented().get(id(obj))
        if name:
            domain = env.get_domain("py")
            return domain.resolve_xref(
                env, node["refdoc"], app.builder, "obj", name, node, contnode
            )
    return None


def documented_bases(app: Sphinx, name: str, obj: Any, options: Any, bases: list[type]) -> None:
    """ "Bases:" lists the bases the site documents (each a link): a helper
    class from a private module is an implementation detail."""
    keep = [b for b in bases if b is object or id(b) in documented() or _external(b)]
    bases[:] = keep


def _external(cls: type) -> bool:
    return not cls.__module__.startswith("chainrule")


def _defined_in(module: str, fullname: str) -> str | None:
    """The module whose source defines ``module.fullname`` (a method's or a
    property's: its class's)."""
    obj: Any = sys.modules.get(module)
    owner = obj
    for part in fullname.split("."):
        owner, obj = obj, getattr(obj, part, None)
        if obj is None:
            return None
    home = getattr(obj, "__module__", None) or getattr(owner, "__module__", None)
    return home if isinstance(home, str) else None


def anchor_where_defined(app: Sphinx, doctree: Any) -> None:
    """Give every object on the site an anchor under the module that defines
    it, and tell viewcode that module: viewcode keeps one anchor prefix per
    source file, so a file whose objects are documented under two modules
    (``to_dot`` on ``chainrule``'s page, ``GraphvizNotFound`` on
    ``chainrule.explainer.draw``'s) got "[docs]" links to anchors that did not exist.
    Runs before viewcode reads the page."""
    for signode in doctree.findall(addnodes.desc_signature):
        module, fullname = signode.get("module"), signode.get("fullname")
        if not module or not fullname:
            continue
        home = _defined_in(module, fullname)
        if home and home != module:
            signode["ids"].append(f"{home}.{fullname}")
            signode["module"] = home


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-read", anchor_where_defined, priority=400)
    app.connect("builder-inited", write_pages)
    app.connect("env-check-consistency", check_every_name)
    app.connect("missing-reference", resolve_by_object)
    app.connect("autodoc-process-bases", documented_bases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
