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
  that the new value of ``i`` picks (:class:`Gather`). The list is the one
  the subscript reads: its expression (names, attribute reads from an
  object's ``__dict__``, subscripts by constants) is read again in the
  caller's frame, which runs no user code; the alias is put in the list
  for that one subscript and taken out before the next instruction runs
  (a trace function on the caller's frame, as debuggers use), so nothing
  else can reach it.
* arithmetic with ints gives another SymInt (``tokens[pos + 1]`` stays
  symbolic), with floats a traced float (a constant recomputed at replay);
* a comparison or ``bool`` is a **guard**: a replay whose ints would
  compare the other way traces again;
* anything else (``range(i)``, a dict key, ``float(i)``, a subscript of a
  tuple, a NumPy array or a list of other things, code whose source Python
  cannot show) **pins** the value: the trace holds for that value only,
  and another value traces again. Never a stale number: what compile cannot
  follow is specialised, not guessed.

``isinstance(i, int)`` is true of a SymInt (its ``__class__`` says
``int``); ``type(i) is int`` is not.
"""

from __future__ import annotations

import ast
import dis
import inspect
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

from ..value.engine import Value
from . import reads
from .reads import Record, TracedFloat, TracedInt, instruction_source, restore, traced

_SUBSCRIPT = frozenset(op for op in ("BINARY_SUBSCR",) if op in dis.opmap)
_BINARY_OP = dis.opmap.get("BINARY_OP")
# Python 3.14 subscripts with BINARY_OP and this operand
_NB_SUBSCR = next(
    (i for i, (name, _) in enumerate(getattr(dis, "_nb_ops", ())) if name == "NB_SUBSCR"), None
)


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

    def pick(self, i: int) -> int | None:
        """The entry that ``i`` picks, as the list would (negative from the
        end), or None where the list would raise IndexError."""
        n = len(self.candidates)
        if -n <= i < n:
            return i % n
        return None


class SymInt(TracedInt):
    """An int argument while its function is traced (see the module)."""

    __slots__ = ()

    def __init__(self, value: int, recipe: Any, record: Record) -> None:
        self.value = value
        self.recipe = recipe
        self.record = record

    # -- what cannot be followed pins the value ------------------------------

    def _pin(self) -> int:
        if self.record is reads.current():
            self.record.int_guards.append((operator.eq, self.recipe, self.value, True))
        return self.value

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return int

    def __index__(self) -> int:
        if self.record is not reads.current():
            return self.value
        return _index(self, sys._getframe(1))

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

    def __bool__(self) -> bool:
        result = self.value != 0
        if self.record is reads.current():
            self.record.int_guards.append((operator.ne, self.recipe, 0, result))
        return result


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


def _result(self: SymInt, y: Any, recipe: Any) -> Any:
    if type(y) is int:
        return SymInt(y, recipe, self.record)
    if type(y) is float:
        return traced(y, recipe)
    return y


def _plain(x: Any) -> Any:
    return x.value if type(x) is SymInt else x


def _binary(f: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def forward(self: SymInt, other: Any) -> Any:
        if self.record is not reads.current():
            return f(self.value, _plain(other))
        ok, b, rb = _operand(other)
        if not ok:  # a Value, a string ...: this value only
            return f(self._pin(), other)
        return _result(self, f(self.value, b), ("op", f, self.recipe, rb))

    def reflected(self: SymInt, other: Any) -> Any:
        if self.record is not reads.current():
            return f(_plain(other), self.value)
        ok, a, ra = _operand(other)
        if not ok:
            return f(other, self._pin())
        return _result(self, f(a, self.value), ("op", f, ra, self.recipe))

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


class _Unsure(Exception):
    """An expression that cannot be read again without running user code."""


#: Per subscript instruction: its container expression and the arguments
#: of the ``len(...)`` calls in its index, or None (not a plain subscript).
_sites: dict[tuple[CodeType, int], tuple[ast.expr, list[ast.expr]] | None] = {}


def _subscript_site(code: CodeType, lasti: int) -> tuple[ast.expr, list[ast.expr]] | None:
    """The container expression of the subscript ``container[i]`` that the
    instruction at ``lasti`` runs (and the ``len(...)`` arguments of its
    index), or None (not a plain subscript, or no source)."""
    key = (code, lasti)
    if key in _sites:
        return _sites[key]
    found: tuple[ast.expr, list[ast.expr]] | None = None
    op = code.co_code[lasti] if 0 <= lasti < len(code.co_code) else None
    name = dis.opname[op] if op is not None else ""
    is_subscript = name in _SUBSCRIPT or (
        op == _BINARY_OP and _NB_SUBSCR is not None and code.co_code[lasti + 1] == _NB_SUBSCR
    )
    source = instruction_source(code, lasti) if is_subscript else None
    if source is not None:
        try:
            node = ast.parse(source.strip(), mode="eval").body
        except SyntaxError:
            node = None
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Tuple)):
            lens: list[ast.expr] = []
            try:
                _check_pure(node.slice, lens)
                found = (node.value, lens)
            except _Unsure:
                found = None
    _sites[key] = found
    return found


def _check_pure(node: ast.expr, lens: list[ast.expr]) -> None:
    """``node`` is made of names, constants, attribute reads, subscripts,
    arithmetic and ``len(...)`` only (so evaluating it in the frame ran no
    user code other than int arithmetic, which a SymInt records, once the
    ``len`` arguments, collected in ``lens``, are checked to be lists,
    tuples, dicts or strings)."""
    if isinstance(node, (ast.Name, ast.Constant)):
        return
    if isinstance(node, ast.Attribute):
        return _check_pure(node.value, lens)
    if isinstance(node, ast.Subscript):
        _check_pure(node.value, lens)
        return _check_pure(node.slice, lens)
    if isinstance(node, ast.BinOp):
        _check_pure(node.left, lens)
        return _check_pure(node.right, lens)
    if isinstance(node, ast.UnaryOp):
        return _check_pure(node.operand, lens)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and not node.keywords
    ):
        lens.append(node.args[0])
        return _check_pure(node.args[0], lens)
    raise _Unsure


def _read(node: ast.expr, frame: FrameType) -> Any:
    """The value of a container expression in ``frame``, without running
    user code: names, constants, plain attributes (no property or other
    descriptor), subscripts of lists, tuples and dicts by ints and strings."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return scope[node.id]
        raise _Unsure
    if isinstance(node, ast.Attribute):
        obj = _read(node.value, frame)
        try:
            found = inspect.getattr_static(obj, node.attr)
        except AttributeError:
            raise _Unsure from None
        if hasattr(type(found), "__get__"):  # a method, property, slot: code would run
            raise _Unsure
        return found
    if isinstance(node, ast.Subscript):
        container = _read(node.value, frame)
        key = _read(node.slice, frame)
        if type(container) not in (list, tuple, dict) or type(key) not in (int, str):
            raise _Unsure
        try:
            return container[key]
        except (IndexError, KeyError):
            raise _Unsure from None
    raise _Unsure


def _index(i: SymInt, frame: FrameType) -> int:
    """``i.__index__()`` called from ``frame``: a gather where the call is a
    plain subscript of a list of Values (or rows of them), else a pin."""
    record = i.record
    site = _subscript_site(frame.f_code, frame.f_lasti)
    if site is None:
        return i._pin()
    try:
        container = _read(site[0], frame)
        if site[1] and _read(ast.Name("len"), frame) is not len:
            raise _Unsure
        for arg in site[1]:  # len() of a builtin container runs no user code
            if type(_read(arg, frame)) not in (list, tuple, dict, str):
                raise _Unsure
    except _Unsure:
        return i._pin()
    if type(container) is not list:
        return i._pin()
    n = len(container)
    if not -n <= i.value < n:
        return i._pin()  # the list raises IndexError, as it would eagerly
    k = i.value % n
    entry = container[k]
    gather = _gather(entry, container, i.recipe)
    if gather is None:
        return i._pin()
    gather.picked = k
    record.gathers.append(gather)
    g = len(record.gathers) - 1
    if gather.row:
        aliases = [_alias(gather, k, record, g, j) for j in range(len(entry))]
        alias: Any = type(entry)(aliases)
    else:
        alias = _alias(gather, k, record, g, 0)
        aliases = [alias]
    gather.aliases = aliases
    container[k] = alias
    record.pending.append((container, k, entry))
    _restore_after(frame, record)
    return k


def _gather(entry: Any, container: list[Any], recipe: Any) -> Gather | None:
    """The gather for ``container[i]`` picking ``entry``, or None when the
    list's entries are not all Values, or not all rows of Values of one
    length and type."""
    if isinstance(entry, Value):
        if all(isinstance(c, Value) for c in container):
            return Gather(list(container), recipe)
        return None
    t = type(entry)
    if (t is not list and t is not tuple) or not entry:
        return None
    width = len(entry)
    rows = []
    for row in container:
        if type(row) is not t or len(row) != width or not all(isinstance(v, Value) for v in row):
            return None
        rows.append(tuple(row))
    return Gather(rows, recipe, row=True)


def _alias(gather: Gather, k: int, record: Record, g: int, j: int) -> Value:
    """A fresh leaf standing for position ``j`` of gather ``g``'s pick
    (entry ``k`` now; its inputs while tracing: the picked one first, as
    the eager graph's walk meets it, then the others)."""
    from .trace import alias_of

    column = [row[j] for row in gather.candidates] if gather.row else gather.candidates
    alias = alias_of(column[k], (column[k], *column[:k], *column[k + 1 :]))
    record.aliases[alias] = (g, j)
    return alias


def _restore_after(frame: FrameType, record: Record) -> None:
    """Take the aliases out of their lists before ``frame`` runs its next
    instruction (a trace function for one opcode event)."""
    if record.armed is not None:
        return
    record.armed = (frame, frame.f_trace, frame.f_trace_opcodes, sys.gettrace())

    def hook(f: FrameType, event: str, arg: Any) -> Any:
        previous = record.armed
        restore(record)
        return previous[1] if previous is not None else None

    frame.f_trace = hook
    frame.f_trace_opcodes = True
    if record.armed[3] is None:
        sys.settrace(_no_calls)


def _no_calls(frame: FrameType, event: str, arg: Any) -> None:
    """The global trace function while an alias waits: traces no calls."""
    return None


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
        for f, a, b, want in rest:
            if f(recipe_value(a, ints), recipe_value(b, ints)) != want:
                return False
        return True

    return holds


def _is_pin(guard: tuple[Any, Any, Any, Any]) -> bool:
    """``int argument == value`` (checked first, and fast)."""
    f, r, b, want = guard
    return (
        f is operator.eq and want is True and type(b) is int and type(r) is tuple and r[0] == "int"
    )
