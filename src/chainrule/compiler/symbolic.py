"""Int arguments while tracing: what their values decide, and what they only pick.

microgpt's loss reads ``state_dict['wte'][token_id]`` and
``probs[target_id]``: the ints of the name pick which row of a parameter
table, which entry of a list of nodes, the graph reads, and nothing else.
One trace serves every name of a length when those picks are replayed as
*gathers* on arrays.

While tracing, each int among the arguments is a :class:`SymInt`: it
behaves as its value and records what user code does with it.

* ``container[i]`` on a ``list`` whose entries are Values, or rows (lists
  or tuples of the same length) of Values, is a **gather**: the entry
  handed back is an *alias* (a fresh leaf Value per Value of the entry)
  that stands for "entry ``i`` of this list", and a replay reads the entry
  that the new value of ``i`` picks (:class:`Gather`). The trace runs
  copies of the user's functions in which a subscript of a list by an int
  argument calls :func:`gather` (:mod:`chainrule.compiler.rewrite`): the
  alias is handed back to the copy, never stored in the list, so no other code or
  thread can meet it there.
* arithmetic with ints gives another SymInt (``tokens[pos + 1]`` stays
  symbolic), with floats a traced float (a constant recomputed at replay);
* a comparison or ``bool`` is a **guard**: a replay whose ints would
  compare the other way traces again;
* anything else (``range(i)``, a dict key, ``float(i)``, a subscript of a
  tuple, a NumPy array or a list of other things, a subscript inside a
  function that compile cannot copy: no source, a file edited since
  import, ``super()``) **pins** the value: the trace holds for that value only,
  and another value traces again. Never a stale number: what compile cannot
  follow is specialised, not guessed.

``isinstance(i, int)`` is true of a SymInt (its ``__class__`` says
``int``); ``type(i) is int`` is not.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..value.engine import Value
from . import reads
from .keys import Identity
from .reads import Record, TracedFloat, TracedInt, traced
from .trace import HANDED, StandIn, TraceValue, alias_of

#: The classes of the Values a gather picks among: the engine's, a node
#: made while tracing, a pick (``[W[i], W[j]][k]``).
ENGINE_VALUES = frozenset((Value, TraceValue, StandIn))


@dataclass
class Gather:
    """One ``container[i]`` of a trace: the entries it may pick (snapshot
    of the list at that moment), the recipe of ``i``, and the aliases that
    stand for the picked entry (one per Value of a row)."""

    candidates: list[Any]  # Values, or rows (tuples) of Values
    index: Any  # recipe of the int
    aliases: list[Value] = field(default_factory=list)
    row: bool = False  # entries are rows
    picked: int = 0  # the entry picked while tracing
    rows: dict[int, Any] = field(default_factory=dict)  # the row handed back, as its list
    # the list's own rows (the objects), for eager's row where the one handed back is not
    origins: list[Any] = field(default_factory=list)

    def pick(self, i: int) -> int | None:
        """The entry that ``i`` picks, as the list would (negative from the
        end), or None where the list would raise IndexError."""
        n = len(self.candidates)
        if -n <= i < n:
            return i % n
        return None


#: How an int argument was used as a number, for the messages.
_AS_NUMBER = "range(i), a dict key, float(i), a subscript other than a list of Values"
_AS_INDEX = (
    "an index or slice bound: xs[i:i + n], a subscript other than a list of Values, range(i)"
)


class SymInt(TracedInt):
    """An int argument while its function is traced (see the module)."""

    __slots__ = ()

    def __init__(self, value: int, recipe: Any, record: Record) -> None:
        self.value = value
        self.recipe = recipe
        self.record = record

    # -- what cannot be followed pins the value ------------------------------

    def _pin(self, how: str = _AS_NUMBER) -> int:
        if self.record is reads.current():
            self.record.int_guards.append((operator.eq, self.recipe, self.value, True))
            pins = self.record.pins
            if len(pins) < 3:
                said = any(how in p for p in pins)
                pins.append(
                    f"an int argument is used as the number {self.value} at {reads.user_site()}"
                    + ("" if said else f" ({how})")
                )
        return self.value

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return int

    def __index__(self) -> int:
        if self.record is not reads.current():
            return self.value
        return self._pin(_AS_INDEX)

    def __int__(self) -> int:
        return self._pin()

    def __float__(self) -> float:
        return float(self._pin())

    def __hash__(self) -> int:
        return hash(self._pin())

    def __repr__(self) -> str:
        return repr(self._pin())

    def __str__(self) -> str:
        return str(self._pin())

    def __format__(self, spec: str) -> str:
        return format(self._pin(), spec)

    def __round__(self, n: Any = None) -> Any:
        return round(self._pin(), n)

    def __trunc__(self) -> int:
        return self._pin()

    def __floor__(self) -> int:
        return self._pin()

    def __ceil__(self) -> int:
        return self._pin()

    def __reduce__(self) -> Any:
        return (int, (self._pin(),))

    def __copy__(self) -> int:
        return self._pin()

    def __deepcopy__(self, memo: Any) -> int:
        return self._pin()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pin(), name)

    def __sizeof__(self) -> int:
        return self._pin().__sizeof__()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self._pin().__reduce_ex__(protocol)

    def __bool__(self) -> bool:
        result = self.value != 0
        if self.record is reads.current():
            self.record.int_guards.append((operator.ne, self.recipe, 0, result))
        return result


# an int to user code: its name in error messages (``'int' object is not
# callable``), and no ``__slots__``
SymInt.__name__ = SymInt.__qualname__ = int.__name__
SymInt.__module__ = int.__module__
del SymInt.__slots__, TracedInt.__slots__


def _operand(x: Any) -> tuple[bool, Any, Any]:
    """(followable, value, recipe) of an operand of SymInt arithmetic."""
    t = type(x)
    if t is SymInt:
        return x.record is reads.current(), x.value, x.recipe
    if t is int or t is bool or t is float:
        return True, x, x
    if t is TracedFloat:
        return True, float.__float__(x), x.recipe
    return False, x, x


def _result(self: SymInt, y: Any, recipe: Any, *operands: Any) -> Any:
    if type(y) is int:
        return SymInt(y, recipe, self.record)
    if type(y) is float:
        return traced(y, recipe)
    reads.pin(*operands)  # (``i ** 0.5`` for ``i < 0``: a complex) holds for their values
    return y


def _apply(self: SymInt, f: Callable[[Any, Any], Any], a: Any, b: Any, recipe: Any) -> Any:
    """``f(a, b)`` followed; an error (``1.0 / i`` at 0, caught) holds the
    trace to the operands' values (:func:`~chainrule.compiler.reads.pin`)."""
    try:
        y = f(reads.plain(a), reads.plain(b))
    except BaseException:
        reads.pin(a, b)
        raise
    return _result(self, y, recipe, a, b)


def _plain(x: Any) -> Any:
    return x.value if type(x) is SymInt else x


def _binary(f: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def forward(self: SymInt, other: Any) -> Any:
        if self.record is not reads.current():
            return f(self.value, _plain(other))
        ok, _, rb = _operand(other)
        if not ok:  # a Value, a string ...: this value only
            return f(self._pin(), other)
        return _apply(self, f, self, other, ("op", f, self.recipe, rb))

    def reflected(self: SymInt, other: Any) -> Any:
        if self.record is not reads.current():
            return f(_plain(other), self.value)
        ok, _, ra = _operand(other)
        if not ok:
            return f(other, self._pin())
        return _apply(self, f, other, self, ("op", f, ra, self.recipe))

    return forward, reflected


for _name, _f in [
    *reads.ARITHMETIC,
    ("lshift", operator.lshift),
    ("rshift", operator.rshift),
    ("and", operator.and_),
    ("or", operator.or_),
    ("xor", operator.xor),
]:
    _fw, _rf = _binary(_f)
    setattr(SymInt, f"__{_name}__", _fw)
    setattr(SymInt, f"__r{_name}__", _rf)


def _divmod(self: SymInt, other: Any) -> Any:
    """``divmod(i, n)``: ``(i // n, i % n)``, followed as those are."""
    if not _operand(other)[0]:
        return divmod(self._pin(), other)
    return (self // other, self % other)


def _rdivmod(self: SymInt, other: Any) -> Any:
    if not _operand(other)[0]:
        return divmod(other, self._pin())
    return (other // self, other % self)


for _name, _m in (("divmod", _divmod), ("rdivmod", _rdivmod)):
    setattr(SymInt, f"__{_name}__", _m)


def _unary(f: Callable[[Any], Any]) -> Callable[[SymInt], Any]:
    def method(self: SymInt) -> Any:
        if self.record is not reads.current():
            return f(self.value)
        return _result(self, f(self.value), ("op", reads.apply1, f, self.recipe))

    return method


_UNARY: list[tuple[str, Callable[[Any], Any]]] = [
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", abs),
    ("invert", operator.invert),
]
for _name, _g in _UNARY:
    setattr(SymInt, f"__{_name}__", _unary(_g))


def _compare(f: Callable[[Any, Any], bool]) -> Callable[[SymInt, Any], Any]:
    def method(self: SymInt, other: Any) -> Any:
        if self.record is not reads.current():
            return f(self.value, _plain(other))
        ok, b, rb = _operand(other)
        if not ok:
            return f(self._pin(), other)
        result = f(self.value, b)
        self.record.int_guards.append((f, self.recipe, rb, result))
        return result

    return method


for _name, _c in [
    ("eq", operator.eq),
    ("ne", operator.ne),
    ("lt", operator.lt),
    ("le", operator.le),
    ("gt", operator.gt),
    ("ge", operator.ge),
]:
    setattr(SymInt, f"__{_name}__", _compare(_c))


# --------------------------------------------------------------------------
# container[i]: a gather, or a pin
# --------------------------------------------------------------------------


def gather(container: list[Any], i: SymInt) -> Any:
    """``container[i]`` in the trace's copy of the user's code
    (:mod:`chainrule.compiler.rewrite`): the alias of a gather where the
    list's entries are Values, or rows of Values; else the entry, and the
    value of ``i`` pinned. The list is not touched."""
    record = i.record
    if record is not reads.current():
        return container[i.value]
    n = len(container)
    if not -n <= i.value < n:
        return container[i._pin()]  # IndexError, as eagerly
    again = (Identity(container), i.recipe)
    before = record.picked.get(again)
    if before is not None and _unchanged(before, container):
        # the same pick of the same list: the same alias (or row of them), as
        # eagerly the same entry, so its gradient terms add up in one place
        # in the eager walk's order
        return before.rows[before.picked] if before.row else before.aliases[0]
    k = i.value % n
    # a replay whose int falls outside the list traces again (and raises
    # IndexError as eagerly), even where nothing reads the pick
    record.int_guards.append((in_range, i.recipe, n, True))
    entry = container[k]
    found = _gather(entry, container, i.recipe)
    if found is None:
        return container[i._pin()]
    found.picked = k
    record.gathers.append(found)
    record.picked[again] = found
    g = len(record.gathers) - 1
    if found.row:
        found.aliases = [_alias(found, k, record, g, j) for j in range(len(entry))]
        found.rows = {k: type(entry)(found.aliases)}
        found.origins = list(container)
        handed = found.rows[k]
        HANDED[Identity(handed)] = entry
        return handed
    found.aliases = [_alias(found, k, record, g, 0)]
    return found.aliases[0]


def _unchanged(found: Gather, container: list[Any]) -> bool:
    """Whether ``container`` still holds the entries ``found`` was made
    from (the same objects; rows with the same Values)."""
    now = container
    if len(now) != len(found.candidates):
        return False
    if not found.row:
        return all(map(operator.is_, now, found.candidates))
    return all(
        type(row) in (list, tuple) and len(row) == len(was) and all(map(operator.is_, row, was))
        for row, was in zip(now, found.candidates)
    )


def in_range(i: int, n: int) -> bool:
    """Whether ``i`` picks an entry of a list of ``n`` (negative from the end)."""
    return -n <= i < n


def _gather(entry: Any, container: list[Any], recipe: Any) -> Gather | None:
    """The gather for ``container[i]`` picking ``entry``, or None when the
    list's entries are not all the engine's Values, or not all rows of them
    of one length and type. (A Value of the user's subclass is picked as
    itself, the int pinned: its attributes, its methods are its class's,
    which a stand-in would not have.)"""
    if isinstance(entry, Value):
        if all(type(c) in ENGINE_VALUES for c in container):
            return Gather(list(container), recipe)
        return None
    t = type(entry)
    if (t is not list and t is not tuple) or not entry:
        return None
    width = len(entry)
    rows = []
    for row in container:
        if (
            type(row) is not t
            or len(row) != width
            or not all(type(v) in ENGINE_VALUES for v in row)
        ):
            return None
        rows.append(tuple(row))
    return Gather(rows, recipe, row=True)


def _alias(gather: Gather, k: int, record: Record, g: int, j: int) -> Value:
    """A fresh leaf standing for position ``j`` of gather ``g``'s pick
    (entry ``k`` now; its inputs while tracing: the picked one first, as
    the eager graph's walk meets it, then the others)."""
    column = [row[j] for row in gather.candidates] if gather.row else gather.candidates
    alias = alias_of(column[k], (column[k], *column[:k], *column[k + 1 :]))
    record.aliases[alias] = (g, j)
    return alias


def recipe_value(r: Any, ints: list[int]) -> Any:
    """An int recipe's value for the call's ints."""
    if type(r) is not tuple:
        return r
    kind = r[0]
    if kind == "int":
        return ints[r[1]]
    if kind == "op":
        return r[1](*(recipe_value(x, ints) for x in r[2:]))
    raise ValueError(f"not an int recipe: {r!r}")


def int_checker(guards: list[tuple[Any, Any, Any, Any]]) -> Callable[[list[int]], bool]:
    """Whether a call's ints make every guard come out as traced."""
    if not guards:
        return lambda ints: True
    pins = [(g[1][1], g[2]) for g in guards if _is_pin(g)]
    rest = [g for g in guards if not _is_pin(g)]

    def holds(ints: list[int]) -> bool:
        for pos, v in pins:
            if ints[pos] != v:
                return False
        try:
            for f, a, b, want in rest:
                if f(recipe_value(a, ints), recipe_value(b, ints)) != want:
                    return False
        except Exception:  # (1 << i for a negative i): trace again, which raises as eagerly
            return False
        return True

    return holds


def _is_pin(guard: tuple[Any, Any, Any, Any]) -> bool:
    """``int argument == value`` (checked first, and fast)."""
    f, r, b, want = guard
    return (
        f is operator.eq and want is True and type(b) is int and type(r) is tuple and r[0] == "int"
    )
