"""The cache key of a call: what about the arguments may change the graph.

The arguments are flattened (tuples, lists and dicts, named tuples,
``OrderedDict`` and ``defaultdict``: their types, lengths and keys are
part of the key; keyword arguments as a dict after the positional ones)
and every item is one of:

* an **input**, read at every replay and never part of the key: a float
  (NumPy's ``float64`` scalars, which are floats, included) or a leaf
  Value;
* an **int** (NumPy integers and bools excluded): only its type is in the
  key; its value is recorded while tracing, see
  :mod:`chainrule.compiler.symbolic`, and the programs traced for one key
  say which int values they hold for;
* a **value** in the key: bools, strings, bytes, None, NumPy scalars of
  another kind (``float32``, integers, ``bool_``) and 0-d or small arrays,
  by their type and value (their bytes, so ``nan`` equals ``nan`` and
  ``-0.0`` differs from ``0.0``);
* anything else, by its **identity**: the key holds the object itself, so
  its ``id()`` cannot be reused by another object while the trace is kept
  (what a trace reads through it is guarded before every replay, as
  globals are: :mod:`chainrule.compiler.sources`).

Which leaf Values are the same object is part of the key when one Value
is passed for several arguments (``f(v, v)`` and ``f(v, u)`` are two graphs).
"""

from __future__ import annotations

import struct
import sys
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from ..value.engine import Value

#: NumPy arrays up to this many bytes are keyed by their contents; larger
#: ones by identity.
ARRAY_KEY_BYTES = 1 << 16


class NotReplayable(Exception):
    """An argument that compile cannot key (the message says which)."""


class Identity:
    """A key part that compares by identity and keeps its object alive."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return type(other) is Identity and other.obj is self.obj

    def __repr__(self) -> str:
        return f"{type(self.obj).__name__} object"


@dataclass
class Call:
    """One call's arguments, sorted: the key and the inputs of a replay."""

    key: tuple[Any, ...]
    values: list[Value] = field(default_factory=list)  # leaf Values among the arguments
    floats: list[float] = field(default_factory=list)  # float inputs, in order
    ints: list[int] = field(default_factory=list)  # ints, in order
    # the objects keyed by identity: what a trace reads through them is
    # guarded (chainrule.compiler.sources, compile's argument guard)
    objects: tuple[Any, ...] = ()
    # a replay's gathers: step -> its picks (keyed by the step itself: a
    # retrace makes new steps, which never match an old one's entry)
    picks: dict[Any, Any] = field(default_factory=dict)


def _users(t: type) -> bool:
    """Whether ``t`` is not one of chainrule's own classes."""
    return not t.__module__.startswith("chainrule.")


def declared_slots(classes: Iterable[type]) -> tuple[str, ...]:
    """The attribute names of the ``__slots__`` of ``classes`` (a string
    alone is one name; a private ``__x`` as Python mangles it, ``_C__x``),
    without ``__dict__`` and ``__weakref__``, which hold no data."""
    out = []
    for klass in classes:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                out.append(_mangled(klass, name))
    return tuple(out)


def _mangled(klass: type, name: str) -> str:
    """``name`` as stored on ``klass``'s objects: Python's private-name
    mangling of ``__x`` (not ``__x__``) to ``_Klass__x``."""
    owner = klass.__name__.lstrip("_")
    if name.startswith("__") and not name.endswith("__") and owner:
        return f"_{owner}{name}"
    return name


#: Per user's subclass of Value, the slots its own classes declare.
_OWN_SLOTS: dict[type, tuple[str, ...]] = {}


def own_slots(t: type) -> tuple[str, ...]:
    """The ``__slots__`` that the user's classes among ``t``'s bases declare
    (``class Param(Value): __slots__ = ("scale",)``), not Value's own
    ``data``, ``grad``...: a Value's settings, which its number is not."""
    names = _OWN_SLOTS.get(t)
    if names is None:
        names = _OWN_SLOTS[t] = declared_slots(k for k in t.__mro__ if _users(k))
    return names


def _own_attributes(x: Value, t: type) -> bool:
    """Whether a Value of the user's subclass ``t`` holds attributes of its
    own: in its ``__dict__`` or in a slot its classes declare (set)."""
    if getattr(x, "__dict__", None):
        return True
    return any(getattr(x, name, _UNSET) is not _UNSET for name in own_slots(t))


_UNSET = object()


def classify(items: list[Any], shape: Any = None, symbolic_ints: bool = True) -> Call:
    """The key of a call whose flattened arguments are ``items``, nested as
    ``shape`` says (see :func:`flatten`); with ``symbolic_ints`` False, ints
    and floats are keyed by their value (the function sees them as they are)."""
    call = Call(())
    if symbolic_ints and all(type(x) is float for x in items):  # only numbers: inputs
        call.key = (shape, *[float] * len(items))
        call.floats = list(items)
        return call
    key: list[Any] = [shape]
    whole: list[float] = []  # the floats keyed by value
    numpy = sys.modules.get("numpy")
    for x in items:
        t = type(x)
        if t is float:
            if symbolic_ints:
                key.append(float)
                call.floats.append(x)
            else:  # by value, bit for bit (-0.0 is not 0.0), and which are one object
                key.append((float, struct.pack("<d", x)))
                whole.append(x)
        elif t is int:
            if symbolic_ints:
                key.append(int)
                call.ints.append(x)
            else:
                key.append((int, x))
        elif t is bool or t is str or t is bytes or x is None:
            key.append((t, x))
        elif isinstance(x, Value):
            if x._prev:
                raise NotReplayable(
                    "an argument is a Value computed by other operations; pass leaves "
                    "(parameters, inputs) and build the rest inside the function"
                )
            if t is not Value and _users(t) and _own_attributes(x, t):
                raise NotReplayable(
                    f"an argument is a {t.__name__} (a Value of your subclass) with attributes "
                    "of its own, which a replay would not read again; pass them as arguments"
                )
            key.append(t)  # (its class: v.__class__ = Param between calls)
            call.values.append(x)
        elif numpy is not None and isinstance(x, (numpy.generic, numpy.ndarray)):
            key.append(_numpy_key(x, numpy))  # float64 too: NumPy reads it whole
        else:
            key.append((t, Identity(x)))
            call.objects += (x,)
    if len(whole) > 1 and len(set(map(id, whole))) < len(whole):
        key.append((_SAME_FLOAT, identities(whole)))
    values = call.values
    if len(values) > 1 and len(set(map(id, values))) < len(values):
        # one Value passed for several arguments: which ones are the same
        key.append((_SAME, identities(values)))
    call.key = tuple(key)
    return call


#: The key parts that say which Value arguments, and which floats keyed by
#: their value, are the same object.
_SAME = "the same Value for several arguments"
_SAME_FLOAT = "the same float for several arguments"


def identities(objects: list[Any]) -> tuple[int, ...]:
    """Which of ``objects`` are one object: for each, the first position
    that holds it."""
    first: dict[int, int] = {}
    return tuple([first.setdefault(id(x), k) for k, x in enumerate(objects)])


def flatten(
    tree: Any, whole: Container[Identity] = ()
) -> tuple[list[Any], Callable[[list[Any]], Any], Any]:
    """The items of a nest of tuples, lists and dicts (named tuples,
    ``OrderedDict`` and ``defaultdict`` too, rebuilt as their own type), the
    function that rebuilds the nest from new items, and the nest's shape
    (types, lengths, dict keys) as a hashable value. Another subclass of
    list, tuple or dict raises :class:`NotReplayable` (its constructor and
    attributes are its own). A container in ``whole`` (by identity) is an
    item itself (a trace's output that existed before the call)."""
    items: list[Any] = []

    def walk(x: Any) -> tuple[Callable[[Any], Any], Any]:
        if not isinstance(x, _CONTAINERS) or (whole and Identity(x) in whole):
            items.append(x)
            return _LEAF
        kind = type(x)
        if kind is list or kind is tuple:
            if x and all(type(y) is float for y in x):  # a row of numbers, in one step
                items.extend(x)
                n = len(x)
                return (lambda it: kind(islice(it, n))), (kind, (None,) * n)
            parts = [walk(y) for y in x]
            makers = [p for p, _ in parts]
            return (lambda it: kind(p(it) for p in makers)), (kind, tuple(s for _, s in parts))
        if kind is dict:
            keys = list(x)
            parts = [walk(x[k]) for k in keys]
            makers = [p for p, _ in parts]
            shape = (dict, dict_keys(keys), tuple(s for _, s in parts))
            return (lambda it: {k: p(it) for k, p in zip(keys, makers)}), shape
        return _other(x, walk)

    try:
        rebuild, shape = walk(tree)
    finally:  # a recursive closure is a reference cycle (holding the items): break it
        walk = None  # type: ignore[assignment]
    return items, lambda new: rebuild(iter(new)), shape


def _other(x: Any, walk: Callable[[Any], Any]) -> tuple[Callable[[Any], Any], Any]:
    """:func:`flatten`'s maker and shape of a named tuple, an ``OrderedDict``
    or a ``defaultdict`` (``walk``: of their entries); another subclass of
    tuple, list or dict raises :class:`NotReplayable`."""
    kind: Any = type(x)
    if kind is OrderedDict or kind is defaultdict:
        keys = list(x)
        parts = [walk(x[k]) for k in keys]
        makers = [p for p, _ in parts]
        shapes = tuple(s for _, s in parts)
        if kind is OrderedDict:
            return (lambda it: OrderedDict([(k, p(it)) for k, p in zip(keys, makers)])), (
                kind,
                dict_keys(keys),
                shapes,
            )
        factory = x.default_factory
        return (lambda it: defaultdict(factory, [(k, p(it)) for k, p in zip(keys, makers)])), (
            kind,
            Identity(factory),
            dict_keys(keys),
            shapes,
        )
    if isinstance(x, tuple) and _is_named_tuple(kind):
        parts = [walk(y) for y in x]
        makers = [p for p, _ in parts]
        make = kind._make
        return (lambda it: make([p(it) for p in makers])), (kind, tuple(s for _, s in parts))
    base = next(b for b in _CONTAINERS if isinstance(x, b)).__name__
    raise NotReplayable(
        f"a {kind.__name__} (a subclass of {base}) is among its arguments or results: "
        "compile rebuilds only lists, tuples, dicts, named tuples, OrderedDict and "
        "defaultdict"
    )


def dict_keys(keys: list[Any]) -> tuple[Any, ...]:
    """A dict's keys as a part of a key: by type and value, not by ``==``
    (``0.0`` and ``-0.0``, ``1``, ``True`` and ``1.0`` are other graphs)."""
    return tuple(map(_dict_key, keys))


def _dict_key(k: Any) -> Any:
    """One dict key by its type and value (a float bit for bit, a tuple by
    its items), or, for another object, by identity (an equal but other
    object may give another graph: a dataclass's ``compare=False`` field)."""
    t = type(k)
    if t is str or t is int or t is bool or t is bytes or k is None:
        return (t, k)
    if t is float:
        return (t, struct.pack("<d", k))
    if t is tuple:
        return (t, tuple(map(_dict_key, k)))
    return Identity(k)


def _is_named_tuple(kind: type) -> bool:
    """A ``collections.namedtuple`` or ``typing.NamedTuple`` class."""
    return isinstance(getattr(kind, "_fields", None), tuple) and hasattr(kind, "_make")


#: The types (and subclasses) :func:`flatten` enters.
_CONTAINERS = (tuple, list, dict)
#: An item's maker and shape in :func:`flatten` (the next new item, as it is).
_LEAF: tuple[Callable[[Any], Any], Any] = (next, None)


def _numpy_key(x: Any, numpy: Any) -> Any:
    if isinstance(x, numpy.ndarray) and x.nbytes > ARRAY_KEY_BYTES:
        return (type(x), Identity(x))
    if x.dtype.hasobject:
        return (type(x), Identity(x))
    if isinstance(x, numpy.ndarray):  # (what code may read of it besides its numbers:
        # its strides, whether it owns its memory, is writeable, contiguous)
        return (type(x), x.dtype.str, x.shape, x.strides, x.flags.num, x.tobytes())
    return (type(x), x.dtype.str, x.shape, x.tobytes())


def describe(a: tuple[Any, ...], b: tuple[Any, ...], why: list[str] | None = None) -> str:
    """What differs between two keys, in words (for the fallback warning);
    ``why``: how the last trace used its arguments, when the keys agree."""
    if a[0] == b[0] and len(a) != len(b):
        return "the same Value is passed for several arguments in one call and not the other"
    if a[0][0] is not b[0][0]:
        return "keyword arguments are passed in one call and not the other"
    if a[0] != b[0] or len(a) != len(b):
        shapes_a, shapes_b = a[0][1], b[0][1]  # per argument (a list of the arguments)
        for k, (x, y) in enumerate(zip(shapes_a, shapes_b)):
            if x != y:
                return f"argument {k + 1}'s length or dict keys change ({_nest(x)} to {_nest(y)})"
        return "the number of arguments changes"
    for x, y in zip(a[1:], b[1:]):
        if x != y:
            shown, other = _show(x), _show(y)
            if shown == other and shown.startswith("a "):  # ("a MLP object": one to another)
                return f"an argument changes from one {shown.partition(' ')[2]} to another"
            return f"an argument changes from {shown} to {other}"
    if why:
        return "; ".join(why)
    return "a value read from .data decides the graph (a guard went the other way)"


def _nest(shape: Any) -> str:
    if shape is None:
        return "a number"
    kind = getattr(shape[0], "__name__", str(shape[0]))
    return f"a {kind} of {len(shape[-1])}"


def _show(part: Any) -> str:
    if not isinstance(part, tuple):
        return getattr(part, "__name__", repr(part))
    name = getattr(part[0], "__name__", repr(part[0]))
    if len(part) == 2 and isinstance(part[1], Identity):
        return f"a {name} object"
    if len(part) == 2:
        return f"{name} {part[1]!r:.40}"
    return f"a {name}"
