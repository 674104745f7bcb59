"""What a function reads besides its arguments: globals, closures, ``self``.

A replay does not run the function, so a number or a Value it reached
through a global name, a closure cell, a default argument or an attribute
of the object a method is bound to would be the one it had while tracing.
As ``torch.compile`` guards globals, :class:`Sources` snapshots those
bindings when a trace is made and checks them before every replay: a
rebound name (``lr = 0.1`` after tracing, ``w = Value(10.0)``), an entry of
a list or dict replaced (``W[0] = Value(7.0)``), a changed float in such a
list (``X[3][1] = 2.5``) or a changed attribute of ``self`` make the trace
stale, and the function traces again (the budget then decides whether
tracing still pays).

What is checked: the names the function's code loads from its globals
(and its nested functions' code), its closure cells and defaults, and for a
bound method the attributes of its object; each binding by identity, and
inside lists, tuples, dicts and plain objects' attributes two levels deep,
entry by entry (by identity, numbers by value; the second level only below
containers of at most :data:`WIDE` entries). NumPy arrays up to
:data:`~chainrule.compiler.keys.ARRAY_KEY_BYTES` by their bytes. Deeper
structures, larger arrays and objects reached through other functions'
globals are read while tracing only: see the compile page's sharp bits.
"""

from __future__ import annotations

import operator
import sys
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

from ..value.engine import Value
from .escapes import call_method
from .keys import ARRAY_KEY_BYTES

#: Containers entered below a binding (two levels: ``W[i]``, ``X[i][j]``).
DEPTH = 2
#: Entries compared per snapshot at most; the rest by their container's identity.
LIMIT = 4096
#: A container of more entries than this is compared entry by entry, but
#: its entries' own entries are not (a data set's rows: by identity).
WIDE = 32

#: Modules whose objects are not numbers a graph reads (an Event set while tracing).
_NOT_DATA = frozenset(("threading", "_thread", "queue", "logging", "multiprocessing"))

_MISSING = object()
_OPAQUE = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType, Value)


def _same(a: Any, b: Any) -> bool:
    """The same entry: the same object, or an equal number, string or bytes
    (a float bit for bit)."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return (a == b and str(a) == str(b)) or (a != a and b != b)
    return t in (int, bool, str, bytes, complex) and a == b


class Sources:
    """The bindings a function reads and their state at a trace."""

    __slots__ = ("roots",)

    def __init__(self, fn: Any) -> None:
        # (namespace dict or cell or object, name or None)
        self.roots: list[tuple[Any, Any]] = []
        _collect(fn, self.roots, set(), 2)

    def take(self) -> list[Any]:
        """The state now: a flat list of entries and lengths."""
        out: list[Any] = []
        budget = [LIMIT]
        for where, name in self.roots:
            if name is None:  # a closure cell
                try:
                    x = where.cell_contents
                except ValueError:
                    x = _MISSING
            elif type(where) is dict:
                x = where.get(name, _MISSING)
            else:
                x = getattr(where, name, _MISSING)
            out.append(x)
            _enter(x, out, DEPTH, budget)
        return out

    def hold(self, old: list[Any]) -> bool:
        """Whether every binding is as it was in ``old`` (a :meth:`take`)."""
        now = self.take()
        if len(now) != len(old):
            return False
        if all(map(operator.is_, now, old)):
            return True
        return all(map(_same, now, old))


def _enter(x: Any, out: list[Any], depth: int, budget: list[int]) -> None:
    """The entries of a container (or plain object) ``x``, ``depth`` levels."""
    t = type(x)
    if depth == 0 or budget[0] <= 0 or t in (float, int, str, bool, bytes) or x is None:
        return
    if isinstance(x, _OPAQUE):
        return
    if t is list or t is tuple:
        items: Any = x
    elif t is dict:
        items = [*x.keys(), *x.values()]
    else:
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(x, numpy.ndarray):
            if x.nbytes <= ARRAY_KEY_BYTES and not x.dtype.hasobject:
                out.append(x.tobytes())
            return
        d = getattr(x, "__dict__", None)
        if type(d) is not dict or type(x).__module__ in _NOT_DATA or "__wrapped__" in d:
            return  # (a wrapped function, a compiled one: code, not data)
        items = [*d.keys(), *d.values()]
    n = len(items)
    out.append(n)
    budget[0] -= n
    out.extend(items)
    if depth > 1 and n <= WIDE:
        for y in items:
            if type(y) in (list, tuple, dict) or (
                not isinstance(y, _OPAQUE) and hasattr(y, "__dict__")
            ):
                _enter(y, out, depth - 1, budget)


def _collect(fn: Any, roots: list[tuple[Any, Any]], seen: set[int], level: int) -> None:
    """The bindings ``fn`` reads (and, ``level`` deep, the functions it names)."""
    if id(fn) in seen:
        return
    seen.add(id(fn))
    if isinstance(fn, MethodType):
        obj = fn.__self__
        d = getattr(obj, "__dict__", None)
        if type(d) is dict:
            roots.extend((d, name) for name in d)
        fn = fn.__func__
    elif not isinstance(fn, FunctionType):
        d = getattr(fn, "__dict__", None)  # a callable object: its attributes
        if type(d) is dict:
            roots.extend((d, name) for name in d)
        call = call_method(fn)
        if isinstance(call, FunctionType):
            _collect(call, roots, seen, level)
        return
    g = fn.__globals__
    helpers = []
    for name in _names(fn.__code__):
        if name in g:
            roots.append((g, name))
            if isinstance(g[name], FunctionType):
                helpers.append(g[name])
    for cell in fn.__closure__ or ():
        roots.append((cell, None))
        try:
            if isinstance(cell.cell_contents, (FunctionType, MethodType)):
                helpers.append(cell.cell_contents)
        except ValueError:
            pass
    if fn.__defaults__:
        roots.append((fn, "__defaults__"))
    if level > 0:
        for h in helpers:
            _collect(h, roots, seen, level - 1)


def _names(code: Any) -> list[str]:
    names = list(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names.extend(_names(c))
    return list(dict.fromkeys(names))
