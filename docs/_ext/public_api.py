"""The public API of chainrule: which modules, which names, where each is
documented, and whether each has a docstring.

Shared by the Sphinx site (``apiref.py`` writes the API reference from it)
and by ``tests/test_docstrings.py`` (which fails on a public name without a
docstring), so the two cannot disagree. Needs no Sphinx.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

#: The public modules, in the order of the API reference. A name exported by
#: several of them is documented in the first and linked from the others, so
#: ``chainrule`` (which re-exports the submodules' main names) comes after
#: them, and the modules whose main names ``chainrule`` exports after it.
PUBLIC_MODULES: tuple[str, ...] = (
    "chainrule.nn",
    "chainrule.module",
    "chainrule.optim",
    "chainrule.losses",
    "chainrule.data",
    "chainrule.data.images",
    "chainrule.checkpoint",
    "chainrule.fused",
    "chainrule.tensor.losses",
    "chainrule.tensor",
    "chainrule.tensor.nn",
    "chainrule.tensor.cnn",
    "chainrule.transformer",
    "chainrule.tensor.charlm",
    "chainrule.tensor.checkpoint",
    "chainrule.interop",
    "chainrule",
    "chainrule.check",
    "chainrule.compiler",
    "chainrule.explainer.table",
    "chainrule.explainer.text",
    "chainrule.explainer.draw",
    "chainrule.explainer.walkthrough",
    "chainrule.explainer.notebook",
    "chainrule.explainer.compare",
)

#: Modules that may not exist yet on every branch; skipped until they do.
OPTIONAL_MODULES = frozenset({"chainrule.interop"})


def modules() -> list[ModuleType]:
    """The public modules that import here, in reference order."""
    found = []
    for name in PUBLIC_MODULES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if name not in OPTIONAL_MODULES or e.name != name:
                raise
    return found


def public_names(module: ModuleType) -> list[str]:
    """The module's ``__all__`` without submodules (each has its own page),
    or, without ``__all__``, the public names it defines itself."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, obj in vars(module).items()
            if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__
        ]
    return [n for n in names if not inspect.ismodule(getattr(module, n))]


def homes() -> dict[tuple[str, str], str]:
    """``(module, name) -> module`` whose page documents that object."""
    first: dict[int, str] = {}
    out = {}
    for module in modules():
        for name in public_names(module):
            obj = getattr(module, name)
            key = id(obj) if _is_definition(obj) else id((module.__name__, name))
            out[(module.__name__, name)] = first.setdefault(key, module.__name__)
    return out


def _is_definition(obj: Any) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj)


@dataclass(frozen=True)
class Member:
    """A public method or property of a public class."""

    name: str
    fullname: str  # where it is defined: module.Class.name
    obj: Any


def members(cls: type) -> list[Member]:
    """Public methods and properties that chainrule's own classes define."""
    found: dict[str, Member] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("chainrule"):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or name in found:
                continue
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property) or inspect.isroutine(attr):
                where = f"{klass.__module__}.{klass.__qualname__}.{name}"
                found[name] = Member(name, where, getattr(cls, name, attr))
    return list(found.values())


def _attribute_doc(module: ModuleType, name: str) -> str:
    """The ``#:`` comment above a module constant, or the string after it
    (what Sphinx's autodata shows)."""
    path = Path(inspect.getfile(module))
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    body = ast.parse(source).body
    for i, node in enumerate(body):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        comments = []
        for line in reversed(lines[: node.lineno - 1]):
            if not line.startswith("#:"):
                break
            comments.append(line[2:].strip())
        if comments:
            return " ".join(reversed(comments))
        after = body[i + 1] if i + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            return str(after.value.value)
    return ""


def docstring(module: ModuleType, name: str) -> str:
    """What ``help()`` and the API reference show for ``module.name``."""
    obj = getattr(module, name)
    if _is_definition(obj):
        return inspect.getdoc(obj) or ""
    return _attribute_doc(module, name)


def undocumented() -> list[str]:
    """Every public name, method and property without a docstring."""
    missing = []
    for module in modules():
        for name in public_names(module):
            obj = getattr(module, name)
            if not docstring(module, name).strip():
                defined = _is_definition(obj)
                missing.append(
                    f"{obj.__module__}.{obj.__qualname__}"
                    if defined
                    else f"{module.__name__}.{name}"
                )
            if inspect.isclass(obj):
                for member in members(obj):
                    if not (inspect.getdoc(member.obj) or "").strip():
                        missing.append(member.fullname)
    return sorted(set(missing))
