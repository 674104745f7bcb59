"""Value's ``+`` and ``*`` as a trace runs them: the engine's own code, its
reads of ``.data`` through Value's slot.

While a trace runs, ``.data`` of a Value and of a node the trace made is a
property (:mod:`chainrule.compiler.trace`): user code's reads are
followed, the engine's reads get the float, after asking which file reads
(a frame look-up, a few hundred nanoseconds). The engine reads ``.data``
twice in every ``+`` and ``*``, most of a network's nodes, so those two
operators run as copies of the engine's methods, compiled again from
engine.py's source (:func:`~chainrule.compiler.rewrite.recompiled`, which
checks that the source is the code that runs) with each ``x.data`` read as
``_slot(x) if type(x) in _plain else x.data``: the float the property hands
the engine, without asking; any other class (a user's subclass with its own
``data``, a stand-in for a pick) reads ``x.data`` as the engine does. The
copies keep engine.py as their file, so whatever they call sees the
engine's reads, as for the methods themselves.

A method of Value the user patched (``Value.__add__ = mine``) is not
swapped; Value's namespace as its guard sees it names the engine's methods
(:data:`~chainrule.compiler.sources.STANDS_FOR`).
"""

from __future__ import annotations

import ast
from types import CellType, FunctionType
from typing import Any

from ..value import engine
from ..value.engine import Value
from .rewrite import recompiled
from .sources import STANDS_FOR
from .trace import TraceValue, _data_slot

ENGINE = engine.__file__
_SLOT = "_chainrule_slot_"
_PLAIN = "_chainrule_plain_"

#: The names of the methods copied (eagerly ``__radd__`` is ``__add__``, ``__rmul__`` ``__mul__``).
HOT = ("__add__", "__radd__", "__mul__", "__rmul__")


class _SlotReads(ast.NodeTransformer):
    """``x.data`` (a name's, read) as ``_slot(x) if type(x) in _plain else x.data``."""

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        self.generic_visit(node)
        if node.attr != "data" or type(node.ctx) is not ast.Load:
            return node
        if not isinstance(node.value, ast.Name):
            return node
        x = node.value.id
        test = ast.Compare(
            ast.Call(ast.Name("type", ast.Load()), [ast.Name(x, ast.Load())], []),
            [ast.In()],
            [ast.Name(_PLAIN, ast.Load())],
        )
        read = ast.Call(ast.Name(_SLOT, ast.Load()), [ast.Name(x, ast.Load())], [])
        return ast.copy_location(ast.IfExp(test, read, node), node)


#: The engine's method -> its copy (None: its source is not the code that runs).
_copies: dict[Any, FunctionType | None] = {}


def operators() -> dict[str, FunctionType]:
    """Value's ``+`` and ``*`` by name (their reflections too) -> the copy
    of the engine's method each is now, reading ``.data`` of a plain Value
    and of a trace's node through the slot; a method the user patched is
    left out. Called while no trace runs (under the trace's lock)."""
    found: dict[str, FunctionType] = {}
    for name in HOT:
        eager = Value.__dict__.get(name)
        if type(eager) is not FunctionType:
            continue  # (the user's own: as it is)
        if eager not in _copies:
            _copies[eager] = _copy(eager)
        copy = _copies[eager]
        if copy is not None:
            found[name] = copy
    return found


def _copy(eager: Any) -> FunctionType | None:
    code = getattr(eager, "__code__", None)
    if code is None or code.co_filename != ENGINE:
        return None  # (the user's own: as it is)
    try:
        code = recompiled(code, _SlotReads, [_SLOT, _PLAIN])
    except (SyntaxError, ValueError, TypeError, OSError):
        code = None
    if code is None:
        return None
    given = {_SLOT: _data_slot.__get__, _PLAIN: (Value, TraceValue)}
    cells = tuple(CellType(given[n]) for n in code.co_freevars)
    copy = FunctionType(code, eager.__globals__, eager.__name__, eager.__defaults__, cells)
    copy.__qualname__, copy.__doc__ = eager.__qualname__, eager.__doc__
    copy.__module__ = eager.__module__
    STANDS_FOR[copy] = eager
    return copy
