"""Tracing: run the user's function once, eagerly, and watch it.

While a trace runs, a few attributes of :class:`~chainrule.engine.Value`
are swapped for watching versions (restored in ``finally``; the engine's
hot path is untouched at every other time):

* ``Value.data`` becomes a property: the engine's own reads get the float,
  user code's reads get a :class:`~chainrule.compiler.reads.TracedFloat`
  that remembers the node; user code that *writes* ``.data`` or ``.grad``
  (``zero_grad`` inside the function) cannot be replayed (the write would
  not happen again) and is refused, and so is a read of ``.grad`` (a
  replay would use its traced number);
* ``Value.__init__`` notes each Value made during the trace: those are the
  trace's constants (recomputed from a recipe when built from a read
  float); every leaf that existed before is an input, read at each replay;
* the comparisons and ``float()`` of Value go through the read floats,
  and so do the methods that hand user code the number: ``item()`` (a
  read float), ``detach()`` (a leaf made from it: recomputed at each
  replay, no gradient), ``repr``/``str`` (the number read whole, a guard;
  a parameter's ``.grad`` read as user code reads it); ``_local_grads``
  (the engine's floats, which a replay would not recompute) is refused;
* ``/`` records a guard for the engine's own choice between micrograd's
  ``a * b**-1`` and one true division, which depends on the values;
* the engine's number intake (``as_float`` in engine, beyond_micrograd and
  protocols) lets a read float through as an operation's
  constant, so the node keeps the recipe.

Only one thread traces at a time (a lock); another thread's Values see
plain floats meanwhile, but run slower while the trace lasts.
"""

from __future__ import annotations

import collections
import copy
import copyreg
import enum
import itertools
import operator
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import random_state
from ..value import (
    beyond_micrograd,
    edges,
    engine,
    functions,
    ieee,
    intake,
    mode,
    primitives,
    protocols,
    sums,
    walk,
)
from ..value.engine import Value
from ..value.functions import is_own
from ..value.primitives import Primitive
from . import escapes, reads
from .dispatch import as_value, asked_first
from .keys import Identity
from .reads import Record, TracedFloat, traced
from .sources import STANDS_FOR

_lock = threading.RLock()

#: Source files whose reads of ``.data`` are the engine's own bookkeeping.
_INTERNAL = frozenset(
    module.__file__
    for module in (engine, intake, beyond_micrograd, functions, edges, primitives, ieee, mode)
    + (walk, protocols, sums)
)


_data_slot = Value.__dict__["data"]
_grad_slot = Value.__dict__["grad"]
_class_slot = object.__dict__["__class__"]


class _Masked(Value):
    """A class a trace puts in place of the user's Values: ``v.__class__``
    says the user's class (:func:`type_of`); assigning it is as for any object."""

    __slots__ = ()

    @property
    def __class__(self) -> type:
        return type_of(self)

    @__class__.setter
    def __class__(self, cls: type) -> None:
        _class_slot.__set__(self, cls)


#: While tracing, a read float that became a leaf (``v - top``) and the
#: alias of a gather (:mod:`chainrule.compiler.symbolic`) list the nodes
#: they depend on as their inputs, with these markers as their primitive
#: and no local derivative (no gradient flows there, as eagerly), so the
#: one walk of the capture orders them after those nodes. The traced graph
#: is only ever captured: a call that runs eagerly runs ``fn`` again.
RECIPE = Primitive("read", float, None)
GATHER = Primitive("pick", float, None)


def _depends(v: Value, on: tuple[Value, ...], marker: Primitive) -> None:
    local = getattr(v, "_local", ())  # (a stand-in: none yet)
    last = local[-1] if local else None
    if type(last) is protocols.Tag:  # (its label kept: a new tag, the leaf's own is put back)
        tag = protocols.Tag(marker)
        for name in ("_label", "_id"):
            if hasattr(last, name):
                setattr(tag, name, getattr(last, name))
        marker = tag  # type: ignore[assignment]
    v._prev = on
    v._local = (*(0.0,) * len(on), marker)


class StandIn(_Masked):
    """The alias of a gather's pick (``table[i]``, ``i`` an int argument):
    a new object, where eagerly the pick is the entry itself. Comparing it
    (``==``, ``in`` a list, a dict key or a set member: Python compares by
    identity) is answered for the entry it picks while tracing, so the
    traced call computes what eager does, and, when user code asks, makes
    the function run eagerly: which entries are the same object depends on
    the ints, and a replay would not ask again. ``is`` and ``id()`` are not
    method calls: a traced copy calls :func:`same_object` and
    :func:`identity` for them (:mod:`~chainrule.compiler.rewrite`).)"""

    __slots__ = ("picked",)
    picked: Value

    # (the user's subclass of Value is asked first, as for any operator: as_value)
    def __eq__(self, other: object) -> bool:
        answer = asked_first(self, other, "__eq__")
        return _same(self, other, 2) if answer is NotImplemented else answer

    def __ne__(self, other: object) -> bool:
        answer = asked_first(self, other, "__ne__")
        return not _same(self, other, 2) if answer is NotImplemented else answer

    def __hash__(self) -> int:
        if reads.current() is not None and _asker(sys._getframe(1)) is not None:
            _compared(sys._getframe(1))
        return object.__hash__(_entry(self))

    # ``copy``: the entry's copy, as eagerly; ``deepcopy`` with the same memo,
    # so two picks of one entry share one copy (``[W[i], W[j]]``, i == j)
    def __copy__(self) -> Any:
        _read_by_user(sys._getframe(1), "__copy__")
        return copy.copy(_entry(self))

    def __deepcopy__(self, memo: Any) -> Any:
        _read_by_user(sys._getframe(1), "__deepcopy__")
        return copy.deepcopy(_entry(self), memo)


_picked_slot = StandIn.__dict__["picked"]


def _entry(v: Any, picked: Any = _picked_slot.__get__) -> Any:
    """The object a stand-in picks (``v`` itself for any other object)."""
    while type(v) is StandIn:
        v = picked(v)
    return v


#: The code of compile's functions that call C code on the user's behalf
#: (:data:`chainrule.compiler.rewrite.RELAY`: ``_call``, ``_relay``): a
#: stand-in that C code called from them compares or hashes
#: (``E.count(E[i])``, ``dict.fromkeys``) is compared by the user.
ON_BEHALF: set[Any] = set()


def _asker(frame: Any) -> Any:
    """The frame of the user's code that compares a stand-in, from the frame
    that does (``frame``), or None when it is compile's own bookkeeping."""
    code = frame.f_code
    if code.co_filename not in _OURS:
        return frame
    if code not in ON_BEHALF:
        return None
    while frame.f_back is not None and frame.f_code.co_filename in _OURS:
        frame = frame.f_back
    return frame


def _compared(frame: Any) -> None:
    record = reads.current()
    if record is not None:
        frame = _asker(frame) or frame
        record.problems.append(f"{frame.f_code.co_filename}:{frame.f_lineno}: {IDENTITY_OF_PICK}")


def _reader(frame: Any) -> Any:
    """The frame of the user's code that reads a stand-in's node structure,
    from the frame that does, or None when it is compile's own: the
    engine's code reads on behalf of whoever called it (a walk, a drawing
    the user asked for)."""
    while frame is not None and frame.f_code.co_filename in _INTERNAL:
        frame = frame.f_back
    return None if frame is None else _asker(frame)


#: Why a function that reads a stand-in's node structure runs eagerly.
STRUCTURE_OF_PICK = (
    "reads {name} of an entry picked by an int argument (table[i]): "
    "which entry, and so what it reads, depends on the ints"
)


class _Structure:
    """An attribute of a stand-in that tells the node (micrograd's
    ``_prev``, ``_op``, microgpt's ``_children``, ``label``...): compile's
    own code gets the stand-in's, user code the picked entry's, as
    eagerly, and the function then runs eagerly (the traced run's result
    is the call's, so it must be eager's)."""

    def __init__(self, name: str, inner: Any) -> None:
        self.name, self.inner = name, inner

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        if _read_by_user(sys._getframe(1), self.name):
            return getattr(_entry(obj), self.name)
        get = getattr(self.inner, "__get__", None)
        return self.inner if get is None else get(obj, owner)

    def __set__(self, obj: Any, value: Any) -> None:
        if _read_by_user(sys._getframe(1), self.name):
            setattr(_entry(obj), self.name, value)
        else:
            self.inner.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        if _read_by_user(sys._getframe(1), self.name):
            delattr(_entry(obj), self.name)
        else:
            self.inner.__delete__(obj)


def _inherited(name: str) -> Any:
    for cls in Value.__mro__:
        if name in cls.__dict__:
            return cls.__dict__[name]
    raise AttributeError(name)


for _name in (
    "picked",  # (the stand-in's own, by the slot itself: a Value has none)
    "_prev",
    "_local",
    "_children",
    "_local_grads",
    "_fn",
    "_op",
    "_backward",
    "_chain_rule_once",
    "label",
    "_repr_html_",
    "_repr_svg_",
    "__getstate__",
):
    inner = _picked_slot if _name == "picked" else _inherited(_name)
    setattr(StandIn, _name, _Structure(_name, inner))
# (a Value's slots to whoever asks: its state is the entry's, as above)
StandIn.__slots__ = Value.__slots__  # type: ignore[assignment]


def _read_by_user(frame: Any, name: str) -> bool:
    """Whether user code reads (or writes) attribute ``name`` of a stand-in
    from ``frame`` while tracing; if so, the function runs eagerly."""
    record = reads.current()
    if record is None:
        return False
    frame = _reader(frame)
    if frame is None:
        return False
    problem = STRUCTURE_OF_PICK.format(name=name)
    record.problems.append(f"{frame.f_code.co_filename}:{frame.f_lineno}: {problem}")
    return True


def _missing(self: StandIn, name: str) -> Any:
    """An attribute a stand-in lacks (``_label``, ``__dict__``): the picked
    entry's, as eagerly (the function then runs eagerly)."""
    if _read_by_user(sys._getframe(1), name):
        return getattr(_entry(self), name)
    raise AttributeError(f"{Value.__name__!r} object has no attribute {name!r}")


StandIn.__getattr__ = _missing  # type: ignore[attr-defined]


#: Why a function that writes ``.grad`` runs eagerly.
WRITES_GRAD = (
    "writes .grad of a Value (zero_grad inside the function? a backward pass by "
    "hand?); a replay would not repeat the write: do it outside"
)

#: Why a function that compares a stand-in by identity runs eagerly.
IDENTITY_OF_PICK = (
    "compares an entry picked by an int argument (table[i]) by identity (==, in, "
    "a dict key or set member, is, id()): which picks are the same entry depends on "
    "the ints, and a replay would not compare again"
)


def _same(a: Any, b: Any, depth: int) -> bool:
    """``a == b`` for Values, by identity, as eagerly (a stand-in as its pick);
    asked by user code while tracing, the function runs eagerly."""
    frame = sys._getframe(depth)
    if reads.current() is None or _asker(frame) is None:
        return a is b  # compile's own bookkeeping: the stand-in itself
    _compared(frame)
    return _entry(a) is _entry(b)


#: While tracing, the lists handed back for rows picked by int arguments
#: (``R[i]``: :func:`chainrule.compiler.symbolic.gather`), by identity (the
#: key holds the list): the user's row each stands for. Emptied when the
#: trace ends.
HANDED: dict[Identity, Any] = {}

#: The types of the rows a gather picks (the user's row is one of these).
_ROWS = (list, tuple)


def same_object(a: Any, b: Any, depth: int = 1) -> bool:
    """``a is b`` in user code while tracing (a copy's ``is``/``is not``,
    :mod:`~chainrule.compiler.rewrite`), a stand-in as the entry it picks,
    a row handed back as the user's row (the function then runs eagerly);
    ``depth``: the user's frame. (A row against an object that is no list
    or tuple is another object whatever the ints: no question asked.)"""
    ta, tb = type(a), type(b)
    if ta is TracedFloat or tb is TracedFloat:
        return reads.identical(a, b)
    if _copied(a) or _copied(b):
        return bool(by_entry(operator.is_, (a, b), depth + 1))
    if isinstance(a, reads.TracedInt) or isinstance(b, reads.TracedInt):
        return bool(by_entry(operator.is_, (a, b), depth + 1))
    if _by_value(a) and _by_value(b) and reads.current() is not None:
        # (globals, attributes and such arguments are guarded by value: one may
        # be rebound to an equal number or string, another object)
        reads.identity_unseen(
            "both are numbers or strings, which compile guards by value (a global may be "
            "rebound to an equal one)"
        )
        return a is b
    if ta is not StandIn and tb is not StandIn:
        if not (HANDED and ta in _ROWS and tb in _ROWS):
            return a is b
        if Identity(a) not in HANDED and Identity(b) not in HANDED:
            return a is b
    return bool(by_entry(operator.is_, (a, b), depth + 1))


#: The types whose objects compile guards and keys by value.
_VALUES = (int, float, complex, str, bytes)


def _by_value(x: Any) -> bool:
    """Whether ``x`` may be guarded by its value, not as an object: a
    number, a string, a NumPy array or scalar (not a bool or an enum's
    member, an IntEnum's too: each is one object)."""
    if type(x) is bool or isinstance(x, enum.Enum):  # (each one object: asked by is)
        return False
    if isinstance(x, _VALUES):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, (numpy.generic, numpy.ndarray))


def identity(x: Any, depth: int = 1) -> int:
    """``id(x)`` in user code while tracing (a copy's call of the builtin
    ``id``), a stand-in as the entry it picks, a row handed back as the
    user's row (the function then runs eagerly); ``depth``: the user's frame."""
    return int(by_entry(id, (x,), depth + 1))


def _copied(x: Any) -> bool:
    """Whether ``x`` is the trace's copy of a list, tuple or dict argument."""
    if not isinstance(x, _ARG_CONTAINERS):
        return False
    record = reads.current()
    return record is not None and Identity(x) in record.arg_copies


#: The containers of arguments a trace copies (keys.flatten rebuilds them,
#: named tuples and dict subclasses too).
_ARG_CONTAINERS = (list, tuple, dict)


def _identity_of_int(x: Any) -> None:
    """An int argument asked by identity (``i is j``, ``id(i)``): eager's
    answer, asked of the int objects; the function runs eagerly (another
    call's ints may be other objects)."""
    record = reads.current()
    if record is not None:
        record.problems.append(
            f"{reads.user_site()}: asks whether an int argument is an object (is, id), which a "
            "replay cannot ask again; compare ints by value (==)"
        )


def stands_in(x: Any) -> bool:
    """Whether ``x`` stands for a user's object while tracing: a pick
    ``W[i]``, a row ``R[i]`` handed back."""
    return type(x) is StandIn or (bool(HANDED) and Identity(x) in HANDED)


def _origin(x: Any) -> Any:
    """The user's object ``x`` stands for (``x`` itself for any other)."""
    row = HANDED.get(Identity(x))
    return _entry(x) if row is None else row


#: The types of the arguments' containers a trace runs on copies of.
_COPIED_TYPES = (list, tuple, dict)


def by_entry(f: Callable[..., Any], args: tuple[Any, ...], depth: int = 1) -> Any:
    """``f(*args)`` for a function that tells objects apart by identity
    (``is``, ``id``, ``operator.is_``, ``object.__hash__``, ``object.__eq__``,
    ``gc.get_referrers``...: :data:`~chainrule.compiler.rewrite.BY_IDENTITY`),
    each stand-in as the entry it picks, each row handed back as the user's
    row, as eagerly; asked of a stand-in by user code while
    tracing, the function runs eagerly (which picks are the same entry
    depends on the ints); ``depth``: the user's frame."""
    if any(map(_copied, args)):  # an argument's list, tuple or dict: the caller's own
        if (f is operator.is_ or f is operator.is_not) and not all(
            isinstance(x, _COPIED_TYPES) for x in args
        ):  # (mask is None: no other kind of object is the caller's one or its copy)
            return f(*args)
        copies = reads.current().arg_copies  # type: ignore[union-attr]
        reads.identity_unseen(
            "one is a list, tuple or dict argument, which the trace runs on a copy of"
        )
        args = tuple(copies.get(Identity(x), x) for x in args)
    if any(isinstance(x, reads.TracedInt) for x in args):  # an int argument: its object
        ints = [x for x in args if isinstance(x, reads.TracedInt)]
        if (
            f not in (operator.is_, operator.is_not)
            or any(isinstance(x, int) for x in args if not isinstance(x, reads.TracedInt))
            or len(ints) > 1
        ):
            _identity_of_int(ints[0])
        args = tuple(x.value if isinstance(x, reads.TracedInt) else x for x in args)
    if any(map(reads.live, args)):
        if f is operator.is_ or f is operator.is_not:
            return reads.identical(*args) is (f is operator.is_)
        record = reads.current()
        if record is not None:
            record.problems.append(
                f"{reads.user_site()}: asks for the identity of a float ({escapes.describe(f)}), "
                "which eager code may hold as another object than the trace; compare "
                "floats by value (==)"
            )
        args = tuple(map(reads.origin, args))
    reads.identity_asked(*args)  # (a Value argument: guarded to be the trace's)
    if any(map(stands_in, args)):
        if reads.current() is not None:
            _compared(sys._getframe(depth))
        args = tuple(map(_origin, args))
    return f(*args)


def alias_of(v: Value, candidates: tuple[Value, ...]) -> Value:
    """A fresh leaf with ``v``'s value that stands for a gather's pick
    among ``candidates`` (made without ``__init__``: not a constant)."""
    alias = object.__new__(StandIn)
    _picked_slot.__set__(alias, v)
    _data_slot.__set__(alias, _data_slot.__get__(v, Value))
    _grad_slot.__set__(alias, 0.0)
    _depends(alias, candidates, GATHER)
    return alias


def untrace(roots: list[Any], record: Record) -> dict[Any, Any]:
    """Make the graph behind ``roots`` the one ``fn`` builds eagerly, for a
    trace that cannot be captured (its result is then the call's): the
    picks of gathers in place of their aliases, read floats as the leaves
    and plain floats they are. Returns the picks, by alias."""
    from ..value.walk import topological_order

    picks = {}
    for alias, (g, j) in record.aliases.items():
        gather = record.gathers[g]
        entry = gather.candidates[gather.picked]
        picks[alias] = entry[j] if gather.row else entry
    for alias, entry in picks.items():  # a pick of a pick (R[i][j]): the entry itself
        while entry in picks and entry is not alias:
            entry = picks[entry]
        picks[alias] = entry
    roots = [r for r in roots if isinstance(r, Value)]
    if not roots:
        return picks
    holder = object.__new__(Value)
    holder._prev = tuple(roots)
    nodes, leaves = topological_order(holder)
    for v in itertools.chain(nodes[1:], leaves):
        if type(v) is TraceValue:
            v.__class__ = Value
        fn = v._fn
        if fn is RECIPE:
            v._prev = ()
            v._fn = engine.NUMBER
        elif fn is not GATHER:
            if any(p in picks for p in v._prev):
                v._prev = tuple(picks.get(p, p) for p in v._prev)
            if v._local:
                v._local = tuple(map(_plain, v._local))
        try:
            d = _data_slot.__get__(v, Value)
        except AttributeError:  # (del h.data in user code: none, as eagerly)
            continue
        _data_slot.__set__(v, _plain(d))
    return picks


def grad_written(record: Record) -> str | None:
    """Why the trace cannot be replayed when user code wrote ``.grad`` of a
    node it made (``o.grad = 1.0``, a backward pass by hand: the engine's
    operations leave it 0.0, and a replay hands back new nodes), else None.
    (A node's ``_prev``, ``_local`` or ``_fn`` written by hand:
    :func:`parts_written`.)"""
    try:  # (at C speed, making nothing)
        if not any(map(operator.attrgetter("grad"), record.nodes)):
            return None
    except AttributeError:  # (an operation raised before its node had one)
        pass
    if any(getattr(v, "grad", 0.0) != 0.0 for v in record.nodes):
        return (
            "writes .grad of a Value it made (a backward pass by hand?); a replay would "
            "not repeat the write, and hands back new Values: do it outside"
        )
    return None


_prev_slot = Value.__dict__["_prev"]
_local_slot = Value.__dict__["_local"]


def parts_written(record: Record) -> str | None:
    """Why the trace cannot be replayed when a Value it made no longer holds
    the inputs (``_prev``) or local derivatives (``_local``) it was made
    with: written by hand, through Value's own slots too
    (``Value.__dict__["_prev"].__set__(h, ())``, which :func:`_watched`
    cannot see), or a leaf made inside turned into a node (``c._prev =
    (w,)``); a replay would compute it as its operation did."""
    nodes = record.nodes
    try:  # (at C speed; flat lists of what they were made with: one node read at a time)
        rewired = not (
            all(map(operator.is_, map(_prev_slot.__get__, nodes), record.born_inputs))
            and all(map(operator.is_, map(_local_slot.__get__, nodes), record.born_locals))
            and all(map(operator.is_, map(_data_slot.__get__, nodes), record.born_data))
        )
    except AttributeError:  # (an operation raised before its node had them)
        rewired = True
    if rewired:  # (.data through Value's own slot: Value.__dict__["data"].__set__(h, 5.0))
        for v, d in zip(nodes, record.born_data):
            try:
                if _data_slot.__get__(v) is not d:
                    return (
                        f"writes .data of a Value it made ({v._op!r}), through Value's own "
                        "slot; a replay would not repeat the write"
                    )
            except AttributeError:
                pass
    made = zip(nodes, record.born_inputs, record.born_locals) if rewired else ()
    for v, inputs, local in itertools.chain(made, record.leaf_parts):
        now = getattr(v, "_local", local)
        if now is engine._NO_GRAD and not getattr(v, "_prev", ()):
            continue  # (a number made a constant under no_grad(): engine._unusual)
        if now is not local and v._fn.closure is not None:
            continue  # (micrograd's v._backward = closure: capture names it)
        if getattr(v, "_prev", inputs) is not inputs or now is not local:
            return (
                f"sets the inputs or local derivatives of a Value it made ({v._op!r}: _prev, "
                "_local, _fn) by hand; a replay would compute it as its operation did"
            )
    return None


def release(record: Record) -> None:
    """After a trace (captured or not, or raised): the nodes its operations
    made become plain Values. One kept where it outlives the call (a list,
    a cache) is then, to a later trace, a node made outside that trace
    (``capture.MadeOutside``), never one of its own; and no object of the
    trace's class is left in the user's objects."""
    nodes = record.nodes  # (each one user code has not given a class of its own: in C)
    traced = map(operator.is_, map(type, nodes), itertools.repeat(TraceValue))
    collections.deque(
        map(_class_slot.__set__, itertools.compress(nodes, traced), itertools.repeat(Value)),
        maxlen=0,
    )
    for v, local in record.recipe_leaves:  # a leaf again, as eagerly (one kept too)
        if v._fn is RECIPE:  # (not one user code rewired by hand: c._prev = (w,))
            v._prev = ()
            v._local = local
    record.forget()  # (the nodes, their parts as born, the copies...)


def _plain(x: Any) -> Any:
    return float.__float__(x) if type(x) is TracedFloat else x


#: Why a function that runs a backward pass while traced runs eagerly.
BACKWARD_INSIDE = (
    "calls backward() inside the function (a step function?); a replay would not "
    "repeat the backward pass: call it outside, or pass optimizer= to chainrule.compile"
)


class Unsupported(Exception):
    """The traced function does something a replay cannot repeat."""


class TraceValue(_Masked):
    """The class of the nodes an operation makes while a trace runs: the
    engine writes their ``.data`` and ``.grad`` through the plain slots
    (the trace watches writes to the Values that existed before it; user
    code's write to a new node's ``.data`` is a problem, :func:`_write_new`,
    even of the number it holds: ``h.data = abs(h.data)``); reads of
    ``.data`` by user code are followed as for any Value."""

    __slots__ = ()


def _read_new(
    v: Any,
    owner: Any = None,
    get: Any = _data_slot.__get__,
    getframe: Any = sys._getframe,
    internal: frozenset[Any] = _INTERNAL,
) -> Any:
    d = get(v, owner)
    if v is None or getframe(1).f_code.co_filename in internal:
        return d
    record = reads.current()
    return d if record is None else followed(d, v, record)


def _held(x: TracedFloat, record: Record) -> float:
    """The plain float a Value given the traced float ``x`` holds while
    tracing: the object ``x`` stands for, as eagerly (``Value(x).data is
    x``), else a new one, remembered as standing for ``x`` (what an
    operation hands back of it is eagerly ``x`` too: :func:`followed`)."""
    found = getattr(x, "_origin", None)
    if found is not None and reads.live(x) and type(found[0]) is float:
        record.leaf_floats[Identity(found[0])] = found
        return found[0]
    d = float.__float__(x)
    if reads.live(x):
        record.leaf_floats[Identity(d)] = (x, None)
    return d


def followed(d: Any, v: Value, record: Record) -> Any:
    """A node's number ``d`` as user code reads it while tracing: a float
    followed (:func:`~chainrule.compiler.reads.traced`); any other number
    (an int, a NumPy scalar stored in ``.data``) as it is, whose arithmetic
    is its own, not a float's, so the function runs eagerly."""
    if type(d) is float or type(d) is TracedFloat:
        key = Identity(v)
        again = record.data_reads.get(key)
        if again is not None and again[0] is d:  # read again: the same object, as eagerly
            return again[1]
        out = traced(d, ("node", v))
        record.data_reads[key] = (d, out)
        if type(d) is TracedFloat:  # a leaf made from a traced float: that float's object
            found = getattr(d, "_origin", None)
            if found is not None and reads.live(d):
                reads.standing_for(out, *found)
        elif type(v) is StandIn or v in record.aliases:
            reads.standing_for(out, d, None)  # a pick's: asked, the function runs eagerly
        elif record.made_leaves and Identity(v) in record.made_leaves:  # Value(c) in fn
            found = record.leaf_floats.get(Identity(d))  # (Value(x): x's object)
            reads.standing_for(out, *(found or (d, ("const", d))))
        elif not v._prev:
            reads.standing_for(out, d, ("node", v))  # a leaf's .data: that object
        else:
            # an operation's: the engine's own float, which may be an operand's
            # object (relu hands back its input's, max a shared nan): identity
            # asks about it on this call, and the function runs eagerly after
            found = record.leaf_floats.get(Identity(d))
            reads.standing_for(out, d if found is None else found[0], None)
        return out
    t = type(d)
    record.problems.append(
        f"{reads.user_site()}: reads .data that is a {t.__module__}.{t.__qualname__}, whose "
        "arithmetic is not a Python float's: store float(x) in .data (Value(x) does)"
    )
    return d


def _initialised(v: Value, get: Any = _data_slot.__get__) -> bool:
    """Whether ``v``'s ``__init__`` ran already (its number is set)."""
    try:
        get(v, Value)
    except AttributeError:
        return False
    return True


def _by_user_code(what: str, getframe: Any = sys._getframe) -> None:
    """A write or deletion of a new node's ``.data`` by user code (the
    caller's caller not chainrule's): a problem, named at its line."""
    if getframe(2).f_code.co_filename not in _INTERNAL:
        record = reads.current()
        if record is not None:
            record.problems.append(
                f"{reads.user_site(package=True)}: {what} .data of a Value it made; a replay "
                "would not repeat it"
            )


def _write_new(v: Any, x: Any, put: Any = _data_slot.__set__) -> None:
    put(v, x)
    _by_user_code("writes")


def _delete_new(v: Any) -> None:
    _data_slot.__delete__(v)
    _by_user_code("deletes")


as_value(TraceValue)
as_value(StandIn)


def _named(name: str, *accessors: Any) -> property:
    """A property put on Value while tracing, named as eagerly in its
    errors ("property 'label' of 'Value' object has no deleter")."""
    made = property(*accessors)
    made.__set_name__(Value, name)  # type: ignore[attr-defined]
    return made


TraceValue.data = _named(  # type: ignore[misc,assignment]
    "data", _read_new, _write_new, _delete_new
)


TraceValue.grad = _grad_slot  # type: ignore[misc]


def _watched(name: str) -> property:
    """A node's ``_prev`` or ``_local`` while tracing: written by user code
    (``h._prev = set()``, micrograd's way to cut a node off by hand), the
    function runs eagerly: a replay computes the node as traced."""
    slot = Value.__dict__[name]
    setter = protocols.NodeProtocols._fn.fset.__code__  # type: ignore[attr-defined]

    def write(v: Any, x: Any, put: Any = slot.__set__, getframe: Any = sys._getframe) -> None:
        put(v, x)
        caller, written = getframe(1), name
        if caller.f_code is setter:  # (h._fn = P: the setter writes _local)
            caller, written = caller.f_back, "_fn"
        if not caller.f_code.co_filename.startswith(reads.PACKAGE_DIR):
            record = reads.current()
            if record is not None:
                record.problems.append(
                    f"{reads.user_site(package=True)}: writes {written} of a Value it made (its "
                    "inputs or local derivatives); a replay would not"
                )

    return _named(name, slot.__get__, write, slot.__delete__)


TraceValue._prev = _watched("_prev")  # type: ignore[assignment,misc]
TraceValue._local = _watched("_local")  # type: ignore[assignment,misc]


def type_of(x: Any) -> type:
    """``type(x)`` as eagerly, in user code while tracing (a copy's call of
    the builtin ``type``, ``x.__class__``): a node made while tracing and a
    stand-in are Values (a gather picks only among the engine's Values), a
    traced float a float, an int argument an int."""
    t = type(x)
    if t is TraceValue or t is StandIn:
        return Value
    if t is TracedFloat:
        return float
    if issubclass(t, reads.TracedInt):
        return int
    return t


_COPIERS = tuple(m.__file__ for m in (copy, copyreg, pickle) if m.__file__)


def _reduce_ex(self: Value, protocol: Any) -> Any:
    """``pickle``, ``copy.copy`` of a Value while tracing (of a node made
    while tracing at any time): a Value with the plain numbers, as eagerly;
    of a stand-in: the entry it picks (the copy writes ``.data`` of a new
    Value, so the function then runs eagerly)."""
    record = reads.current()
    if record is not None:  # (named before the reads and writes the copy makes)
        site = reads.user_site(package=True, beside=_COPIERS)
        if not site.startswith(reads.PACKAGE_DIR):
            record.problems.append(
                f"{site}: copies or pickles a Value (copy.copy, copy.deepcopy, pickle); a "
                "replay would not make the copy"
            )
    if type(self) is StandIn:
        return _entry(self).__reduce_ex__(protocol)
    reduced: Any = object.__reduce_ex__(self, protocol)
    f, args, *rest = reduced
    if args and args[0] is TraceValue:
        args = (Value, *args[1:])
    if rest and type(rest[0]) is tuple and len(rest[0]) == 2 and type(rest[0][1]) is dict:
        # the slots' state: the numbers the engine holds, plain (as eagerly)
        d, slots = rest[0]
        slots = {k: _plain_deep(x) for k, x in slots.items()}
        rest[0] = (d, slots)
    return (f, args, *rest)


def _sizeof(self: Value) -> int:
    """``v.__sizeof__()``, ``sys.getsizeof(v)``: a Value's, as eagerly."""
    return object.__sizeof__(_entry(self))


def _plain_deep(x: Any) -> Any:
    """``x``, or a tuple of them (``_local``), with every traced float plain."""
    if type(x) is tuple:
        return tuple(map(_plain, x))
    return _plain(x)


# The classes a trace puts in place of the user's show the user's names: in an
# error message (``cannot unpack non-iterable Value object``), ``type(v).__name__``
# (and ``type(v)``, ``v.__class__`` in user code: :func:`type_of`)
for _cls in (TraceValue, StandIn):
    _cls.__reduce_ex__ = _reduce_ex  # type: ignore[method-assign,assignment]
StandIn.__sizeof__ = _sizeof  # type: ignore[method-assign,assignment]
for _cls in (TraceValue, StandIn):
    _cls.__name__ = _cls.__qualname__ = Value.__name__
    _cls.__module__ = Value.__module__
TracedFloat.__name__ = TracedFloat.__qualname__ = float.__name__
TracedFloat.__module__ = float.__module__
# ... and their slots: a Value's (``n.__slots__``), none for a float
TraceValue.__slots__ = Value.__slots__  # type: ignore[assignment]
del TracedFloat.__slots__


@contextmanager
def watching(
    record: Record,
    created: list[Value],
    operators: Callable[[], dict[str, Any]] | None = None,
) -> Iterator[None]:
    """Swap in the watching attributes of Value for the current thread (and
    ``operators()``: Value's methods by name, as the trace runs them,
    :mod:`chainrule.compiler.slotreads`)."""
    slot = Value.__dict__["data"]
    get, put = slot.__get__, slot.__set__
    grad_slot = Value.__dict__["grad"]
    get_grad, put_grad = grad_slot.__get__, grad_slot.__set__
    init = Value.__init__
    init_code = init.__code__
    eager_backward = Value.backward
    as_float = engine._as_float
    saved = {  # None: inherited (from BeyondMicrograd)
        name: Value.__dict__.get(name)
        for name in ("__lt__", "__le__", "__gt__", "__ge__", "__format__", "backward")
        + ("item", "detach", "__repr__", "_local_grads", "__reduce_ex__", "label")
    }
    me = threading.get_ident()
    label = _inherited("label")
    internal = _INTERNAL
    getframe = sys._getframe

    def read(v: Value, owner: Any = None) -> Any:
        d = get(v, owner)
        if v is None or getframe(1).f_code.co_filename in internal or threading.get_ident() != me:
            return d
        return followed(d, v, record)

    def written(v: Value) -> list[Value]:
        """What a user's write to ``v`` reaches, as eagerly: the entry a
        stand-in picks, and every stand-in that picks it (the traced run
        reads them after the write)."""
        entry = _entry(v)
        return [entry, *(a for a in record.aliases if _entry(a) is entry)]

    def write(v: Value, x: Any) -> None:
        if type(x) is TracedFloat:
            x = _held(x, record)
        if getframe(1).f_code.co_filename not in internal and threading.get_ident() == me:
            record.problems.append(
                f"{reads.user_site(package=True)}: writes .data of a Value; a replay would not "
                "repeat the write"
            )
            for target in written(v):
                put(target, x)
            return
        put(v, x)

    def delete(slot_of: Any, what: str) -> Callable[[Value], None]:
        def delete_attribute(v: Value) -> None:
            if getframe(1).f_code.co_filename not in internal and threading.get_ident() == me:
                record.problems.append(
                    f"{reads.user_site(package=True)}: deletes {what} of a Value; a replay would "
                    "not repeat it"
                )
                for target in written(v):
                    slot_of.__delete__(target)
                return
            slot_of.__delete__(v)

        return delete_attribute

    def read_grad(v: Value, owner: Any = None) -> Any:
        g = get_grad(v, owner)
        if (
            v is not None
            and getframe(1).f_code.co_filename not in internal
            and threading.get_ident() == me
        ):
            record.problems.append(
                f"{reads.user_site()}: reads .grad of a Value; a replay would use the number "
                "it had while tracing: pass it to the function as an argument"
            )
            if type(v) is StandIn:
                return get_grad(_entry(v))
        return g

    def write_grad(v: Value, g: Any) -> None:
        code = getframe(1).f_code
        if threading.get_ident() == me:
            if code.co_filename not in internal:
                record.problems.append(f"{reads.user_site(package=True)}: {WRITES_GRAD}")
                for target in written(v):
                    put_grad(target, g)
                return
            if code is not init_code and not backward_noted:
                # the engine's backward pass (not a new Value's 0.0): noted once
                note_backward(reads.user_site())
        put_grad(v, g)

    backward_noted = False

    def note_backward(site: str) -> None:
        nonlocal backward_noted
        backward_noted = True
        record.problems.append(f"{site}: {BACKWARD_INSIDE}")

    def backward(self: Value, *args: Any, **kwargs: Any) -> None:
        if threading.get_ident() == me:
            note_backward(reads.user_site())
            # the function runs eagerly from now on, and this call's result is
            # the trace's own: its backward pass runs on the eager graph (the
            # picks in place of their stand-ins)
            untrace([self], record)
        eager_backward(self, *args, **kwargs)

    def before_walk(root: Any) -> None:
        """A graph walk the user's code asks for (``gradients()``, ``explain``,
        ``topological_order``) walks the graph ``fn`` builds eagerly: the
        picks in place of their stand-ins, read floats as the leaves they
        are; and the function runs eagerly (the traced run's result is the
        call's, so the walk must be eager's)."""
        if threading.get_ident() != me or _reader(getframe(2)) is None:
            return  # compile's own walk (untrace), or another thread's
        record.problems.append(
            f"{reads.user_site(package=True)}: walks the graph inside the function (gradients(), "
            "explain...); a replay would not walk it again"
        )
        untrace([root], record)

    def before_draw(what: str) -> None:
        """chainrule draws random numbers (``nn.Neuron``'s weights) inside the
        function, even from code compile runs as it is: the traced run
        draws them for real (eager's numbers), a replay would reuse them."""
        if threading.get_ident() == me:
            record.problems.append(
                f"{reads.user_site(package=True)}: draws {what}, which change from call to "
                "call; a replay would reuse its traced ones"
            )

    def read_leaf(v: Value, x: Any) -> None:
        """A leaf made from a read float: recomputed at each replay."""
        record.leaf_recipes[v] = x.recipe
        on = tuple(dict.fromkeys(reads.recipe_nodes(x.recipe, [])))
        if on:
            record.recipe_leaves.append((v, v._local))  # (put back: release)
            _depends(v, on, RECIPE)
            if record.nodes and record.nodes[-1] is v:  # (a number operand's: as made now)
                record.born_inputs[-1], record.born_locals[-1] = v._prev, v._local

    state_now = mode.state.get
    made = record.nodes.append
    born_inputs, born_locals = record.born_inputs.append, record.born_locals.append
    born_data = record.born_data.append
    operator_node = engine._OPERATOR
    set_class, ident, live = _class_slot.__set__, threading.get_ident, reads.live
    put_data, put_grad = _data_slot.__set__, _grad_slot.__set__
    put_prev, put_local = _prev_slot.__set__, _local_slot.__set__
    note_created = created.append

    def new_init(self: Value, data: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) == 3 and args[2] is operator_node:  # an operator's node
            if ident() != me:
                init(self, data, *args)
                return
            # (Value.__init__'s operator case, its four slots set through the
            # slots themselves, not the watched properties user code's writes
            # go through: then of the trace's class)
            # (a number operand's leaf: a constant of the trace, or one
            # recomputed at each replay when it is a read float)
            data_now = _held(data, record) if type(data) is TracedFloat else data
            put_data(self, data_now)
            put_grad(self, 0.0)
            put_prev(self, args[0])
            put_local(self, args[1])
            set_class(self, TraceValue)
            made(self)
            born_inputs(args[0])
            born_locals(args[1])
            born_data(data_now)
            recording = state_now()  # (None: a graph is recorded, the common case)
            if recording is not None:
                _unusual_recording(recording, args[0], record)
        else:
            if ident() == me and _initialised(self):  # v.__init__(x): a reset by hand
                record.problems.append(
                    f"{reads.user_site(package=True)}: calls __init__ of a Value that exists "
                    "(its number, gradient and inputs set anew); a replay would not"
                )
            init(self, data, *args, **kwargs)
            if ident() != me:
                return
            record.made_leaves.add(Identity(self))
        note_created(self)
        if type(data) is TracedFloat and live(data) and not self._prev:
            read_leaf(self, data)
        if type(self) is not TraceValue:  # a leaf made inside (Value(x)): as made now
            record.leaf_parts.append((self, _prev_slot.__get__(self), _local_slot.__get__(self)))

    def keep_read(x: object, op: str) -> float:
        if reads.live(x) and threading.get_ident() == me:
            record.consumed[Identity(x)] = (x, reads.user_site(package=True))
            return x
        if isinstance(x, reads.TracedInt):  # an int argument: this value (eager's errors)
            return as_float(int(x), op)  # type: ignore[call-overload]
        return as_float(x, op)

    def user_read(v: Any) -> Any:
        if not isinstance(v, Value):
            return v
        return followed(get(v), v, record) if threading.get_ident() == me else get(v)

    def item(self: Value) -> Any:
        """``v.item()``: ``v.data`` as user code reads it (followed)."""
        return user_read(self)

    def detach(self: Value) -> Value:
        """``v.detach()``: a leaf made from the read float, recomputed from
        ``v`` at each replay and cut off from the graph (``read_leaf``)."""
        return Value(user_read(self))

    def show(self: Value) -> str:
        """``repr(v)``, ``str(v)``: its number read whole (a guard) and its
        ``.grad`` read as user code reads it (a parameter's: refused)."""
        return f"Value(data={user_read(self)}, grad={self.grad})"

    def local_grads(self: Value) -> tuple[Any, ...]:
        """microgpt's ``_local_grads``: the engine's floats, computed from the
        inputs' data, which a replay would not recompute for user code."""
        if threading.get_ident() == me:
            record.problems.append(
                f"{reads.user_site()}: reads _local_grads of a Value; a replay would use "
                "the numbers it had while tracing"
            )
        return eager_local_grads.__get__(self)

    eager_local_grads = Value._local_grads

    def compare(f: Callable[[Any, Any], bool], op: str) -> Callable[[Value, Any], bool]:
        # eager's: the other operand a Value's number, or a number taken in as
        # the engine takes it (as_float: np.float32 widened, a Decimal refused)
        def method(self: Value, other: Any) -> bool:
            theirs = user_read(other) if isinstance(other, Value) else keep_read(other, op)
            return f(user_read(self), theirs)

        return method

    truediv, rtruediv = Value.__truediv__, Value.__rtruediv__
    saved["__truediv__"], saved["__rtruediv__"] = truediv, rtruediv

    def node_recipe(x: Any) -> Any:
        return ("node", x) if isinstance(x, Value) else reads.recipe_of(x)

    def guarded_truediv(self: Value, other: Any) -> Value:
        # the engine picks micrograd's a * b**-1 or one true division by the values
        if threading.get_ident() == me and isinstance(other, (Value, int, float)):
            try:
                b = get(other) if isinstance(other, Value) else float(reads.plain(other))
            except OverflowError:  # an int beyond 1.8e308: eager's error
                return truediv(self, other)
            record.guards.append(
                (
                    engine._reciprocal_is_exact,
                    ("node", self),
                    node_recipe(other),
                    engine._reciprocal_is_exact(get(self), b),
                )
            )
        return truediv(self, other)

    def guarded_rtruediv(self: Value, other: Any) -> Value:
        if threading.get_ident() == me and isinstance(other, (int, float)):
            try:
                a = float(reads.plain(other))
            except OverflowError:  # an int beyond 1.8e308: eager's error
                return rtruediv(self, other)
            record.guards.append(
                (
                    engine._reciprocal_is_exact,
                    reads.recipe_of(other),
                    ("node", self),
                    engine._reciprocal_is_exact(a, get(self)),
                )
            )
        return rtruediv(self, other)

    def primitive_raised(fn: Primitive) -> None:
        if threading.get_ident() == me:
            whose = "chainrule's" if is_own(fn) else "of yours"
            record.problems.append(
                f"{reads.user_site(package=True)}: {fn.name!r}, a Primitive {whose}, raises "
                "(caught in the function, it goes on: a replay would not know for which "
                "inputs it raises)"
            )

    fast = {} if operators is None else operators()
    try:  # (the swaps inside, their names sources.SWAPPED: an interrupt is undone too)
        Value.__truediv__ = guarded_truediv  # type: ignore[method-assign]
        Value.__rtruediv__ = guarded_rtruediv  # type: ignore[method-assign]

        def read_label(v: Value) -> str:
            if (
                getframe(1).f_code.co_filename not in internal
                and threading.get_ident() == me
                and type(v) is not TraceValue
                and Identity(v) not in record.made_leaves
            ):
                record.problems.append(
                    f"{reads.user_site(package=True)}: reads .label of a Value made before the "
                    "call; a replay would not read it again"
                )
            return label.fget(v)

        def write_label(v: Value, name: str) -> None:
            if getframe(1).f_code.co_filename not in internal and threading.get_ident() == me:
                record.problems.append(
                    f"{reads.user_site(package=True)}: writes .label of a Value; a replay would "
                    "not repeat the write (and hands back new Values)"
                )
            label.fset(v, name)

        Value.label = _named("label", read_label, write_label)  # type: ignore[method-assign,assignment]
        Value.data = _named("data", read, write, delete(slot, ".data"))  # type: ignore[misc,assignment]
        Value.grad = _named("grad", read_grad, write_grad, delete(grad_slot, ".grad"))  # type: ignore[misc]
        Value.__init__ = new_init  # type: ignore[method-assign]
        Value.backward = backward  # type: ignore[method-assign]
        Value.__lt__ = compare(operator.lt, "<")  # type: ignore[method-assign,assignment]
        Value.__le__ = compare(operator.le, "<=")  # type: ignore[method-assign,assignment]
        Value.__gt__ = compare(operator.gt, ">")  # type: ignore[method-assign,assignment]
        Value.__ge__ = compare(operator.ge, ">=")  # type: ignore[method-assign,assignment]
        Value.__format__ = lambda self, spec: format(user_read(self), spec)  # type: ignore[method-assign]
        Value.item = item  # type: ignore[method-assign,assignment]
        Value.detach = detach  # type: ignore[method-assign,assignment]
        Value.__repr__ = show  # type: ignore[method-assign]
        Value._local_grads = _named("_local_grads", local_grads)  # type: ignore[method-assign,assignment]
        Value.__reduce_ex__ = _reduce_ex  # type: ignore[method-assign,assignment]
        engine._as_float = beyond_micrograd.as_float = protocols.as_float = keep_read
        walk.before_walk = before_walk
        random_state.before_draw = before_draw
        functions.raised = primitive_raised
        for name, method in fast.items():
            setattr(Value, name, method)
        reads.set_current(record)
        yield
    finally:
        for name in fast:  # (one the function patched meanwhile: its own, as eagerly)
            if Value.__dict__.get(name) is fast[name]:
                setattr(Value, name, STANDS_FOR[fast[name]])
        reads.set_current(None)
        HANDED.clear()
        record.iterators.clear()  # (each held by its Identity while the trace ran)
        record.reduced.clear()
        record.compared = None
        engine._as_float = beyond_micrograd.as_float = protocols.as_float = as_float
        walk.before_walk = None
        random_state.before_draw = None
        functions.raised = None
        for name, attr in saved.items():
            if attr is None:
                if name in Value.__dict__:  # (not set where an interrupt came first)
                    delattr(Value, name)
            else:
                setattr(Value, name, attr)
        Value.__init__ = init  # type: ignore[method-assign]
        Value.data = slot  # type: ignore[misc]
        Value.grad = grad_slot  # type: ignore[misc]


#: Source files whose C calls are compile's own (not the user's reading a float).
_OURS = _INTERNAL | frozenset(
    os.path.join(os.path.dirname(__file__), f"{name}.py")
    for name in [
        "__init__",
        "budget",
        "capture",
        "dispatch",
        "escapes",
        "keys",
        "program",
        "reads",
        "rewrite",
        "rules",
        "sources",
        "step",
        "symbolic",
        "trace",
    ]
)


def _unusual_recording(recording: Any, has_inputs: Any, record: Record) -> None:
    """A node made while the thread is not simply recording: under
    ``no_grad()`` it is a constant whose value a replay would reuse; under
    ``detect_anomaly()`` the detector checks it, which a replay would not
    (a nan there would be silent): the function runs eagerly."""
    if not recording.grad_enabled and has_inputs:
        record.problems.append(
            f"{reads.user_site()}: computes a Value under no_grad() inside the "
            "function; a replay would reuse its traced value"
        )
    if recording.observer is not None and not record.problems:  # (one per trace: slow mode)
        record.problems.append(
            f"{reads.user_site()}: computes a Value under detect_anomaly() inside the "
            "function; a replay would not check its operations"
        )


def run_traced(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    record: Record,
    floats: bool = False,
    relay: frozenset[Any] = frozenset(),
    hands_on: Callable[[Any], bool] | None = None,
    operators: Callable[[], dict[str, Any]] | None = None,
) -> tuple[Any, list[Value], float, str | None]:
    """``fn(*args)`` under watch: its result, the Values it made, the
    seconds it ran (without waiting for another thread's trace) and, with
    ``floats`` (float arguments among ``args``), the first C function that
    may have read one whole (:mod:`chainrule.compiler.escapes`; ``relay``:
    compile's code that calls C functions on the user's behalf, as the
    rewritten copies' ``_call``; ``hands_on``: the C functions that only
    hand items to functions the relay calls, see
    :class:`~chainrule.compiler.escapes.CCalls`; ``operators``: see
    :func:`watching`)."""
    created: list[Value] = []
    with _lock, watching(record, created, operators):
        calls = escapes.CCalls(_OURS, run_traced.__code__, relay, hands_on) if floats else None
        start = time.perf_counter()
        if calls is None:
            out = fn(*args)
        else:
            with calls:
                out = fn(*args)
        seconds = time.perf_counter() - start
    return out, created, seconds, None if calls is None else calls.first
