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
(and its nested functions' code), the attributes it names of a module it
reads, its closure cells and defaults, and for a bound method the
attributes of its object; the same for the functions these name (and the
methods its object's class defines that it names), :data:`LEVELS` deep.
Each binding by identity, and everything reachable from it through lists,
tuples, dicts and plain objects' attributes (``__slots__`` too), at any
depth, entry by entry
(by identity, numbers by value, bit for bit); NumPy arrays up to
:data:`~chainrule.compiler.keys.ARRAY_KEY_BYTES` by their bytes. A
function that reads more than :data:`LIMIT` entries that way (a data set
in a global) cannot be checked before every replay: it runs eagerly, with
one warning (pass such data as arguments). Larger arrays are checked by
identity: see the compile page's sharp bits.
"""

from __future__ import annotations

import operator
import sys
from itertools import chain
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

from ..value.engine import Value
from .escapes import call_method
from .keys import ARRAY_KEY_BYTES, Identity

#: Entries compared per snapshot at most: a function that reads more runs eagerly.
LIMIT = 100_000
#: How many functions deep the functions a function names are followed.
LEVELS = 8

#: Modules whose objects are not numbers a graph reads (an Event set while tracing).
_NOT_DATA = frozenset(("threading", "_thread", "queue", "logging", "multiprocessing"))

_MISSING = object()
_OPAQUE = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType, Value)
#: Rows: lists and tuples.
_ROWS = frozenset((list, tuple))
#: Types whose objects are compared, never entered (exactly these types).
_LEAVES = frozenset((*_OPAQUE, float, int, str, bool, bytes, complex, type(None)))


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

    __slots__ = ("roots", "complete")

    def __init__(self, fn: Any) -> None:
        # (namespace dict or cell or object, name or None)
        self.roots: list[tuple[Any, Any]] = []
        self.complete = True  # the last take() saw everything (at most LIMIT entries)
        _collect(fn, self.roots, set(), LEVELS)

    def take(self, known: Snapshot | None = None) -> Snapshot:
        """The state now: a flat list of entries and lengths (``complete``
        False when there were more than :data:`LIMIT`). With ``known`` (an
        earlier take), a row level's types are taken to be the ones it had
        there: the result is then the state only if it is ``known`` entry
        for entry (:meth:`hold`)."""
        out = Snapshot()
        budget = [LIMIT]
        # the containers entered, by id for this walk only: each is held by `out`
        # (its parent's entries, or a root), so no id is reused while the walk runs
        entered: set[int] = set()
        assumed = None if known is None else known.kinds
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
            _enter(x, out, entered, budget, assumed)
        self.complete = budget[0] >= 0
        return out

    def hold(self, old: Snapshot) -> bool:
        """Whether every binding is as it was in ``old`` (a :meth:`take`).
        Before every replay: first a walk that takes each row level's types
        from ``old`` (the type scan of a model's rows of parameters is most
        of a walk), which is the state when it is ``old``'s objects one for
        one (the same objects are of the same types); else the full walk,
        whose numbers may equal ``old``'s without being the same objects."""
        now = self.take(old)
        if len(now) == len(old) and all(map(operator.is_, now, old)):
            return True
        now = self.take()
        return len(now) == len(old) and all(map(_same, now, old))


class Snapshot(list[Any]):
    """A :meth:`Sources.take`: its entries, and the types of each row
    level's entries, by the level's place in it (``kinds``)."""

    __slots__ = ("kinds",)

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[int, frozenset[type]] = {}


def _enter(
    x: Any,
    out: Snapshot,
    entered: set[int],
    budget: list[int],
    assumed: dict[int, frozenset[type]] | None,
) -> None:
    """Everything reachable from ``x`` through containers and plain
    objects, each entered once, level by level (no recursion limit).
    Run before every replay, so the lists and tuples of a level are
    entered together, in C-level passes (their lengths, then all their
    entries); dicts and objects one by one, what an object of a type is
    (a leaf, an array, a plain object and its ``__slots__``) found once per
    type (:func:`_kind`). The types of a row level's entries are kept in
    ``out.kinds`` by the level's place; with ``assumed`` (an earlier walk's
    kinds) they are taken from there (see :meth:`Sources.hold`)."""
    level = [x]
    leaves = _LEAVES
    kinds = _KINDS
    left = budget[0]
    while level and left >= 0:
        below: list[Any] = []  # the next level
        if _ROWS.issuperset(map(type, level)):  # (a list of rows: one pass)
            rows, level = level, []
        else:
            rows = []
        for x in level:
            t = type(x)
            if t is list or t is tuple:
                rows.append(x)
                continue
            if t is dict:
                items = [*x.keys(), *x.values()]
            else:
                kind = kinds.get(t)
                if kind is None:
                    kind = _kind(t)
                if kind is _SKIP:
                    continue
                if kind is _ARRAY:
                    if x.nbytes <= ARRAY_KEY_BYTES and not x.dtype.hasobject:
                        out.append(x.tobytes())
                    continue
                d = getattr(x, "__dict__", None)
                if type(d) is dict:
                    if "__wrapped__" in d:
                        continue  # (a wrapped function, a compiled one: code, not data)
                    items = [*d.keys(), *d.values()]
                elif not kind:
                    continue
                else:
                    items = []
                for name in kind:  # its __slots__
                    items.extend((name, getattr(x, name, _MISSING)))
            i = id(x)
            if i in entered:
                continue
            entered.add(i)
            out.append(len(items))
            left -= len(items)
            out.extend(items)
            below.extend([y for y in items if type(y) not in leaves])
        if rows:
            flat = list(chain.from_iterable(rows))
            at = len(out)
            kinds_below = None if assumed is None else assumed.get(at)
            if kinds_below is None:
                kinds_below = frozenset(map(type, flat))
            out.kinds[at] = kinds_below
            if not leaves.issuperset(kinds_below):
                # rows that hold containers: each entered once (a cycle ends)
                ids = set(map(id, rows))
                if len(ids) < len(rows) or not ids.isdisjoint(entered):
                    kept = []
                    for row in rows:
                        if id(row) not in entered:
                            entered.add(id(row))
                            kept.append(row)
                    rows = kept
                    flat = list(chain.from_iterable(rows))
                else:
                    entered |= ids
                if _ROWS.issuperset(kinds_below):
                    below.extend(flat)
                else:
                    below.extend([y for y in flat if type(y) not in leaves])
            # (rows of numbers or Values only, a data set or a weight matrix:
            # compared whole however often they are reached)
            out.extend(map(len, rows))
            left -= len(flat)
            out.extend(flat)
        level = below
    budget[0] = left


_SKIP = "skip"
_ARRAY = "array"
#: Per type, what :func:`_enter` does with its objects (by the type itself:
#: classes live as long as their objects).
_KINDS: dict[type, Any] = {}


def _kind(t: type) -> Any:
    """What an object of type ``t`` is to the walk: ``_SKIP`` (a number,
    code, a module, a Value, a thread's lock: compared, never entered),
    ``_ARRAY`` (a NumPy array: its bytes, when small), or a plain object:
    its ``__slots__`` names (and its ``__dict__``, if it has one)."""
    numpy = sys.modules.get("numpy")
    if t in _ATOMS or t is type(None) or issubclass(t, _OPAQUE) or t.__module__ in _NOT_DATA:
        kind: Any = _SKIP
    elif numpy is not None and issubclass(t, numpy.ndarray):
        kind = _ARRAY
    else:
        kind = _slots(t)
    _KINDS[t] = kind  # (a type made before NumPy's import is not an array's)
    return kind


_ATOMS = (float, int, str, bool, bytes, complex)


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slots(t: type) -> tuple[str, ...]:
    """The names in the ``__slots__`` of ``t`` and its bases (by the type
    itself: classes live as long as their objects)."""
    names = _SLOTS.get(t)
    if names is None:
        names = tuple(
            name
            for klass in t.__mro__
            for name in (
                (klass.__dict__.get("__slots__", ()),)
                if isinstance(klass.__dict__.get("__slots__", ()), str)
                else klass.__dict__.get("__slots__", ())
            )
            if name not in ("__dict__", "__weakref__")
        )
        _SLOTS[t] = names
    return names


def _collect(fn: Any, roots: list[tuple[Any, Any]], seen: set[Identity], level: int) -> None:
    """The bindings ``fn`` reads (and, ``level`` deep, the functions it
    names). ``seen``: the functions visited, each kept alive (a bound
    method made here is not mistaken for a later one at its address)."""
    me = Identity(fn)
    if me in seen:
        return
    seen.add(me)
    helpers: list[Any] = []
    if isinstance(fn, MethodType):
        obj = fn.__self__
        d = getattr(obj, "__dict__", None)
        if type(d) is dict:
            roots.extend((d, name) for name in d)
        fn = fn.__func__
        if isinstance(fn, FunctionType):  # the methods of its class that it names
            for name in _names(fn.__code__):
                method = getattr(type(obj), name, None)
                if isinstance(method, FunctionType):
                    helpers.append(MethodType(method, obj))
    elif not isinstance(fn, FunctionType):
        d = getattr(fn, "__dict__", None)  # a callable object: its attributes
        if type(d) is dict:
            roots.extend((d, name) for name in d)
        call = call_method(fn)
        if isinstance(call, FunctionType):
            _collect(call, roots, seen, level)
        return
    g = fn.__globals__
    names = _names(fn.__code__)
    for name in names:
        if name in g:
            roots.append((g, name))
            if isinstance(g[name], FunctionType):
                helpers.append(g[name])
            elif isinstance(g[name], ModuleType):  # module.NAME: the names it reads there
                space = vars(g[name])
                roots.extend((space, a) for a in names if a in space and a != name)
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
