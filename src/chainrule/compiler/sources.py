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
reads, its closure cells, defaults and keyword-only defaults, and for a
bound method (a callable object: its ``__call__`` bound to it) the
attributes of its object and those its code names on its class, through
the MRO (in each class up to the one that defines it, and on the object,
where a later one would shadow it); the same for the functions these name:
functions and callable objects in globals, cells and modules, the
methods, static and class methods and properties' getters of those
classes, the attributes it names of a class of the user's it reads
(``Config.lr``), and of such a class, which it may call (``Layer()``,
``Layer()(x)``), every entry and every method (:func:`_made_class`), a
``functools.partial``'s function, arguments and keywords, a wrapper's
function (a compiled function's, a ``functools.lru_cache``'s; a decorator
of the user's written as a class: its function and its ``__call__`` bound
to it), the code stored on an object of the user's that it names
(``m.fast = chainrule.compile(self.loss)``, ``m.act = lambda h: ...``);
:data:`LEVELS` deep. The attributes it names of a function's own
``__dict__`` where the walk does not enter it (a wrapper's, a library's
function's: :func:`_own_attributes`).
Each binding by identity, and everything reachable from it through lists,
tuples and dicts (their subclasses too, read with the base type's own
methods, and their attributes), sets, frozensets, deques, partials, weak
references and plain objects' attributes (``__slots__`` too; a
``threading.local``'s, the calling thread's: the guard reads them in the
thread that calls) with every entry of their classes of the user's
(:func:`user_spaces`), at any depth, entry by entry (by identity,
numbers by value, bit for bit); NumPy arrays, ``array.array``,
``bytearray`` up to :data:`ARRAY_BYTES` by
their bytes, NumPy object arrays entry by entry. A function that reads more than
:data:`LIMIT` entries that way (a data set in a global), or an object of a
C type that may hold entries the walk cannot read (an iterator, a
generator, a C extension's container), cannot be checked before every
replay: it runs eagerly, with one warning naming why (pass such data as
arguments); so does one that reads a larger array, except in the
:class:`Sources` the objects among a call's arguments are guarded by
(``array_bytes`` None: any size by their bytes). A function of the user's
reached as data is compared by identity and its closure cells' contents
and defaults walked (a library's by identity only). A module, wherever it
is reached (a global, a closure cell, ``self.cfg``, an argument, a
container, a submodule), by the attributes the code names (:data:`_MODULE`).
"""

from __future__ import annotations

import array
import collections
import contextlib
import dis
import functools
import operator
import re
import sys
import threading
import types
import weakref
from itertools import chain, compress, repeat
from types import BuiltinFunctionType, FunctionType, MappingProxyType, MethodType, ModuleType
from typing import Any

from ..value.engine import Value
from ..value.primitives import Primitive
from .escapes import call_method
from .keys import Identity, declared_slots, own_slots

#: Entries compared per snapshot at most: a function that reads more runs eagerly.
LIMIT = 100_000
#: Bytes of an array (NumPy's, ``array.array``, ``bytearray``) read besides
#: the arguments compared before a replay at most: one larger runs the
#: function eagerly (its copy and comparison would cost more than they save).
ARRAY_BYTES = 1 << 20
#: How many functions deep the functions a function names are followed.
LEVELS = 8

#: Modules whose objects are not numbers a graph reads (an Event set while tracing).
_NOT_DATA = frozenset(("threading", "_thread", "queue", "logging", "multiprocessing"))

_MISSING = object()
_OPAQUE = (type, FunctionType, BuiltinFunctionType, MethodType, Value)
#: Rows: lists and tuples.
_ROWS = frozenset((list, tuple))
#: Types whose objects are compared, never entered (exactly these types).
#: (Not functions: a function of the user's has its closure cells and defaults walked;
#: not modules: a module's attributes that the code names are, :data:`_MODULE`.)
#: (And what a class holds besides data and functions: its descriptors, its
#: static and class methods, properties and slots, which cannot change.)
_LEAVES = frozenset((*_OPAQUE, float, int, str, bool, bytes, complex, type(None), object))
# (a C method: its object is walked; a class: its namespaces, where it is the user's, _CLASS)
_LEAVES -= {FunctionType, BuiltinFunctionType, type}
_LEAVES |= {property, staticmethod, classmethod, types.GetSetDescriptorType}
_LEAVES |= {types.MemberDescriptorType, types.WrapperDescriptorType, types.CodeType}
#: In a class's namespace (:func:`_walk_classes`), its methods too: by identity.
_SPACE_LEAVES = _LEAVES | {FunctionType, BuiltinFunctionType}


#: The names of Value's namespace a trace sets while it runs (and puts back
#: after, :func:`chainrule.compiler.trace.watching`): another thread's trace
#: shows them, so the guard of Value's namespace leaves them out.
SWAPPED = frozenset(
    ("__truediv__", "__rtruediv__", "label", "data", "grad", "__init__", "backward")
    + ("__lt__", "__le__", "__gt__", "__ge__", "__format__", "item", "detach", "__repr__")
    + ("_local_grads", "__reduce_ex__")
)


#: A function a trace puts in Value's namespace while it runs -> the one it
#: stands for (:mod:`chainrule.compiler.slotreads`): the guard of Value's
#: namespace sees the engine's, whichever thread looks.
STANDS_FOR: dict[Any, Any] = {}


class _Taken:
    """The name of a root whose entries a walk takes anew each time and
    compares as they are (by identity, numbers by value), not entered:
    state that is no attribute of an object the function reaches."""

    __slots__ = ()
    #: What it is, for a message.
    what = ""

    def entries(self) -> list[Any]:
        raise NotImplementedError


class _ValueSpace(_Taken):
    """Value's namespace as code may change it: a method added to or
    patched on the class (``Value.relu = leaky`` in a notebook cell) is
    another graph. Its entries but those a trace swaps while it runs
    (:data:`SWAPPED`), which another thread's trace would show."""

    __slots__ = ()
    what = "a method of Value (added or patched)"

    def entries(self) -> list[Any]:
        space = vars(Value).copy()  # (at once: another thread's trace may swap entries)
        for name in SWAPPED:
            space.pop(name, None)
        found = STANDS_FOR.get
        values = (found(v, v) if type(v) is FunctionType else v for v in space.values())
        return [*space.keys(), *values]


#: The root that holds Value's namespace (:class:`_ValueSpace`).
_VALUE_SPACE = ((Value, _ValueSpace()),)


class _NumpySettings(_Taken):
    """NumPy's settings a function that reaches NumPy reads without naming
    them: how floating-point errors are handled (``np.seterr(divide=
    "raise")`` makes ``x / 0`` raise) and the print options (``np.array2string``):
    the name of a root whose entries are theirs now."""

    __slots__ = ()
    what = "NumPy's settings (np.seterr, np.set_printoptions)"

    def entries(self) -> list[Any]:
        numpy: Any = sys.modules["numpy"]
        options = numpy.get_printoptions()
        return [*numpy.geterr().values(), *[_scalar(options[k]) for k in sorted(options)]]


def _scalar(x: Any) -> Any:
    """``x`` where it is a number, a string or None, else its repr (a
    formatter's dict, made anew at every read)."""
    return x if x is None or type(x) in _ATOMS else repr(x)


def _reaches_numpy(roots: list[tuple[Any, Any]]) -> bool:
    """Whether NumPy's module is among the values the roots hold now."""
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return False
    for where, name in roots:
        if type(name) is str and type(where) is dict and where.get(name) is numpy:
            return True
    return False


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
    if t is complex:  # (its parts as floats: 0j and complex(-0.0, 0.0) are equal)
        return _same(a.real, b.real) and _same(a.imag, b.imag)
    return t in (int, bool, str, bytes) and a == b


class Sources:
    """The bindings a function reads and their state at a trace."""

    __slots__ = ("roots", "complete", "why", "array_bytes", "names", "shallow")

    def __init__(self, fn: Any, own: Any = None) -> None:
        # (namespace dict, class namespace, cell or object; name or None)
        roots: list[tuple[Any, Any]] = []
        # roots compared by identity only, not walked: ``own`` (a compiled
        # step's optimizer, whose state the step itself updates) where the
        # code does not name the attribute that holds it (self.opt)
        self.shallow: frozenset[tuple[int, str]] = frozenset()
        self.complete = True  # the last take() saw everything it could check
        self.why = ""  # when not: why (too many entries, a container it cannot walk)
        # arrays up to this size compared by their bytes, larger ones make the
        # function run eagerly (None: any size; the objects among a call's arguments)
        self.array_bytes: int | None = ARRAY_BYTES
        seen: set[Identity] = set()
        roots.extend(_VALUE_SPACE)  # (a method of Value patched or added: v.swish())
        _collect(fn, roots, seen, LEVELS)
        self._settle(roots, seen)
        # functions reached as data (TABLE["act"](x), a list of activations):
        # followed too, as the helpers they may be, while new ones turn up
        # (not a Primitive's forward and derivative: a replay runs them again)
        for _ in range(LEVELS):
            taken = [x for x in self.take() if type(x) not in _DATA]  # (C speed: the code)
            rules = {
                Identity(getattr(x, part))
                for x in taken
                if isinstance(x, Primitive)
                for part in ("forward", "derivative")
            }
            found = [
                x
                for x in dict.fromkeys(map(Identity, taken))
                if x not in seen and x not in rules and _code_of_users(x.obj)
            ]
            if not found:
                break
            for x in found:
                code = x.obj
                if type(code) is staticmethod:  # (its function: found once)
                    seen.add(x)
                    code = code.__func__
                _collect(code, roots, seen, LEVELS - 1)
            self._settle(roots, seen)

        if _reaches_numpy(self.roots):
            self.roots.append((None, _NumpySettings()))
        if own is not None:
            self.shallow = frozenset(
                (id(where), name)
                for where, name in self.roots
                if type(name) is str
                and name not in self.names
                and type(where) is dict
                and where.get(name) is own
            )

    @classmethod
    def of(cls, objects: list[Any], names: tuple[str, ...] = ()) -> Sources:
        """The state of ``objects`` themselves (not a function's bindings):
        ``take``/``hold`` walk everything reachable from them, arrays at any
        size by their bytes; of a module among them, the attributes in
        ``names``."""
        sources = cls.__new__(cls)
        sources.shallow = frozenset()
        sources.roots = [(held, k) for held in [dict(enumerate(objects))] for k in held]
        sources.complete = True
        sources.why = ""
        sources.array_bytes = None
        sources.names = names
        return sources

    def _settle(self, roots: list[tuple[Any, Any]], seen: set[Identity]) -> None:
        """The names and roots from what was collected: where the code finds
        modules by a name it computes (:class:`AllModules`), the code of
        every module of the user's that it may call (``m.helper(x)``, a
        module's ``__getattr__``) is followed too, and every attribute that
        any of the code names is guarded on every module."""
        # the attribute names the code reads: those of every module reached (_MODULE)
        self.names = _read_names(seen)
        every = [name for _, name in roots if type(name) is AllModules]
        if every:
            helpers: list[Any] = []
            for module in list(sys.modules.values()):
                if isinstance(module, ModuleType) and _users_module(module):
                    _module(module, list(self.names), roots, helpers)
            for h in helpers:
                _collect(h, roots, seen, LEVELS - 1)
            self.names = _read_names(seen)
            for name in every:
                name.names = frozenset(self.names)
        # each once, by id (a bound method's helper methods name its object's
        # attributes again; the roots keep their namespaces alive)
        self.roots = list({(id(where), name): (where, name) for where, name in roots}.values())

    def changed(self, old: Snapshot) -> str:
        """What changed since ``old`` (a :meth:`take`), for a message: the
        first binding whose state differs ("the attribute step_count"),
        found by taking the bindings' states a prefix at a time."""

        def differs(prefix: Snapshot) -> bool:  # (from old's start: its entries, lengths)
            n, m = len(prefix), len(prefix.lengths)
            return (
                n > len(old)
                or m > len(old.lengths)
                or prefix.lengths != old.lengths[:m]
                or not all(map(_same, prefix, old[:n]))
            )

        lo, hi = 0, len(self.roots)
        while lo < hi:  # the first binding whose state, with those before it, is not old's
            mid = (lo + hi) // 2
            if differs(self.take(roots=self.roots[: mid + 1], classes=False)):
                hi = mid
            else:
                lo = mid + 1
        if lo == len(self.roots):
            return "an attribute of a class it reads, or the class of a Value it reads"
        where, name = self.roots[lo]
        if name is None:
            return "a variable of a closure"
        if isinstance(name, _Taken):
            return name.what
        if type(name) is AllModules:
            return "a module in sys.modules"
        if type(where) is dict and "__builtins__" in where:
            return f"the global {name}"
        if type(where) is MappingProxyType:
            return f"the class attribute {name}"

        return f"the attribute {name}"

    def take(
        self,
        known: Snapshot | None = None,
        roots: list[tuple[Any, Any]] | None = None,
        classes: bool = True,
    ) -> Snapshot:
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
        shallow = self.shallow
        for where, name in self.roots if roots is None else roots:
            if name is None:  # a closure cell
                try:
                    x = where.cell_contents
                except ValueError:
                    x = _MISSING
            elif isinstance(name, _Taken):
                entries = name.entries()
                out.lengths.append(len(entries))
                out.extend(entries)
                continue
            elif type(name) is AllModules:
                out.lengths.append(len(where))
                out.extend(where.keys())
                out.extend(where.values())
                # and what the code may read of any of them: the attributes it
                # names (a module itself by identity, other objects walked)
                below = []
                wanted = name.names
                for module in list(where.values()):
                    d = getattr(module, "__dict__", None)
                    if type(d) is dict and not d.keys().isdisjoint(wanted):  # (C speed)
                        # (a library's objects by identity: a user's walked)
                        walk = name.users(module)
                        for attribute in sorted(d.keys() & wanted):
                            x = d[attribute]  # (whose attribute, which one, what)
                            out += (module, attribute, x)
                            if walk and type(x) not in _LEAVES and not isinstance(x, ModuleType):
                                below.append(x)
                if below:
                    _enter(below, out, entered, budget, assumed, self.array_bytes, self.names)
                continue
            elif type(where) is dict or type(where) is MappingProxyType:
                x = where.get(name, _MISSING)
            else:
                x = getattr(where, name, _MISSING)
            out.append(x)
            if type(x) is BuiltinFunctionType and type(x.__self__) is ModuleType:
                continue  # (a module's function, len or math.exp: by identity, _bound_object)
            if type(x) not in _LEAVES and not (shallow and (id(where), name) in shallow):
                # (one walk per root: a data set's rows of numbers stay apart
                # from a model's objects, compared whole without a copy)
                _enter([x], out, entered, budget, assumed, self.array_bytes, self.names)
        if classes:
            _walk_classes(out, entered, budget, known, self.array_bytes, self.names)
        family = _value_family() if roots is None else None
        if family:  # (a Value's class: v.__class__ = Param between calls; in C)
            types = list(filter(family.__contains__, map(type, out)))
            out.lengths.append(len(types))
            out.extend(types)
        if out.opaque is not None:
            self.complete = False
            self.why = (
                f"it reads a {out.opaque} (besides its arguments), whose contents compile "
                "cannot check before a replay; pass it as an argument"
                if type(out.opaque) is str
                else f"it reads a {out.opaque[0]} of {out.opaque[1]:,} bytes besides its "
                f"arguments (a global, a closure, self), over the {ARRAY_BYTES:,} compile "
                "compares before every replay; pass it as an argument"
            )
        elif budget[0] < 0:
            self.complete = False
            self.why = (
                f"it reads more than {LIMIT:,} numbers and objects besides its arguments "
                "(globals, closures, self: a data set?), too many to check before every "
                "replay; pass them as arguments"
            )
        else:
            self.complete = True
        return out

    def name_of(self, x: Any, fn: Any) -> str | None:
        """The name of a global, an attribute or a closure cell of ``fn``
        that is ``x`` itself (for a message), or None (an entry's)."""
        for where, name in self.roots:
            if type(name) is str:
                if type(where) is dict or type(where) is MappingProxyType:
                    bound = where.get(name, _MISSING)
                else:
                    bound = getattr(where, name, _MISSING)
                if bound is x:
                    return name
        fn = getattr(fn, "__func__", fn)
        if type(fn) is FunctionType:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                if getattr(cell, "cell_contents", None) is x:
                    return name
        return None

    def hold(self, old: Snapshot) -> bool:
        """Whether every binding is as it was in ``old`` (a :meth:`take`).
        Before every replay: first a walk that takes each row level's types
        from ``old`` (the type scan of a model's rows of parameters is most
        of a walk), which is the state when it is ``old``'s objects one for
        one (the same objects are of the same types); else the full walk,
        whose numbers may equal ``old``'s without being the same objects."""
        now = self.take(old)
        if now.opaque is not None:
            return False
        same_shape = now.lengths == old.lengths and len(now) == len(old)
        if same_shape and all(map(operator.is_, now, old)):
            return True
        now = self.take()
        return (
            now.opaque is None
            and now.lengths == old.lengths
            and len(now) == len(old)
            and all(map(_same, now, old))
        )


class Snapshot(list[Any]):
    """A :meth:`Sources.take`: its entries, and the types of each row
    level's entries, by the level's place in it (``kinds``)."""

    __slots__ = ("kinds", "opaque", "classes", "methods", "lengths")

    def __init__(self) -> None:
        super().__init__()
        # the lengths of the containers entered, in the order met: apart from
        # the entries, compared by value (a length over 256 is a new int object
        # at each walk, which an identity comparison would take for a change)
        self.lengths: list[int] = []
        self.kinds: dict[int, frozenset[type]] = {}
        # a container met that cannot be walked: its type (an array too large
        # to compare: its type and bytes)
        self.opaque: str | tuple[str, int] | None = None
        # the types of the objects entered, in the order met (:func:`_walk_classes`)
        self.classes: dict[type, None] = {}
        # by the place of a pass of _walk_classes: the methods and data it found
        self.methods: dict[int, tuple[list[Any], list[Any]]] = {}


def _enter(
    level: list[Any],
    out: Snapshot,
    entered: set[int],
    budget: list[int],
    assumed: dict[int, frozenset[type]] | None,
    array_bytes: int | None = ARRAY_BYTES,
    names: tuple[str, ...] = (),
) -> None:
    """Everything reachable from ``level``'s objects through containers and plain
    objects, each entered once, level by level (no recursion limit);
    a module: its attributes among ``names`` (:data:`_MODULE`).
    Run before every replay, so the lists and tuples of a level are
    entered together, in C-level passes (their lengths, then all their
    entries); dicts and objects one by one, what an object of a type is
    (a leaf, an array, a plain object and its ``__slots__``) found once per
    type (:func:`_kind`). The types of a row level's entries are kept in
    ``out.kinds`` by the level's place; with ``assumed`` (an earlier walk's
    kinds) they are taken from there (see :meth:`Sources.hold`).
    An array over ``array_bytes`` (None: no limit) is ``out.opaque``."""
    leaves = _LEAVES
    kinds = _KINDS
    classes = out.classes
    modules = sys.modules
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
                if x is modules:  # which modules are loaded: by their number (an import
                    # changes it), not walked (thousands of modules' namespaces)
                    if id(x) not in entered:
                        entered.add(id(x))
                        out.lengths.append(len(x))
                    continue
                items = [*x.keys(), *x.values()]
            else:
                kind = kinds.get(t)
                if kind is None:
                    kind = _kind(t)
                if kind is _SKIP:
                    continue
                if kind is _TYPED:
                    classes[t] = None
                    continue
                if kind is _CLASS:
                    classes[x] = None
                    classes[t] = None
                    continue
                if kind is _MODULE:
                    if id(x) in entered:
                        continue
                    items = [*map(x.__dict__.get, names, repeat(_MISSING))]
                elif type(kind) is _Container:
                    if id(x) in entered:
                        continue
                    items = kind.contents(x, array_bytes)
                    if items is None:  # (a library's function: by identity)
                        continue
                    if items is _OPAQUE_ITEMS:
                        out.opaque = kind.name
                        continue
                    if type(items) is int:  # (an array's bytes, over array_bytes)
                        out.opaque = (kind.name, items)
                        continue
                    # (its length is kept even when 0: whose entries follow is never in doubt)
                    _attributes(x, kind.slots, items)
                else:
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
            out.lengths.append(len(items))
            left -= len(items)
            out.extend(items)
            below.extend([y for y in items if type(y) not in leaves])
            if t not in classes:  # (its classes: walked after, :func:`_walk_classes`)
                classes[t] = None
        if rows:
            at = len(out)
            kinds_below = None if assumed is None else assumed.get(at)
            if kinds_below is not None and leaves.issuperset(kinds_below):
                # (before a replay, rows of numbers or Values as before: no copy)
                out.kinds[at] = kinds_below
                out.lengths.extend(map(len, rows))
                at = len(out)
                out.extend(chain.from_iterable(rows))
                left -= len(out) - at
                level = below
                continue
            flat = list(chain.from_iterable(rows))
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
                else:  # (those of the kinds that are not leaves, in one C pass)
                    entering = (kinds_below - leaves).__contains__
                    below.extend(compress(flat, map(entering, map(type, flat))))
            # (rows of numbers or Values only, a data set or a weight matrix:
            # compared whole however often they are reached)
            out.lengths.extend(map(len, rows))
            left -= len(flat)
            out.extend(flat)
        level = below
    budget[0] = left


_SKIP = "skip"
#: A Value of the user's subclass with no attributes of its own: its
#: class's namespace is walked (``Param.__mul__`` replaced between calls:
#: ``d * x`` runs the new one), the object itself never entered.
_TYPED = "typed"
#: A class, wherever it is reached (an entry of a dict or a list, an
#: attribute, a default, a partial's argument: ``REGISTRY["cfg"].scale``):
#: its namespaces and its metaclass's, where they are the user's, are walked
#: with the classes of the objects entered (:func:`_walk_classes`).
_CLASS = "class"
#: A module, wherever it is reached (a global, a closure cell, an argument,
#: ``self.cfg``, a container, a submodule): its attributes that the code
#: names (:attr:`Sources.names`; absent ones too, so one set later counts),
#: library modules' as the user's.
_MODULE = "module"
#: Per type, what :func:`_enter` does with its objects (by the type itself:
#: classes live as long as their objects).
_KINDS: dict[type, Any] = {}
_OPAQUE_ITEMS: list[Any] = []  # (contents(): a container that cannot be walked)


class _Container:
    """A type whose objects hold entries that are not attributes: a subclass
    of list, tuple or dict, a set, a deque, an array. ``contents(x)``: the
    entries (read through the base type's own C methods, not an override),
    ``None`` for a library's function (by identity), the number of bytes of
    an array too large to compare, or ``_OPAQUE_ITEMS``; its objects'
    ``__slots__`` (and ``__dict__``) after."""

    __slots__ = ("name", "contents", "slots")

    def __init__(self, t: type, contents: Any) -> None:
        self.name = f"{t.__module__}.{t.__qualname__}"
        self.contents = contents
        self.slots = _slots(t)


def _attributes(x: Any, slots: tuple[str, ...], items: list[Any]) -> None:
    """Add the ``__dict__`` (its length first: where the entries end is never
    in doubt) and ``__slots__`` of a container ``x`` to its ``items``."""
    d = getattr(x, "__dict__", None)
    if type(d) is dict:
        items.append(len(d))
        items.extend(d.keys())
        items.extend(d.values())
    for name in slots:
        items.extend((name, getattr(x, name, _MISSING)))


def _rows(base: Any) -> Any:
    return lambda x, _: [*base.__iter__(x)]


def _mapping(x: Any, _: Any) -> list[Any]:
    items = [*dict.keys(x), *dict.values(x)]
    if isinstance(x, collections.defaultdict):
        items.append(x.default_factory)
    return items


def _numpy_array(x: Any, limit: int | None) -> Any:
    if not x.dtype.hasobject:
        if limit is not None and x.nbytes > limit:
            return int(x.nbytes)
        # (and what code may read of it besides its numbers: the keys' _numpy_key)
        return [x.dtype.str, *x.shape, *x.strides, x.flags.num, x.tobytes()]
    if x.dtype.kind != "O":  # (records with objects in them)
        return _OPAQUE_ITEMS
    return [x.ndim, *x.shape, *x.flat]


def _buffer(x: Any, limit: int | None) -> Any:
    try:
        data = memoryview(x)
    except ValueError:  # (a released memoryview: no data)
        return []
    if limit is not None and data.nbytes > limit:
        return data.nbytes
    return [data.format, *(data.shape or ()), data.tobytes()]


def _function_items(fn: FunctionType, _: Any) -> Any:
    """A function reached as data (``self.act = lambda h: h * box[0]``): its
    defaults and closure cells' contents (its ``__dict__`` after); ``None``
    (by identity) for a library's."""
    if not _users_function(fn):
        return None
    items: list[Any] = [fn.__code__, fn.__defaults__, fn.__kwdefaults__]
    items.extend(map(_cell_contents, fn.__closure__ or ()))
    if fn not in _RULES:  # (a rule's: read again by a replay, which runs it)
        items.extend(_globals_read(fn))
    return items


#: The forward and derivative functions of the Primitives a walk met.
_RULES: weakref.WeakSet[FunctionType] = weakref.WeakSet()


def _primitive_items(p: Primitive, _: Any) -> list[Any]:
    """A Primitive reached as data: its attributes, its rule functions
    known as rules (a replay runs them: the globals they read are read
    afresh at every call)."""
    for f in (p.forward, p.derivative):
        if type(f) is FunctionType:
            _RULES.add(f)
    return [p.name, p.forward, p.derivative, p.masked, p.const]


def _globals_read(fn: FunctionType) -> list[Any]:
    """The globals the code of ``fn`` (a function of the user's reached as
    data, a method of a class of the user's an object the walk entered
    has) names, as they are now (an absent one as absent: one defined
    later counts); of a module among them, the attributes its code names;
    of a class of the user's, its namespaces and its metaclass's
    (``Config.scale``): a method of an argument, ``model(x)`` whose
    ``__call__`` reads ``TEMPERATURE``, is followed by the trace and
    replayed, so what it reads is guarded as the function's own globals."""
    code = fn.__code__
    items = [*map(fn.__globals__.get, _global_names(code), repeat(_MISSING))]
    if _NEITHER.issuperset(map(type, items)):  # (no module, no class: at C speed)
        return items
    for x in items[:]:
        if isinstance(x, ModuleType):
            items.extend(map(x.__dict__.get, _names(code), repeat(_MISSING)))
        elif isinstance(x, type):
            items.extend(user_spaces(x))
            items.extend(user_spaces(type(x)))
    return items


#: Types of values that are neither a module nor a class (:func:`_globals_read`).
_NEITHER = frozenset(
    (float, int, str, bool, type(None), object, FunctionType, BuiltinFunctionType, MethodType)
    + (list, tuple, dict, set, Value)
)


#: Per module name, whether it is the user's (:func:`_users_module`).
_USERS: dict[Any, bool] = {}


def _users_function(fn: FunctionType) -> bool:
    """Whether ``fn`` is the user's (its module is: :func:`_users_module`)."""
    module = fn.__module__
    users = _USERS.get(module)
    if users is None:
        users = _USERS[module] = _users_module(sys.modules.get(module), module or "")
    return users


#: Containers by base type, what their entries are (the first base that matches).
_CONTAINERS: list[tuple[type, Any]] = [
    (list, _rows(list)),
    (tuple, _rows(tuple)),
    (dict, _mapping),
    (set, _rows(set)),
    (frozenset, _rows(frozenset)),
    (collections.deque, lambda x, _: [x.maxlen, *collections.deque.__iter__(x)]),
    (array.array, _buffer),
    (bytearray, _buffer),
    (memoryview, _buffer),
    (MappingProxyType, lambda x, _: [*x.keys(), *x.values()]),
    (type({}.keys()), lambda x, _: list(x)),  # (its entries: .mapping is new each time)
    (type({}.values()), lambda x, _: list(x)),  # (its entries: .mapping is new each time)
    (type({}.items()), lambda x, _: list(x)),  # (its entries: .mapping is new each time)
    (weakref.ref, lambda x, _: [x()]),
    (functools.partial, lambda x, _: [x.func, x.args, x.keywords]),
    (types.CellType, lambda x, _: [_cell_contents(x)]),
]
#: Types of no data, or of data that cannot change, whatever methods they have.
_INERT = (range, slice, types.GenericAlias, types.UnionType, re.Match)


#: The containers whose C methods reached as data (``setting = CFG.get``,
#: ``VALS.__getitem__``) have them walked.
_HELD_BY_METHODS = (dict, list, set, collections.deque, array.array, bytearray)


def _bound_object(f: Any, _: Any) -> list[Any]:
    """A C method reached as data (``setting = CFG.get``): the container it
    is bound to, whose entries it reads (another object's, a counter's
    ``__next__``, and a module's function by identity only)."""
    owner = getattr(f, "__self__", None)
    return [owner] if isinstance(owner, _HELD_BY_METHODS) else []


def _kind(t: type) -> Any:
    """What an object of type ``t`` is to the walk: ``_SKIP`` (a number,
    code, a module, a Value, a thread's lock: compared, never entered), a
    :class:`_Container` (its entries; a NumPy array: its bytes when small,
    its objects when of dtype object; an unknown container written in C:
    its contents cannot be read, the function runs eagerly), or a plain
    object: its ``__slots__`` names (and its ``__dict__``, if it has one)."""
    numpy = sys.modules.get("numpy")
    kind: Any
    if t is FunctionType:
        kind = _Container(t, _function_items)
    elif issubclass(t, Primitive):
        kind = _Container(t, _primitive_items)
    elif any(k.__module__ == "_ctypes" and k.__name__ == "_CData" for k in t.__mro__):
        kind = _Container(t, _buffer)  # (a C number, array or structure: its bytes)
    elif t.__module__ == "decimal" and t.__name__ == "Context":
        kind = _Container(t, lambda x, _: [repr(x)])  # (its precision, rounding, traps)
    elif t is BuiltinFunctionType or t is types.MethodWrapperType:
        kind = _Container(t, _bound_object)
    elif issubclass(t, ModuleType):
        kind = _MODULE
    elif issubclass(t, type):
        kind = _CLASS
    elif issubclass(t, threading.local):
        # (a plain object whose __dict__ is the calling thread's: the guard
        # before a replay reads that thread's attributes, cfg.scale)
        kind = _slots(t)
    elif issubclass(t, Value) and not t.__module__.startswith("chainrule."):
        # (a Value of the user's subclass: its own attributes, p.scale, in
        # its __dict__ or its classes' __slots__; its number and gradient
        # are the trace's inputs, not guards)
        kind = own_slots(t) or (() if _has_dict(t) else _TYPED)
    elif t in _ATOMS or t is type(None) or issubclass(t, _OPAQUE) or t.__module__ in _NOT_DATA:
        kind = _SKIP
    elif numpy is not None and issubclass(t, numpy.ndarray):
        kind = _Container(t, _numpy_array)
    elif numpy is not None and issubclass(t, (numpy.generic, numpy.dtype)):
        kind = _SKIP  # (a NumPy scalar or dtype: immutable)
    else:
        kind = next((_Container(t, how) for base, how in _CONTAINERS if issubclass(t, base)), None)
        if kind is None:
            kind = _slots(t)
            if not kind and _unknown_container(t):
                kind = _Container(t, lambda x, _: _OPAQUE_ITEMS)
            elif not kind and not _has_dict(t):
                kind = _SKIP  # (no attributes: a descriptor in a class, a property)
    _KINDS[t] = kind  # (a type made before NumPy's import is not an array's)
    return kind


#: Value's classes when last asked (Value and every subclass), and the set
#: of them where one is the user's (else empty).
_FAMILY: list[Any] = [None, frozenset()]


def _value_family() -> frozenset[type]:
    """Value and its subclasses, where a class of the user's derives from
    Value (else empty): then a Value's class may be swapped between calls
    (``w.__class__ = Param``, layouts alike), which its identity does not
    tell, and the walk keeps the class of each Value it meets."""
    now, level = [Value], [Value]
    while level:  # (a few classes: compile's own, the user's)
        level = [k for t in level for k in t.__subclasses__()]
        now += level
    if now != _FAMILY[0]:
        users = any(not t.__module__.startswith("chainrule.") for t in now)
        _FAMILY[:] = now, frozenset(now) if users else frozenset()
    return _FAMILY[1]


def _has_dict(t: type) -> bool:
    """Whether objects of ``t`` have a ``__dict__`` (where the type keeps
    one, or a class of its MRO makes one: a ``threading.local``'s is read
    through its type, which is walked as one anyway)."""
    return bool(t.__dictoffset__) or any("__dict__" in vars(k) for k in t.__mro__)


def _unknown_container(t: type) -> bool:
    """Whether objects of ``t`` may hold entries the walk cannot see: no
    ``__dict__``, no ``__slots__``, and C methods to iterate, index or size
    them (an iterator, a generator, a container of a C extension)."""
    if t.__dictoffset__ or issubclass(t, _INERT):
        return False
    for name in ("__iter__", "__getitem__", "__len__", "__next__"):
        method = getattr(t, name, None)
        if method is not None and not isinstance(method, FunctionType):
            return True
    return False


_ATOMS = (float, int, str, bool, bytes, complex)


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slots(t: type) -> tuple[str, ...]:
    """The names in the ``__slots__`` of ``t`` and its bases (by the type
    itself: classes live as long as their objects)."""
    names = _SLOTS.get(t)
    if names is None:
        names = _SLOTS[t] = declared_slots(t.__mro__)
    return names


#: What a snapshot holds that is never code (skipped at C speed).
_DATA = frozenset((float, int, bool, str, bytes, complex, type(None), Value))


def _code_of_users(x: Any) -> bool:
    """Whether ``x``, reached as data, is code of the user's that the
    function may call: a function, a bound method, a ``staticmethod``
    object, or an object of the user's class with a ``__call__`` (a
    decorator written as a class)."""
    if isinstance(x, (FunctionType, MethodType, staticmethod)):
        code: Any = getattr(x, "__func__", x)
        return _users_function(code)
    if isinstance(x, (type, ModuleType)) or not _users(type(x)):
        return False
    return isinstance(call_method(x), FunctionType)


def _collect(fn: Any, roots: list[tuple[Any, Any]], seen: set[Identity], level: int) -> None:
    """The bindings ``fn`` reads (and, ``level`` deep, the functions it
    names). ``seen``: the functions visited, each kept alive (a bound
    method made here is not mistaken for a later one at its address)."""
    me = Identity(fn)
    if me in seen:
        return
    seen.add(me)
    helpers: list[Any] = []
    if isinstance(fn, functools.partial):  # its function, arguments and keywords
        roots.extend((fn, name) for name in ("func", "args", "keywords"))
        helpers.append(fn.func)
    elif isinstance(fn, MethodType):
        obj = fn.__self__
        d = None
        if isinstance(obj, type):  # (a classmethod's class)
            klass = obj
        else:
            klass = type(obj)
            roots.extend((obj, name) for name in _slots(klass))
            d = getattr(obj, "__dict__", None)
            if type(d) is dict:
                roots.extend((d, name) for name in d)
            else:
                d = None
        fn = fn.__func__
        if isinstance(fn, FunctionType):
            names = _names(fn.__code__)
            _class_attributes(klass, names, obj, d, roots, helpers)
            attributes = d or {}
            for name in names:  # self.act(v): what it reads too
                if name in attributes:
                    _named(attributes[name], names, roots, helpers)
            _function(fn, roots, helpers)
    elif isinstance(fn, FunctionType):
        _function(fn, roots, helpers)
    else:  # a callable object: as its __call__ bound to it
        d = getattr(fn, "__dict__", None)
        call = call_method(fn)
        if type(d) is dict and "__wrapped__" in d:
            # a wrapper (functools.lru_cache, a compiled function): the function
            # it calls, and what was set on it, not its own counters and cache
            helpers.append(d["__wrapped__"])
            own = getattr(type(fn), "_bookkeeping", ())
            roots.extend((d, name) for name in d if name not in own)
            if isinstance(call, FunctionType) and _users(type(fn)):
                # a decorator written as a class (functools.update_wrapper(self, f)):
                # its __call__ runs too, and reads globals and the object's attributes
                helpers.append(MethodType(call, fn))
        else:
            if isinstance(call, FunctionType):
                _collect(MethodType(call, fn), roots, seen, level)
                return
            if type(d) is not dict:
                return
            roots.extend((d, name) for name in d)
    if level > 0:
        for h in helpers:
            _collect(h, roots, seen, level - 1)


def _function(fn: FunctionType, roots: list[tuple[Any, Any]], helpers: list[Any]) -> None:
    """The globals ``fn``'s code names (and the attributes it names of the
    modules among them), its closure cells and defaults; the functions,
    callable objects and classes among them noted."""
    g = fn.__globals__
    code = fn.__code__
    names = _as_read_by(fn, _names(code))
    # the globals it loads or stores (a global named as an attribute it reads, .data,
    # is not read); where it reads its namespace by a computed name (globals()["x"],
    # eval), every global
    read = _global_names(code)
    if _NAMESPACE_READERS.intersection(names):  # (not the import system's __loader__...)
        read = tuple(n for n in g if n in read or not (n.startswith("__") and n.endswith("__")))
    space = g.get("__builtins__")
    space = getattr(space, "__dict__", space)  # (the module builtins, or its dict)
    for name in read:
        roots.append((g, name))  # (one missing, a builtin's name: a global defined later)
        if name in g:
            _named(g[name], names, roots, helpers)
        elif type(space) is dict and name in space:  # the builtin (builtins.abs = ... too)
            roots.append((space, name))
    for cell in fn.__closure__ or ():
        roots.append((cell, None))
        with contextlib.suppress(ValueError):  # (an empty cell)
            _named(cell.cell_contents, names, roots, helpers)
    roots.append((fn, "__code__"))  # (replaced in place: a hot reload, jurigged)
    if fn.__defaults__:
        roots.append((fn, "__defaults__"))
    if fn.__kwdefaults__:
        roots.append((fn, "__kwdefaults__"))
    if _users_function(fn):
        _looked_up(fn.__code__, g.get("__package__"), names, roots, helpers)


#: A module's name, as ``import`` and ``sys.modules`` take it (``cfg``, ``pkg.cfg``),
#: or relative to a package (``.cfg``, ``..x``: ``importlib.import_module(".cfg",
#: __package__)``), then perhaps an attribute after a colon (``pkg.cfg:scale``, as
#: ``pkgutil.resolve_name`` takes; ``pkg.cfg.scale`` is a module's name to the pattern).
_MODULE_NAME = re.compile(
    r"(?P<dots>\.*)(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?"
    r"(?::(?P<attribute>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?\Z"
)


def _looked_up(
    code: Any,
    package: Any,
    code_names: list[str],
    roots: list[tuple[Any, Any]],
    helpers: list[Any],
) -> None:
    """The modules ``code`` may find in ``sys.modules`` by name (an
    ``import`` inside the function, ``importlib.import_module("cfg")``,
    ``sys.modules["cfg"]``): each name it loads and each module name among
    its strings (and the same in its package: ``from . import cfg``; a
    relative one, ``".cfg"``, in the function's package; ``"pkg.cfg:scale"``,
    as ``pkgutil.resolve_name`` takes it, the module ``pkg.cfg``, and the
    parts of such a string as attributes the code names) that is loaded,
    rooted as an entry of ``sys.modules``, so a module replaced there is a
    change; where the code reads ``sys.modules`` itself, its
    strings absent from it too (``"plugin" in sys.modules``); ``code_names``:
    the names the code loads. A dotted name's packages too (``import
    pkg.cfg as c`` reads the attribute ``cfg`` of ``pkg``), and the
    function's own package (``from . import cfg``). Where the code reads
    ``sys.modules`` itself, or imports by a name it computes
    (``importlib.import_module(name)``, ``__import__``,
    ``pkgutil.resolve_name``), every entry (:class:`AllModules`)."""
    modules = sys.modules
    loaded, strings = _module_names(code)
    # (a relative name, ".cfg", in the function's package; "pkg.cfg:scale": pkg.cfg)
    found = [_module_of(s, package) for s in strings]
    names = [*loaded, *found]
    if package:
        absolute = [*loaded, *(m for s, m in zip(strings, found) if s[0] != ".")]
        names += [package, *(f"{package}.{name}" for name in absolute if name)]
    names += [name[:k] for name in names for k, c in enumerate(name) if c == "."]
    # the attributes such a string names (pkg.cfg:scale, pkg.cfg.scale): read too
    code_names = [*code_names, *(n for s in strings for n in _identifiers(s))]
    for name in dict.fromkeys(names):
        module = modules.get(name) if name else None
        if module is not None:
            roots.append((modules, name))
            _named(module, code_names, roots, helpers)
    if {"modules", "import_module", "__import__", "resolve_name"} & set(code_names):
        roots.append((modules, AllModules()))


def _module_of(name: str, package: Any) -> str:
    """The module a string of :data:`_MODULE_NAME` names (a relative one in
    ``package``, as ``importlib.import_module(name, package)`` finds it;
    "" where it names none)."""
    match = _MODULE_NAME.match(name)
    if match is None:
        return ""
    dots, module = match["dots"], match["module"] or ""
    if not dots:
        return module
    if type(package) is not str or not package:
        return ""
    base = package.rsplit(".", len(dots) - 1)
    if len(base) < len(dots):
        return ""  # (beyond the top-level package: import_module raises)
    return f"{base[0]}.{module}" if module else base[0]


class AllModules:
    """A root's name that stands for every entry of ``sys.modules``: its
    keys and values (by identity), and the attributes among ``names`` of
    each, for a function that finds modules by names it computes
    (``sys.modules[name].scale``, ``"plugin" in sys.modules``)."""

    __slots__ = ("names", "_users")

    def __init__(self) -> None:
        # every attribute name the code compile follows names (Sources._settle)
        self.names: frozenset[str] = frozenset()
        self._users: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    def users(self, module: Any) -> bool:
        """Whether ``module`` is the user's (:func:`_users_module`), once per
        module object."""
        try:
            return self._users[module]
        except KeyError:
            pass
        except TypeError:  # (not weakly referable: not a module)
            return False
        mine = self._users[module] = isinstance(module, ModuleType) and _users_module(module)
        return mine


def _module_names(code: Any) -> tuple[list[str], list[str]]:
    """The names ``code`` (and the code nested in it) loads, and the strings
    among its constants that may name a module (:data:`_MODULE_NAME`)."""
    names = list(code.co_names)
    strings = []
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            more, found = _module_names(c)
            names += more
            strings += found
        elif type(c) is str and c and _MODULE_NAME.match(c):
            strings.append(c)
    return list(dict.fromkeys(names)), list(dict.fromkeys(strings))


def _named(
    value: Any,
    names: list[str],
    roots: list[tuple[Any, Any]],
    helpers: list[Any],
    objects: bool = True,
) -> None:
    """A global, closure cell or module attribute that is code: a function,
    a bound method, a partial or a callable object is a helper (what it
    reads is read too; a decorator of the user's written as a class, its
    ``__call__`` as well as the function it wraps), a class of the user's:
    its attributes that ``names`` names (``Config.lr``, ``Net.helper``);
    with ``objects``, an object of a class of the user's: those of its
    class (``cfg.lr``), and the code among its own attributes that
    ``names`` names (``m.fast``, ``m.act``: a compiled function, a lambda,
    a bound method stored on it), one object deep."""
    if isinstance(value, types.GenericAlias) or type(value).__module__ == "typing":
        origin = getattr(value, "__origin__", None)  # (Box[float]: the class Box)
        if isinstance(origin, type):
            value = origin
    if isinstance(value, (FunctionType, MethodType, functools.partial)):
        helpers.append(value)
        _own_attributes(value, names, roots)
    elif isinstance(value, ModuleType):
        _module(value, names, roots, helpers)
    elif isinstance(value, type):
        if _users(value):
            _class_attributes(value, names, None, None, roots, helpers)
            _made_class(value, roots, helpers)
        if type(value) is not type and _users(type(value)):  # its metaclass's (Config.scale)
            _made_class(type(value), roots, helpers)
    else:
        d = getattr(value, "__dict__", None)
        users = _users(type(value))
        if type(d) is dict and "__wrapped__" in d and not users:
            # a compiled function, a library's wrapper: the function
            helpers.append(d["__wrapped__"])
            _own_attributes(value, names, roots)
        elif users:  # (a decorator of the user's written as a class too: its __call__)
            if isinstance(call_method(value), FunctionType):
                helpers.append(value)
            if objects:
                d = d if type(d) is dict else None
                _class_attributes(type(value), names, value, d, roots, helpers)
                attributes = d or {}
                for name in names:
                    # code stored on the object (m.fast = chainrule.compile(self.loss),
                    # m.act = lambda h: ...) and called by name: what it reads too
                    attr = attributes.get(name)
                    if callable(attr) and not isinstance(attr, type):
                        _named(attr, names, roots, helpers, objects=False)


def _own_attributes(value: Any, names: list[str], roots: list[tuple[Any, Any]]) -> None:
    """The attributes ``names`` names of a function's own ``__dict__``
    (``bump.calls``), rooted where the walk does not enter it: a wrapper's
    (``functools.lru_cache``, a compiled function: code to the walk),
    whose names are rooted present or not (code compile cannot copy, the
    wrapped function itself, may set them while the function runs, and
    that store is not seen), a library's function's or a bound method's
    function's (those present). A compiled function's own counters and
    cache are not the user's (:attr:`Compiled._bookkeeping`)."""
    bound = type(value) is MethodType
    if bound:
        value = value.__func__
    d = getattr(value, "__dict__", None)
    if type(d) is not dict:
        return
    if type(value) is FunctionType:
        if not bound and _users_function(value):
            return  # (walked with the function, as data)
    elif "__wrapped__" not in d:
        return  # (a partial, an object: walked as data)
    module = getattr(value, "__module__", None) or ""
    any_name = "__wrapped__" in d and _users_module(sys.modules.get(module), module)
    own = getattr(type(value), "_bookkeeping", ())
    roots.extend(
        (d, name)
        for name in names
        if (any_name or name in d) and name not in own and not name.startswith("__")
    )


def _module(
    module: ModuleType, names: list[str], roots: list[tuple[Any, Any]], helpers: list[Any]
) -> None:
    """A module of the user's (``config.helper()``, ``project.config.scale``):
    the code among its attributes that ``names`` names, and its submodules'
    likewise, and its ``__getattr__`` (PEP 562: it serves the attributes
    the namespace lacks); a library's functions are its own business. Its
    data is guarded where the module is reached (:data:`_MODULE`)."""
    level, entered = [module], {id(module)}  # (each once: a package and its submodules cycle)
    while level:
        module = level.pop()
        space = vars(module)
        if not _users_module(module):  # (but attributes set on its functions: json.dumps.scale)
            for name in names:
                if name in space:
                    _own_attributes(space[name], names, roots)
            continue
        for attr in [space[name] for name in (*names, "__getattr__") if name in space]:
            if not isinstance(attr, ModuleType):
                _named(attr, names, roots, helpers)
            elif id(attr) not in entered:
                entered.add(id(attr))
                level.append(attr)


def _read_names(functions: set[Identity]) -> tuple[str, ...]:
    """The names the code of ``functions`` (and of bound methods' functions)
    loads, and the identifiers among its strings (``getattr(config,
    "scale")``, ``for n in ("scale", "shift")``) and its defaults'
    (``name="scale"``)."""
    names: list[str] = []
    for f in functions:
        fn = getattr(f.obj, "__func__", f.obj)
        code = getattr(fn, "__code__", None)
        if code is not None:
            names += _as_read_by(fn, _names(code, True))
            defaults = (getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None))
            names += _identifiers(defaults)
    return tuple(dict.fromkeys(names))


def _as_read_by(fn: Any, names: list[str]) -> list[str]:
    """The names ``fn``'s code reads that the guard follows: a library's
    function (chainrule's own: is ``chainrule.tensor`` loaded?) looks in
    ``sys.modules`` for its own lazy imports, not the user's data, so
    its ``modules`` is not followed (a module imported after the trace, by
    NumPy in the first backward pass, made every kept trace stale)."""
    if type(fn) is FunctionType and not _users_function(fn) and "modules" in names:
        return [n for n in names if n != "modules"]
    return names


def _identifiers(x: Any) -> list[str]:
    """The identifiers among the strings of ``x`` and of the tuples,
    frozensets, lists and dicts in it (of a module's name and attribute,
    ``"pkg.cfg:scale"``, each part)."""
    if type(x) is str:
        if x.isidentifier():
            return [x]
        # a module's name and its attribute (pkg.cfg:scale, ..cfg.scale): each part
        return [n for n in re.split(r"[.:]", x) if n] if _MODULE_NAME.match(x) else []
    if type(x) is dict:
        x = [*x.keys(), *x.values()]
    if type(x) in (tuple, frozenset, list):
        return [n for y in x for n in _identifiers(y)]
    return []


def _users(klass: type) -> bool:
    """Whether ``klass`` is the user's (its module is: :func:`_users_module`)."""
    name = klass.__module__
    if type(name) is not str:  # (a C metatype's: its own descriptor, no name)
        return False
    return _users_module(sys.modules.get(name), name)


def _users_module(module: ModuleType | None, name: str = "") -> bool:
    """Whether ``module`` (named ``name``) is the user's, not the standard
    library, NumPy, chainrule or an installed package (site-packages): what
    a library's code reads is not the user's data."""
    # (from its namespace: a module's __getattr__ is not asked, it may raise anything)
    space = getattr(module, "__dict__", None) or {}
    top = (name or space.get("__name__", "")).partition(".")[0]
    where = str(space.get("__file__") or "")
    return (
        top not in sys.stdlib_module_names
        and top not in ("numpy", "chainrule", "builtins")
        and "site-packages" not in where
        and "dist-packages" not in where
    )


def _class_attributes(
    klass: type,
    names: list[str],
    obj: Any,
    d: dict[str, Any] | None,
    roots: list[tuple[Any, Any]],
    helpers: list[Any],
) -> None:
    """The attributes of ``klass`` (through its MRO) that ``names`` names:
    rooted in the class that defines each and in those before it (a later
    definition there shadows it), and in ``d``, ``obj``'s ``__dict__`` (an
    attribute set on the object later shadows it too); its methods,
    static and class methods and properties' getters are helpers (bound to
    ``obj`` when there is one)."""
    spaces = [_space(k) for k in klass.__mro__ if k is not object]
    for name in names:
        for i, space in enumerate(spaces):
            if name not in space:
                continue
            roots.extend((s, name) for s in spaces[: i + 1])
            if d is not None and name not in d:
                roots.append((d, name))
            attr = space[name]
            if not _method(attr, klass, obj, helpers) and not isinstance(attr, type):
                _named(attr, names, roots, helpers, objects=False)
            break


def _method(attr: Any, klass: type, obj: Any, helpers: list[Any]) -> bool:
    """Whether ``attr``, an entry of ``klass``'s namespace, is code: a
    method, a static or class method, a property's getter (then a helper,
    bound to ``obj`` when there is one)."""
    if isinstance(attr, property):
        attr = attr.fget
    if isinstance(attr, FunctionType):
        helpers.append(attr if obj is None else MethodType(attr, obj))
    elif isinstance(attr, staticmethod):
        helpers.append(attr.__func__)
    elif isinstance(attr, classmethod):
        helpers.append(MethodType(attr.__func__, klass))
    else:
        return False
    return True


def _made_class(klass: type, roots: list[tuple[Any, Any]], helpers: list[Any]) -> None:
    """A class of the user's that the code reaches, which it may call
    (``Layer()``, ``Layer()(x)``, ``Layer().forward(x)``): a replay runs
    none of its methods, so every method of it (its ``__init__``,
    ``__new__``, ``__call__``, the methods called on an object made in
    the function, whose names the function's code need not name) is a
    helper, and its namespaces (:func:`class_roots`) are rooted whole:
    a method patched on the class, a class attribute changed between calls
    or while it runs (``Counter.n += 1`` in ``__init__``) are seen."""
    roots.extend(class_roots(klass))
    for space in user_spaces(klass):
        for attr in space.values():
            _method(attr, klass, None, helpers)


def _walk_classes(
    out: Snapshot,
    entered: set[int],
    budget: list[int],
    known: Snapshot | None,
    array_bytes: int | None,
    names: tuple[str, ...] = (),
) -> None:
    """The namespaces of the classes of the user's (:func:`user_spaces`) of
    the objects the walk entered (``out.classes``, in the order met), each
    once, after the walk of the roots: their lengths, then every entry
    (methods by identity: a patched method is another function), then
    the data among them entered as any root's (whose classes are walked
    in turn), and its methods' defaults, closure cells' contents and own
    attributes (:func:`_method_parts`). In one pass, not class by class as
    objects are met: before every replay, and a model's classes are few
    and its objects many. With ``known`` (see :meth:`Sources.hold`), which
    of the entries are methods and data is taken from there: the result
    is the state only if it is ``known``'s entry for entry, and then so
    are they."""
    done = 0
    while done < len(out.classes):
        types = [*out.classes][done:]
        done = len(out.classes)
        spaces = [
            s
            for s in {id(s): s for t in types for s in user_spaces(t)}.values()
            if id(s) not in entered
        ]
        entered.update(map(id, spaces))
        at = len(out)
        out.lengths.extend(map(len, spaces))
        for space in spaces:
            out.extend(space.keys())
            out.extend(space.values())
        found = None if known is None else known.methods.get(at)
        if found is None:
            entries = out[at:]
            methods = [
                f for f in map(_code_in, entries) if type(f) is FunctionType and _users_function(f)
            ]
            data = [x for x in entries if type(x) not in _SPACE_LEAVES]
            parts = len(out)
            _method_parts(methods, out)
            data.extend([x for x in out[parts:] if type(x) not in _LEAVES])
        else:  # (before a replay: the methods and data of the walk it is checked against)
            methods, data = found
            _method_parts(methods, out)
        out.methods[at] = methods, data
        budget[0] -= len(out) - at
        if data:
            kinds = None if known is None else known.kinds
            _enter(data, out, entered, budget, kinds, array_bytes, names)


def _code_in(entry: Any) -> Any:
    """The function an entry of a class's namespace runs: itself, a static
    or class method's, a property's getter (else the entry)."""
    t = type(entry)
    if t is staticmethod or t is classmethod:
        return entry.__func__
    if t is property:
        return entry.fget
    return entry


_DEFAULTS = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__")
_CLOSURE = operator.attrgetter("__closure__")
_DICT = operator.attrgetter("__dict__")
_CELL = operator.attrgetter("cell_contents")


def _method_parts(methods: list[FunctionType], out: Snapshot) -> None:
    """What :func:`_function_items` and :func:`_attributes` read of each
    function of ``methods`` (its defaults, closure cells' contents, its
    own attributes), added to ``out`` in C-level passes over them all
    (most methods have none of these)."""
    at = len(out)
    out.extend(chain.from_iterable(map(_DEFAULTS, methods)))
    cells = list(chain.from_iterable(filter(None, map(_CLOSURE, methods))))
    try:
        out.extend(map(_CELL, cells))
    except ValueError:  # (an empty cell: one by one)
        del out[at + 3 * len(methods) :]
        out.extend(_cell_contents(cell) for cell in cells)
    dicts = list(map(_DICT, methods))
    out.lengths.extend(map(len, dicts))
    for d in filter(None, dicts):
        out.extend(d.keys())
        out.extend(d.values())
    out.extend(chain.from_iterable(map(_globals_read, methods)))


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # (an empty cell)
        return _MISSING


#: Per type, the namespaces :func:`user_spaces` names (by the type itself, as :data:`_KINDS`).
_USER_SPACES: dict[type, tuple[Any, ...]] = {}


def user_spaces(klass: type) -> tuple[Any, ...]:
    """The namespaces of ``klass`` and its bases that are the user's
    (:func:`_users`; not ``object``'s, a library's): every object the walk
    enters has them entered too, once a walk, so a class attribute changed
    between calls (``Layer.scale = 4.0``, a method patched on the class) of
    an object reached at any depth (``self.layer.scale``, an argument's)
    traces again; its metaclass's too. A library's class is its own business."""
    spaces = _USER_SPACES.get(klass)
    if spaces is None:  # (and its metaclass's: type(self).factor, a metaclass property)
        meta: Any = type(klass)
        mro = klass.__mro__ + meta.__mro__
        spaces = tuple(_space(k) for k in mro if k is not object and k is not type and _users(k))
        _USER_SPACES[klass] = spaces
    return spaces


#: Per type, the roots :func:`class_roots` names (by the type itself, as :data:`_USER_SPACES`).
_CLASS_ROOTS: dict[type, tuple[tuple[Any, Any], ...]] = {}


def class_roots(klass: type) -> tuple[tuple[Any, Any], ...]:
    """Roots that hold the namespaces of ``klass`` and its bases of the
    user's (:func:`user_spaces`), each entered whole by a walk (its
    entries by identity, its data walked, a method's defaults and closure
    cells): a class the code reaches, not an object's, whose own classes
    the walk enters anyway; the same root objects at every walk."""
    roots = _CLASS_ROOTS.get(klass)
    if roots is None:
        held = dict(enumerate(user_spaces(klass)))
        roots = _CLASS_ROOTS[klass] = tuple((held, k) for k in held)
    return roots


#: Each class's namespace, one view per class (a root is kept once: by its view's id).
_SPACES: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def _space(klass: type) -> Any:
    space = _SPACES.get(klass)
    if space is None:
        space = _SPACES[klass] = vars(klass)
    return space


#: Names through which code reads its module's globals by a computed name.
_NAMESPACE_READERS = frozenset(("globals", "eval", "exec", "f_globals", "__globals__"))

#: The instructions that name a global (a class body's LOAD_NAME falls back to one).
_GLOBAL_OPS = frozenset(
    ("LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME")
    + ("LOAD_FROM_DICT_OR_GLOBALS",)  # (3.12: a class body's, an annotation scope's)
)

#: code -> the global names it and its nested code name (:func:`_global_names`)
_GLOBALS_OF: dict[Any, tuple[str, ...]] = {}


def _global_names(code: Any) -> tuple[str, ...]:
    """The names ``code`` and the code nested in it load or store as
    globals (not the attributes and methods it names)."""
    found = _GLOBALS_OF.get(code)
    if found is None:
        names = [i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS]
        for c in code.co_consts:
            if hasattr(c, "co_names"):
                names.extend(_global_names(c))
        found = _GLOBALS_OF[code] = tuple(dict.fromkeys(names))
    return found


def _names(code: Any, strings: bool = False) -> list[str]:
    """The names ``code`` (and the code nested in it) loads; with
    ``strings``, the identifiers among its string constants too
    (``getattr(config, "scale", 1.0)``)."""
    names = list(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names.extend(_names(c, strings))
        elif strings:
            names.extend(_identifiers(c))
    return list(dict.fromkeys(names))
