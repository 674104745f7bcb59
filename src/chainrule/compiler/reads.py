"""What user code learns about a graph's numbers while it is traced.

A replay skips the user's Python, so every number the user's code read
from a traced node (``v.data``, ``float(v)``, ``v > 0``) would be frozen at
its traced value. While :func:`~chainrule.compiler.trace.run_traced` runs, such a
read returns a :class:`TracedFloat`: a float that remembers where it came
from (its *recipe*). What happens to it decides what a replay does:

* used as the constant of an operation (``v - top`` in a stable softmax,
  ``Value(top)``), the replay recomputes it from its recipe, so it is never
  stale (a stop-gradient input, as ``torch.Tensor.detach``);
* arithmetic on it gives another TracedFloat (``2 * top``, ``1 / top``);
* the builtin ``max`` or ``min`` over reads (``max(v.data for v in xs)``)
  becomes that reduction, recomputed by the same builtin at replay (over
  tuples, ``max((v.data, k) ...)``, each comparison is a guard);
* any other comparison, ``bool``, ``int``, ``float(v)``, formatting, is a
  *guard*: the replay checks that it comes out the same and traces again
  when it does not.

A function that takes the float apart without calling its methods
(``math.exp(v.data)``) is seen where the user's code calls it: the trace
runs copies of the user's functions whose calls go through
:func:`chainrule.compiler.rewrite._call`, which makes the floats handed to
such a function guards (:func:`read_whole_by`).
"""

from __future__ import annotations

import ast
import builtins
import itertools
import linecache
import math
import numbers
import operator
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable
from types import CodeType, FrameType, GeneratorType
from typing import Any, TypeGuard

from .escapes import PACKAGE_DIR, describe
from .keys import Identity, identities
from .sources import Sources, _same

#: A recipe: ("node", Value) | ("arg", i) | ("int", i) | ("op", f, a, b)
#: | ("reduce", f, [recipes]); "arg" is a float argument, "int" an int one.
Recipe = tuple[Any, ...]


class TracedFloat(float):
    """A float read from a traced graph, with the recipe that recomputes it.

    The recipe holds only for the trace that made the float (and while its
    capture is built): a TracedFloat that outlives its trace (kept in a
    global, returned) is, in any later trace, the constant it holds."""

    __slots__ = ("_recipe", "_trace", "_origin")
    _recipe: Recipe
    _trace: int  # the serial of its trace's Record (0: none): not the Record, kept alive
    # a float argument's, a leaf's ``.data``: the object it stands for eagerly
    # and the recipe that finds that object at replay (see :func:`identical`)
    _origin: tuple[Any, Recipe | None]

    def __new__(cls, *args: Any) -> float:  # type: ignore[misc]
        """``type(x)(3.0)``, ``x.fromhex(...)``, ``statistics``' ``T(value)``:
        a plain float, as eagerly (only :func:`traced` makes a TracedFloat,
        with its recipe)."""
        return float(*args)

    @property
    def recipe(self) -> Any:
        if self._trace and self._trace == getattr(_tracing, "last", 0):
            return self._recipe
        return float.__float__(self)

    @recipe.setter
    def recipe(self, recipe: Recipe) -> None:
        self._recipe = recipe

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # ``x.__class__ is float``, as eagerly
        return float

    def __repr__(self) -> str:
        return float.__repr__(guard_whole(self))


class TracedInt:
    """An int argument while tracing, with its recipe: the base of
    :class:`chainrule.compiler.symbolic.SymInt` (defined there)."""

    __slots__ = ("value", "recipe", "record")
    value: int
    recipe: Recipe
    record: Record


def traced(value: float, recipe: Recipe) -> TracedFloat:
    t = float.__new__(TracedFloat, value)
    t._recipe = recipe
    record = getattr(_tracing, "record", None)
    if record is not None:
        t._trace = record.serial
        record.floats.append(t)
    else:  # a float argument, made just before its trace starts (set_current)
        t._trace = 0
        _tracing.__dict__.setdefault("pending", []).append(t)
    return t


def standing_for(t: TracedFloat, obj: Any, where: Recipe | None) -> TracedFloat:
    """``t``, marked as the float object ``obj`` that eager code would hold
    there (a float argument, a leaf's ``.data``), found at replay by the
    recipe ``where``: identity (``is``) asks about it (:func:`identical`)."""
    t._origin = (obj, where)
    return t


def origin(x: Any) -> Any:
    """The object eager code would hold for ``x``: a float argument's or a
    leaf's ``.data`` for a traced float standing for one, else ``x``."""
    if type(x) is TracedFloat:
        found = getattr(x, "_origin", None)
        if found is not None:
            return found[0]
    return x


def live(x: Any) -> TypeGuard[TracedFloat]:
    """Whether ``x`` is a TracedFloat of the trace this thread records."""
    if type(x) is not TracedFloat or not x._trace:
        return False
    record = current()
    return record is not None and x._trace == record.serial


class Record:
    """What one trace saw: the guards to check at replay, and where each
    read float was consumed by the engine (file:line, for messages)."""

    def __init__(self) -> None:
        self.serial = next(_serials)
        # (a: a recipe, or a cached_again guard's CachedCall)
        self.guards: list[tuple[Callable[..., Any], Recipe | CachedCall, Any, Any]] = []
        # (keys.Identity of the read: the object itself, not its id) -> (it, file:line)
        self.consumed: dict[Any, tuple[TracedFloat, str]] = {}
        # the max()/min() calls under way, by site (one inside another's
        # generator, max(max(r) for r in rows), is a site of its own), the
        # latest stepped last
        self.reductions: dict[tuple[Any, ...], _Reduction] = {}
        # a max()/min() result (by Identity) -> (the winner it stands for, the guards
        # that pin it): see reduced()
        self.reduced: dict[Identity, tuple[Any, list[Any]]] = {}
        self.problems: list[str] = []
        self.leaf_recipes: dict[Any, Recipe] = {}
        # the int arguments (chainrule.compiler.symbolic): guards on them,
        # the gathers they pick and the alias leaves that stand for the picks
        self.int_guards: list[tuple[Callable[..., Any], Any, Any, Any]] = []
        self.gathers: list[Any] = []
        self.aliases: dict[Any, tuple[int, int]] = {}
        # (the list, the int's recipe) -> the gather made for it: the same
        # pick again is the same alias, as eagerly the same entry
        self.picked: dict[Any, Any] = {}
        self.pins: list[str] = []  # how int arguments were used as numbers, for messages
        self.floats: list[TracedFloat] = []  # every traced float made, in order (read_whole_by)
        # the two floats last compared for equality inside max()/min(): items of tuples
        self.compared: tuple[Any, Any] | None = None
        # iterators made while tracing (each held by its Identity): not the user's state
        self.iterators: set[Identity] = set()
        # the traced floats pinned by read_whole_by, by identity (keys.Identity
        # holds each): the plain float each is given as, and the recipe pinned
        self.whole: dict[Identity, tuple[float, Any]] = {}
        # nodes made while tracing that a functools cache keeps (rewrite._call):
        # made the eager graph too when the trace is not kept
        self.cached: list[Any] = []
        self.cache_misses: dict[int, int] = {}  # by the cache's id: entries it added
        # the calls of functools caches, each once: a guard calls it again (cached_again)
        self.cache_calls: dict[Any, None] = {}
        # the nodes the operations made while tracing (trace.TraceValue until
        # the trace is done: trace.release)
        self.nodes: list[Any] = []
        # the inputs and the local derivatives each of them was made with
        # (trace.parts_written), one for one
        self.born_inputs: list[Any] = []
        self.born_locals: list[Any] = []
        self.born_data: list[Any] = []
        # the leaves made while tracing (Value(x)), each with its _prev and _local then
        self.leaf_parts: list[tuple[Any, Any, Any]] = []
        # the leaves made while tracing (Value(c) in fn: its c, from wherever it came)
        self.made_leaves: set[Identity] = set()
        # the copies of the arguments' lists, tuples and dicts the trace runs on
        # (by Identity) -> the caller's own: what identity asks about
        self.arg_copies: dict[Identity, Any] = {}
        # each Value's .data read by user code (by Identity): the float it
        # held and the traced float handed back, handed back again while it holds it
        self.data_reads: dict[Identity, tuple[Any, TracedFloat]] = {}
        # the floats the Values made from traced floats hold (by Identity) ->
        # the object each stands for and its recipe (trace._held)
        self.leaf_floats: dict[Identity, tuple[Any, Recipe | None]] = {}
        # the leaves made from read floats, each with its own _local (trace.read_leaf)
        self.recipe_leaves: list[tuple[Any, tuple[Any, ...]]] = []
        # the objects whose identity user code asked for (id(p), hash(p), sorted(key=id)),
        # by Identity: an argument Value among them is guarded to be that very object
        self.identified: set[Identity] = set()

    def forget(self) -> None:
        """Let go of what the trace saw, once it is done (its graph, the
        argument copies): a record can be in a reference cycle (an int
        argument's :class:`~chainrule.compiler.symbolic.SymInt` holds it, and
        the copies hold the SymInt), which only the cyclic collector frees,
        after later traces' full collections have walked all it holds."""
        for name, held in list(vars(self).items()):
            if type(held) in (list, dict, set):
                setattr(self, name, type(held)())


_tracing = threading.local()
_serials = itertools.count(1)


def current() -> Record | None:
    """The record of the trace that this thread runs, if any: another
    thread's comparisons never enter it."""
    return getattr(_tracing, "record", None)


def set_current(record: Record | None) -> None:
    _tracing.record = record
    if record is not None:  # its floats' recipes hold until the next trace
        _tracing.last = record.serial
        for t in _tracing.__dict__.pop("pending", ()):
            t._trace = record.serial


def recipe_of(x: Any) -> Any:
    """The recipe of a TracedFloat or TracedInt, or the plain number itself."""
    return x.recipe if type(x) is TracedFloat or isinstance(x, TracedInt) else x


def where(depth: int = 2) -> str:
    """``file:line`` of user code, ``depth`` frames up."""
    f = sys._getframe(depth)
    return f"{f.f_code.co_filename}:{f.f_lineno}"


_COMPILER_DIR = __file__.rsplit("/", 1)[0].rsplit("\\", 1)[0]
_ENGINE_DIR = _COMPILER_DIR[: -len("compiler")] + "value"


def user_site(package: bool = False, beside: tuple[str, ...] = ()) -> str:
    """``file:line`` of the innermost frame outside compile's own code and
    the Value engine's (with ``package``: outside chainrule's; and outside
    the files ``beside``)."""
    f: FrameType | None = sys._getframe(1)
    mine = ((PACKAGE_DIR,) if package else (_COMPILER_DIR, _ENGINE_DIR)) + beside
    while f is not None and f.f_code.co_filename.startswith(mine):
        f = f.f_back
    return "?" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


def user_stacklevel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn`, called by the caller of
    this function, that names the innermost frame outside chainrule."""
    f: FrameType | None = sys._getframe(1)  # (the caller: level 1)
    level = 1
    while f is not None and f.f_code.co_filename.startswith(PACKAGE_DIR):
        f = f.f_back
        level += 1
    return level


def _guard(f: Callable[..., Any], a: Any, b: Any, result: Any) -> Any:
    record = current()
    if record is not None and (type(a) is TracedFloat or type(b) is TracedFloat):
        ra, rb = recipe_of(a), recipe_of(b)
        record.guards.append((f, ra, rb, result))
        if not record.pins and f is not same:  # (why the trace holds for these numbers)
            record.pins.append(
                f"{_made_from([ra, rb])} decides a comparison or a branch ({user_site()})"
            )
    return result


def same(a: float, b: float) -> bool:
    """The same float, bit for bit: ``-0.0`` apart from ``0.0`` (``1 / x``
    tells the zeros apart), a nan the same nan: the guard of a float read
    whole."""
    if a == b:
        return a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b)
    # two nans: the same bits (code that reads the float whole tells a nan's sign
    # and payload apart: math.copysign, struct.pack)
    return a != a and b != b and _PACK(a) == _PACK(b)


_PACK = struct.Struct("<d").pack


def is_same(a: Any, b: Any) -> bool:
    """The guard of an identity asked while tracing: ``a is b`` of the
    objects two recipes find at replay (:func:`identical`)."""
    return a is b


class CachedCall:
    """A call of a ``functools`` cache while tracing, whose result a replay
    reuses: the cache (or a method of it), the plain arguments, and what
    it returned (:func:`cached_again`)."""

    __slots__ = ("f", "args", "kwargs", "out", "contents", "snapshot")

    def __init__(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self.f, self.args, self.kwargs, self.out = f, args, kwargs, out
        # what the result holds (a list, an object: changed in place between
        # calls, eagerly the next call reads the change), walked as globals are
        self.contents: Any = None
        self.snapshot: Any = None
        if type(out) not in _WHOLE:
            self.contents = Sources.of([out])
            self.snapshot = self.contents.take()


def cached_again(call: CachedCall, _: Any) -> bool:
    """The guard of a call of a ``functools`` cache (before every replay):
    the cache called again as eagerly, which gives what it gave the trace
    (the same object, or an equal number, string or bytes: a float bit for
    bit) while it holds the entry, and recomputes it once the entry is gone
    (``cache_clear()``, a bounded cache's eviction): another result traces
    again. A hit is one C call."""
    if not _same(call.f(*call.args, **call.kwargs), call.out):
        return False
    return call.contents is None or call.contents.hold(call.snapshot)


#: Results a cache hands back whole (nothing inside them to change).
_WHOLE = frozenset((float, int, bool, str, bytes, complex, type(None)))


#: ``_identity_key``'s answer for an object that is no float: never the
#: object a float stands for, whatever the call.
_NO_FLOAT = ("no float",)


def _identity_key(x: Any) -> Any:
    """The object eager code holds for ``x`` and the recipe that finds it
    at replay: a float argument, a leaf's ``.data``, a constant (None: a
    float computed while tracing, which eager code may hold as an object
    it was given: ``+x``, ``x.real``)."""
    if type(x) is TracedFloat:
        if not live(x):
            return (x, ("const", x))  # kept from an earlier trace: a constant
        return getattr(x, "_origin", None)
    if isinstance(x, float):
        return (x, ("const", x))
    return _NO_FLOAT


def identical(a: Any, b: Any, computed_apart: bool = False) -> bool:
    """``a is b`` in user code while tracing, one of them a traced float:
    eager's answer, asked of the objects they stand for (``f(x, x)``, two
    reads of ``v.data``, two ``Value(0.0)`` biases), with a guard that the
    objects a replay finds answer the same. Where a replay cannot find an
    object again (a float of the function's globals or attributes, which
    may be rebound to an equal one; a pick's ``.data``; a float computed
    while tracing against another float), the function runs eagerly: with
    ``computed_apart``, a float computed while tracing is a new object
    (the arithmetic of floats makes one), asked nothing."""
    if a is b:
        return True
    ka, kb = _identity_key(a), _identity_key(b)
    if ka is _NO_FLOAT or kb is _NO_FLOAT:
        return False  # a float is never an object of another type
    # (the objects eager code holds: a float computed while tracing is its own)
    answer = (a if ka is None else ka[0]) is (b if kb is None else kb[0])
    if ka is None or kb is None:
        if answer or not computed_apart:
            identity_unseen("one was computed while tracing")
        return answer
    if ka[1] is None or kb[1] is None:
        identity_unseen("one is an operation's .data or a pick's")
    elif ka[1][0] == "const" or kb[1][0] == "const":
        # (two constants too: globals are guarded by value, and one may be
        # rebound to an equal float, another object)
        identity_unseen(
            "one is a float the trace holds as a constant (of the function's globals, "
            "attributes or code, or handed back by a function it cannot see into)"
        )
    else:
        record = current()
        if record is not None:
            record.guards.append((is_same, ka[1], kb[1], answer))
    return answer


def identity_asked(*objects: Any) -> None:
    """User code asks for the identity of ``objects`` (``id``, ``hash``,
    ``object.__repr__``): a Value argument among them is guarded to be the
    trace's own object at every replay (compile's ``_shared_alike``), as a
    Value the trace reaches through a global is."""
    record = current()
    if record is None:
        return
    stack = list(objects)
    while stack:  # (a tuple's hash, a frozenset's: their members')
        x = stack.pop()
        if type(x) is tuple or type(x) is frozenset:
            stack.extend(x)
        else:
            record.identified.add(Identity(x))


def identity_unseen(why: str) -> None:
    record = current()
    if record is not None:
        record.problems.append(
            f"{user_site()}: asks whether two objects are one (is, in) where {why}, "
            "which a replay cannot ask again; compare floats by value (==)"
        )


#: The methods that look for a value in a list, a tuple or a deque: by
#: identity first, then ``==`` (:func:`_search`).
_SEARCHES = frozenset(("count", "index", "remove", "__contains__"))


def searching(f: Any, args: tuple[Any, ...], kwargs: Any) -> bool:
    """Whether ``f(*args)`` looks for a float in a list, tuple or deque
    while tracing (:func:`search`)."""
    if kwargs or not args or not isinstance(args[0], float) or current() is None:
        return False
    t = type(getattr(f, "__self__", None))
    return (t is list or t is tuple or t is deque) and getattr(f, "__name__", "") in _SEARCHES


def search(f: Any, args: tuple[Any, ...]) -> Any:
    """``xs.count(x)``, ``xs.index(x)``, ``xs.remove(x)`` for a float
    ``x``, each entry asked as :func:`contains` asks it (a nan is found by
    identity only); where nothing is found, the method itself raises
    eager's error."""
    owner, x, name = f.__self__, args[0], f.__name__
    hits = [k for k, e in enumerate(owner) if found_at(e, x)]
    if name == "count":
        return len(hits)
    if name == "__contains__":
        return bool(hits)
    n = len(owner)
    lo, hi = (list(map(operator.index, args[1:3])) + [0, n][len(args) - 1 :])[:2]
    lo, hi = (max(b + n, 0) if b < 0 else b for b in (lo, hi))  # (as list.index bounds them)
    hits = [k for k in hits if lo <= k < hi]
    if not hits:
        return f(origin(x), *args[1:])  # (raises eager's ValueError)
    if name == "index":
        return hits[0]
    del owner[hits[0]]
    return None


def found_at(e: Any, x: Any) -> bool:
    """Whether a list finds ``x`` at the entry ``e``: the same object (as
    the objects traced floats stand for), or equal."""
    if isinstance(e, numbers.Number) and not isinstance(e, (int, float)) and live(x):
        pin(x)  # (Decimal, complex: their own == reads the float whole)
    if isinstance(e, float):
        e, x = winner_of(e), winner_of(x)
        # (a nan is found by identity only: where one is a nan, or may be one
        # at a replay)
        asked = (_leaf(e) and _leaf(x)) or float.__ne__(e, e) or float.__ne__(x, x)
        if asked and identical(e, x, computed_apart=True):
            return True
    return bool(e is x or e == x)


def _leaf(x: Any) -> bool:
    """Whether ``x`` is a traced float a replay finds again as an object
    (a float argument, a leaf's ``.data``)."""
    found = getattr(x, "_origin", None) if type(x) is TracedFloat else None
    return found is not None and found[1] is not None and live(x)


def contains(container: Any, x: Any) -> bool:
    """``x in container`` in user code while tracing: for a float ``x`` and
    a list, tuple or deque, each entry asked as the list asks, by identity
    first (:func:`found_at`: a nan is found by identity only), then by
    ``==``; a nan in a set or dict, by the objects (:func:`read_whole_by`)."""
    if not isinstance(x, float) or current() is None:
        return x in container
    t = type(container)
    if t is list or t is tuple or t is deque:
        return any(found_at(e, x) for e in container)
    if float.__ne__(x, x) and (t is set or t is frozenset or t is dict):
        return bool(read_whole_by(operator.contains, (container, x), {}))
    return x in container


#: C functions that read floats as numbers only, never as objects.
_NUMERIC_MODULES = frozenset(("math", "cmath"))
_NUMERIC = frozenset((builtins.abs, builtins.round, builtins.sum, builtins.len, builtins.format))


def _same_objects(f: Any, within: list[Any], record: Record) -> None:
    """Code handed the float objects that traced floats stand for (``f(x,
    x)`` to a function without source, ``xs.count(x)``) may tell them apart
    by identity: a guard that a replay's objects are one where these were
    (each pair of nans, which C code finds by identity only; the pattern
    of the arguments' and leaves' floats)."""
    if any(f is g for g in _NUMERIC) or getattr(f, "__module__", None) in _NUMERIC_MODULES:
        return  # (by identity: a callable may be unhashable, functools.cmp_to_key's)
    nans = [x for x in within if isinstance(x, float) and float.__ne__(x, x)]
    for k, x in enumerate(nans):
        for y in nans[k + 1 :]:
            identical(x, y, computed_apart=True)
    standing = [x._origin for x in within if _leaf(x)]
    if len(standing) > 1:
        found = [r for _, r in standing]
        pattern = identities([o for o, _ in standing])
        record.guards.append((same_pattern, tuple(found), pattern, True))


def same_pattern(found: Any, pattern: Any) -> bool:
    """The guard of :func:`_same_objects` (compiled by the capture: the
    objects the recipes find are one where the traced ones were)."""
    return bool(found == pattern)


def read_whole_by(f: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``f(*args, **kwargs)`` for a function the trace cannot see into (C
    code, a library's, or code compile could not copy), which may read a
    traced float whole (``math.exp(v.data)``): every traced float among its
    arguments (in their lists, tuples, dicts, sets, dict views, deques, at
    any depth), every one an iterator it consumes yields (a generator of
    floats read earlier) and every one made while it runs is a guard, so a
    replay holds only while they are the same, bit for bit. They are
    pinned before the call, or as it takes them, and the ones made in it
    when it ends, also when it raises (``math.log(x)`` in a ``try``: the
    ``except`` branch holds only for that ``x``).

    While it runs, it gets the numbers themselves, as eagerly: the ints
    (``json.dumps({"step": i})``) and floats (``marshal.dumps([x])``), at
    any depth (:class:`Whole`)."""
    record = current()
    if record is None:
        return f(*args, **kwargs)
    if searching(f, args, kwargs):
        return search(f, args)
    made, pinned = len(record.floats), len(record.whole)
    within = flat_items((args, kwargs))
    whole = Whole()
    if within is None:  # too many to look through: every float made so far
        made = 0
    else:
        pin(*within)
        _same_objects(f, within, record)
        if any(type(x) is TracedFloat or isinstance(x, TracedInt) for x in within):
            args = tuple(map(whole.numbers, args))
            kwargs = {k: whole.numbers(x) for k, x in kwargs.items()}
        if not _passes_on(f):
            args = tuple(_consumed(x, record) for x in args)
            kwargs = {k: _consumed(x, record) for k, x in kwargs.items()}
    try:
        return f(*args, **kwargs)
    finally:
        whole.put_back()
        pin(*record.floats[made:])
        if len(record.whole) > pinned and not record.pins:
            recipes = [r for _, r in itertools.islice(record.whole.values(), pinned, None)]
            record.pins.append(
                f"{_made_from(recipes)} is read whole by {describe(f)} ({user_site()})"
            )


def _made_from(recipes: list[Any]) -> str:
    """What the numbers of these recipes come from, in words."""
    kinds: set[str] = set()

    def walk(r: Any) -> None:
        if type(r) is tuple and r and type(r[0]) is str:
            kinds.add(r[0])
            for x in r[2:] if r[0] == "op" else r[2] if r[0] == "reduce" else ():
                walk(x)

    for r in recipes:
        walk(r)
    if "node" in kinds:
        return "a number read from a Value"
    if "arg" in kinds:
        return "a float argument"
    if "int" in kinds:
        return "a number computed from an int argument"
    return "a traced number"


def pin(*numbers: Any) -> None:
    """Numbers read whole (the traced ones among ``numbers``): the trace
    holds for their values (a guard each, once)."""
    for x in numbers:
        if isinstance(x, TracedInt):
            int(x)  # type: ignore[call-overload]  # an int argument: a pin of its own
        elif live(x):
            record = current()
            if record is None:
                continue
            known = record.whole.get(Identity(x))
            if known is not None and known[1] is x.recipe:
                continue  # pinned already (a max() it won since: its recipe changed)
            value = guard_whole(x)
            # one plain float for each (marshal refers to one object twice): the
            # object eager code holds, where the trace knows it (f(x, x))
            record.whole[Identity(x)] = (value if known is None else known[0], x.recipe)


class Whole:
    """The traced numbers in a call's arguments as the plain numbers they
    hold, for that call (each pinned first): in place in their lists, dicts
    and sets (a C function that changes the list, ``bisect.insort``, changes
    the user's), in new tuples and frozensets; put back when it returns,
    so the trace goes on following them and an argument's container is
    not seen as changed. (A plain int put back may be an equal one the
    call added: the same number, as the trace holds for it.)"""

    def __init__(self) -> None:
        self.back: dict[Identity, Any] = {}  # a plain number or container -> its traced one
        # the containers changed in place: each with its entries before and after
        self.changed: list[tuple[Any, list[Any], list[Any]]] = []

    def numbers(self, x: Any) -> Any:
        """``x`` with its traced numbers plain."""
        t = type(x)
        if t is TracedFloat or isinstance(x, TracedInt):
            record = current()
            known = None if record is None else record.whole.get(Identity(x))
            if known is not None:
                plain = known[0]
            else:
                plain = x.value if isinstance(x, TracedInt) else float.__float__(x)
            self.back[Identity(plain)] = x
            return plain
        if t is tuple or t is frozenset:
            items = [self.numbers(y) for y in x]
            if any(z is not y for y, z in zip(x, items)):
                new = t(items)
                self.back[Identity(new)] = x
                return new
            return x
        if t is not list and t is not dict and t is not set:
            return x
        before = _entries(x)
        if _replace(x, self.numbers):
            self.changed.append((x, before, _entries(x)))
        return x

    def put_back(self) -> None:
        """Each container as it was, where the call left its plain entries
        as they were (by place: ``[1, 2, 1]``'s two 1s are one int object);
        else each plain number its traced one, by identity."""

        def traced_of(y: Any) -> Any:
            return self.back.get(Identity(y), y)

        for x, before, plain in reversed(self.changed):
            now = _entries(x)
            if len(now) == len(plain) and all(map(operator.is_, now, plain)):
                _restore(x, before)
            else:
                _replace(x, traced_of)


def _entries(x: Any) -> list[Any]:
    """The entries of a list, dict (its keys, then its values) or set, in order."""
    return [*x.keys(), *x.values()] if type(x) is dict else list(x)


def _restore(x: Any, entries: list[Any]) -> None:
    """Put a list, dict or set's ``entries`` (:func:`_entries`) back in it."""
    if type(x) is list:
        x[:] = entries
        return
    x.clear()
    if type(x) is dict:
        half = len(entries) // 2
        x.update(zip(entries[:half], entries[half:]))
    else:
        x.update(entries)


def _replace(x: Any, f: Callable[[Any], Any]) -> bool:
    """Each entry ``y`` of the list, dict (its keys, its values) or set
    ``x`` as ``f(y)``, in place (a dict keeps its order); whether any was."""
    t = type(x)
    if t is list:
        new = [f(y) for y in x]
        changed = any(z is not y for y, z in zip(x, new))
        if changed:
            x[:] = new
        return changed
    if t is dict:
        keys = [f(k) for k in x]
        if any(a is not k for a, k in zip(keys, x)):  # a key: built again, in order
            items = [(a, f(y)) for a, y in zip(keys, x.values())]
            x.clear()
            x.update(items)
            return True
        changed = False
        for k, y in x.items():
            if (z := f(y)) is not y:
                x[k] = z
                changed = True
        return changed
    if t is set:
        swaps = [(y, z) for y in x if (z := f(y)) is not y]
        for y, z in swaps:
            x.discard(y)
            x.add(z)
        return bool(swaps)
    return False


#: Iterator types whose only use by a consumer is ``next``: the builtins',
#: itertools' and collections' (a file, also an iterator, is read otherwise).
_ITERATOR_MODULES = frozenset(("builtins", "itertools", "_collections", "collections"))


def _consumed(x: Any, record: Record) -> Any:
    """``x``, or, for an iterator (a generator, ``map``, ``dict.values()``'s
    iterator, ``itertools.chain``), one that gives its items and pins each
    traced number it gives (:class:`Pinning`)."""
    t = type(x)
    if not hasattr(t, "__next__") or not (t is GeneratorType or t.__module__ in _ITERATOR_MODULES):
        return x
    pinning = Pinning(x)
    record.iterators.add(Identity(pinning))  # made while tracing: the trace's own
    return pinning


def _passes_on(f: Any) -> bool:
    """Whether ``f`` only passes on the items of the iterators it is handed
    (``itertools.chain``, a ``deque``): the code that takes them from it is
    what may read them (a C function handed the chain pins them then)."""
    owner = f if isinstance(f, type) else getattr(f, "__self__", None)
    return isinstance(owner, type) and owner.__module__ in ("itertools", "collections")


class Pinning:
    """An iterator handed to a function the trace cannot see into: it gives
    that function the iterator's items one by one, as they are taken (the
    rest stays in the user's iterator), each traced number in them pinned
    (a guard)."""

    __slots__ = ("items",)

    def __init__(self, items: Any) -> None:
        self.items = items

    def __iter__(self) -> Pinning:
        return self

    def __next__(self) -> Any:
        item = next(self.items)
        within = flat_items(item)
        record = current()
        if within is None and record is not None:  # too many to look through
            within = record.floats
        pin(*within or ())
        return item


def flat_items(x: Any, limit: float = 10_000) -> list[Any] | None:
    """``x`` and what its lists, tuples, dicts, sets, dict views and deques
    hold, at any depth (iterating them changes nothing); None past
    ``limit`` entries."""
    found: list[Any] = []
    stack = [x]
    while stack:
        if len(found) + len(stack) > limit:
            return None
        y = stack.pop()
        t = type(y)
        if t is dict:
            stack.extend(y.keys())
            stack.extend(y.values())
        elif t in _CONTAINERS:
            stack.extend(y)
        else:
            found.append(y)
    return found


#: The containers :func:`flat_items` looks into (a dict: its keys and values).
_CONTAINERS = frozenset(
    (list, tuple, set, frozenset, deque) + (type({}.keys()), type({}.values()), type({}.items()))
)


def guard_whole(x: TracedFloat) -> float:
    """``x`` read as a whole (``float(v)``, formatting): replay only while
    it stays the same."""
    value = float.__float__(x)
    _guard(same, x, value, True)
    return origin(x) if type(origin(x)) is float else value  # (eager: float(x) is x)


# --------------------------------------------------------------------------
# Arithmetic: another TracedFloat
# --------------------------------------------------------------------------


def _binary(f: Callable[[Any, Any], Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def forward(self: TracedFloat, other: Any) -> Any:
        return _follow(f, self, other)

    def reflected(self: TracedFloat, other: Any) -> Any:
        return _follow(f, other, self)

    return forward, reflected


def _follow(f: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """``f(a, b)``, one of them a TracedFloat: another TracedFloat when it
    gives a float. What the trace cannot follow holds only for the
    operands' values (guards): a result of another type (a NumPy float64,
    a complex: ``x * np.sqrt(2.0)``, ``x ** 0.5`` for ``x < 0``), an operand
    of another type (``x * 1j``), an error (``1.0 / x`` at 0.0: an
    ``except`` branch traced)."""
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        if not isinstance(a, complex) and not isinstance(b, complex):
            return NotImplemented  # a Value's, a SymInt's own operation follows it
        _unfollowed(a, b, "a complex")
        return f(plain(a), plain(b))
    try:
        y = f(plain(a), plain(b))
    except BaseException as e:
        _unfollowed(a, b, type(e).__name__)
        raise
    if type(y) is float:
        return traced(y, ("op", f, recipe_of(a), recipe_of(b)))
    _unfollowed(a, b, type(y).__name__)
    return y


def _unfollowed(a: Any, b: Any, what: str) -> None:
    """The operands of an operation the trace cannot follow, pinned; the
    first such operation is named in the messages."""
    pin(a, b)
    record = current()
    if record is not None and not record.pins and (live(a) or live(b)):
        record.pins.append(
            f"a number read from a Value or a float argument gives {what} ({user_site()})"
        )


def plain(x: Any) -> Any:
    if type(x) is TracedFloat:
        return float.__float__(x)
    return x.value if isinstance(x, TracedInt) else x


#: The arithmetic that traced numbers follow: (dunder name, function).
ARITHMETIC: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("add", operator.add),
    ("sub", operator.sub),
    ("mul", operator.mul),
    ("truediv", operator.truediv),
    ("floordiv", operator.floordiv),
    ("mod", operator.mod),
    ("pow", operator.pow),
]
for _name, _f in ARITHMETIC:
    _fw, _rf = _binary(_f)
    setattr(TracedFloat, f"__{_name}__", _fw)
    setattr(TracedFloat, f"__r{_name}__", _rf)


def _unary(f: Callable[[Any], Any]) -> Callable[[TracedFloat], Any]:
    def method(self: TracedFloat) -> Any:
        out = traced(f(float.__float__(self)), ("op", apply1, f, self.recipe))
        found = getattr(self, "_origin", None)
        if f is operator.pos and found is not None and type(found[0]) is float:
            standing_for(out, *found)  # (``+x`` is ``x`` itself eagerly)
        return out

    return method


def apply1(f: Callable[[Any], Any], x: Any) -> Any:
    return f(x)


_UNARY: list[tuple[str, Callable[[Any], Any]]] = [
    ("neg", operator.neg),
    ("pos", operator.pos),
    ("abs", abs),
]
for _name, _g in _UNARY:
    setattr(TracedFloat, f"__{_name}__", _unary(_g))


def _whole(f: Callable[[float], Any]) -> Callable[[TracedFloat], Any]:
    def method(self: TracedFloat, *args: Any) -> Any:
        record = current()
        if record is not None and not record.pins and live(self):
            name = getattr(f, "__name__", "a method")
            record.pins.append(
                f"{_made_from([self.recipe])} is read whole by float's {name} ({user_site()})"
            )
        return f(guard_whole(self), *args)  # (the object eager code holds: float(x) is x)

    return method


for _name in ("int", "float", "round", "trunc", "floor", "ceil", "format", "str", "hash"):
    setattr(TracedFloat, f"__{_name}__", _whole(getattr(float, f"__{_name}__")))


def _hash(self: TracedFloat) -> int:
    """``hash(x)``: a set or dict finds a nan by identity only, which a
    replay cannot ask again: the function runs eagerly."""
    if float.__ne__(self, self) and live(self):
        identity_unseen("a nan is a key of a set or dict")
    return hash(guard_whole(self))


TracedFloat.__hash__ = _hash  # type: ignore[method-assign,assignment]
# float's other methods read the number whole: a guard each (``x.is_integer()``)
for _name in (
    "is_integer",
    "as_integer_ratio",
    "hex",
    "conjugate",
    "__divmod__",
    "__rdivmod__",
    "__getnewargs__",
    "__reduce__",
    "__reduce_ex__",
    "__sizeof__",
):
    setattr(TracedFloat, _name, _whole(getattr(float, _name)))


def _array_ufunc(self: TracedFloat, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """A NumPy ufunc (``np.exp(x)``) reads its float operands whole: guards."""
    plain_inputs = [guard_whole(x) if type(x) is TracedFloat else x for x in inputs]
    return getattr(ufunc, method)(*plain_inputs, **kwargs)


TracedFloat.__array_ufunc__ = _array_ufunc  # type: ignore[attr-defined]
for _name in ("real", "imag"):
    setattr(TracedFloat, _name, property(_whole(getattr(float, _name).__get__)))


def nonzero(a: float, b: float) -> bool:
    """``bool(a)`` for a float (``b`` is 0.0): nan is true."""
    return a != b


def _truth(self: TracedFloat) -> bool:
    """``if x:``: replayed while ``x`` stays zero, or stays nonzero."""
    return bool(_guard(nonzero, self, 0.0, float.__float__(self) != 0.0))


TracedFloat.__bool__ = _truth  # type: ignore[method-assign,assignment]


# --------------------------------------------------------------------------
# Comparisons: guards, or the builtin max/min
# --------------------------------------------------------------------------


class _Reduction:
    """``max(...)``/``min(...)`` over reads, as it runs: the candidates so
    far, the current winner, and each comparison (which candidate against
    which, its outcome: the guards that pin which one wins). The candidates
    are left as they are: the call's result is a new traced float
    (:func:`reduced`)."""

    def __init__(self, site: tuple[Any, ...], f: Any, first: Any) -> None:
        self.site = site
        self.f = f
        self.originals: list[Any] = [recipe_of(first)]
        self.winner = first
        self.at = 0  # the winner's place among the originals
        self.steps: list[tuple[int, int, bool]] = []  # (candidate, winner then, outcome)

    def guards(self) -> list[tuple[Any, Any, Any, bool]]:
        """The comparisons as guards (``item > winner`` for max)."""
        op = operator.gt if self.f is builtins.max else operator.lt
        return [(op, self.originals[i], self.originals[w], out) for i, w, out in self.steps]


#: The code objects of compile's copies (:mod:`chainrule.compiler.rewrite`
#: adds them): a ``max(...)``/``min(...)`` there hands its result to
#: :func:`reduced`; elsewhere its comparisons are guards.
COPY_CODES: set[CodeType] = set()

_calls: dict[tuple[CodeType, int], Callable[..., Any] | None] = {}


def _called_builtin(frame: FrameType) -> Callable[..., Any] | None:
    """``builtins.max`` or ``builtins.min`` when ``frame`` is in the middle
    of calling it as ``max(...)`` (no ``key=``, the name not shadowed),
    else None."""
    key = (frame.f_code, frame.f_lasti)
    if key not in _calls:
        _calls[key] = _call_site(frame.f_code, frame.f_lasti)
    found = _calls[key]
    if found is None:
        return None
    name = found.__name__
    resolved = frame.f_locals.get(name, frame.f_globals.get(name, getattr(builtins, name)))
    return found if resolved is found else None


def instruction_source(code: CodeType, lasti: int) -> str | None:
    """The source text of the instruction at ``lasti`` (a call: the whole
    ``max(...)`` expression; a subscript: ``table[i]``), or None where
    Python does not tell (3.10, no source file)."""
    co_positions = getattr(code, "co_positions", None)  # Python 3.11+
    if co_positions is None:
        return None
    positions = list(co_positions())
    if not 0 <= lasti // 2 < len(positions):
        return None
    line, end_line, col, end_col = positions[lasti // 2]
    if line is None or end_line is None or col is None or end_col is None:
        return None
    # columns count UTF-8 bytes
    lines = [s.encode("utf-8") for s in linecache.getlines(code.co_filename)[line - 1 : end_line]]
    if len(lines) != end_line - line + 1:
        return None
    if len(lines) == 1:
        text = lines[0][col:end_col]
    else:
        text = lines[0][col:] + b"".join(lines[1:-1]) + lines[-1][:end_col]
    return text.decode("utf-8", errors="replace")


#: One thread at a time parses (and compiles) source to trees here and in
#: :mod:`chainrule.compiler.rewrite`: CPython 3.11's AST objects keep one
#: recursion counter per interpreter, and two threads converting trees at
#: once (a switch inside, at a garbage collection) raise ``SystemError: AST
#: constructor recursion depth mismatch``.
AST_LOCK = threading.Lock()


def _call_site(code: CodeType, lasti: int) -> Callable[..., Any] | None:
    if code not in COPY_CODES:
        return None
    source = instruction_source(code, lasti)
    if source is None:
        return None
    try:
        with AST_LOCK:
            node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("max", "min")
        and not node.keywords
    ):
        return builtins.max if node.func.id == "max" else builtins.min
    return None


def _compare(f: Callable[[Any, Any], bool], reduces: Any) -> Callable[..., Any]:
    """A comparison method; ``reduces`` is the builtin (max for ``>``, min
    for ``<``) that calls it as ``new_item OP current_winner``."""

    def method(self: TracedFloat, other: Any) -> Any:
        if not isinstance(other, (int, float)):
            if isinstance(other, numbers.Number) and live(self):
                pin(self)  # (Decimal, complex: their own comparison reads the float whole)
            return NotImplemented
        result = f(float.__float__(self), plain(other))
        record = current()
        if record is None or not (live(self) or live(other)):
            return result  # (a float kept from another trace is the number it holds)
        if (
            (f is operator.eq or f is operator.ne)
            and other is not self
            and float.__ne__(self, self)
        ):
            _nan_against(self, other)  # (x != x itself: no object is asked)
        frame = sys._getframe(1)
        if reduces is None:
            if f is operator.eq and _called_builtin(frame) is not None:
                # max/min compares tuples (``max((v.data, k) ...)``): their
                # items are compared for equality first, then ordered
                record.compared = (self, other)
        elif (
            _called_builtin(frame) is reduces
            and live(self)
            and (type(other) is not TracedFloat or live(other))
            and not (
                record.compared is not None
                and record.compared[0] is self
                and record.compared[1] is other
            )
        ):
            site = (id(frame), frame.f_code, frame.f_lasti)
            if _reduce_step(record, site, reduces, self, other, result):
                return result
        return _guard(f, self, other, result)

    return method


def _nan_against(x: TracedFloat, other: Any) -> None:
    """``x == other`` for a nan ``x``: where both stand for one object, C
    code that asks identity first (``[x] == [y]``, ``x in gen``) finds it
    eagerly, and a plain ``==`` does not; which one asks is not told here:
    the function runs eagerly."""
    kx, ko = _identity_key(x), _identity_key(other)
    if kx is not None and ko is not None and ko is not _NO_FLOAT and kx[0] is ko[0]:
        identity_unseen("a nan is compared with the object it is (C code finds it by identity)")


def _reduce_step(
    record: Record, site: tuple[Any, ...], f: Any, item: Any, winner: Any, result: bool
) -> bool:
    """One step of ``max``/``min``: ``item`` against the current winner.
    False where the winner is a plain number (``min(1.0, step / 3)`` where
    1.0 wins): the caller guards this comparison instead (another outcome
    traces again)."""
    r = record.reductions.pop(site, None)
    if r is None or r.winner is not winner:
        r = _Reduction(site, f, winner)
    record.reductions[site] = r  # (the latest stepped: last)
    r.originals.append(recipe_of(item))
    r.steps.append((len(r.originals) - 1, r.at, result))
    if result:
        r.winner, r.at = item, len(r.originals) - 1
    return type(r.winner) is TracedFloat


def begin_reduction(frame: FrameType) -> None:
    """A ``max(...)``/``min(...)`` call of a copy starts in ``frame``: what
    an earlier call there left under way (it raised, the exception caught)
    is dropped, so its candidates never join this call's."""
    record = current()
    if record is not None and record.reductions:
        frame_id = id(frame)
        for site in [s for s in record.reductions if s[0] == frame_id and s[1] is frame.f_code]:
            del record.reductions[site]


def reduced(x: Any) -> Any:
    """What a ``max(...)``/``min(...)`` call of a copy returns: where it
    reduced traced floats, a new traced float with the reduction's recipe
    (the winner is the caller's own object, ``x`` or ``ds[t]``, whose other
    uses are its own number); remembered as standing for the winner, for
    ``is`` and ``id`` (:func:`winner_of`). A nan winner is handed back
    itself, with the comparisons as guards: C code finds a nan in a list by
    identity only (``ds.index(max(ds))``)."""
    record = current()
    if record is None or type(x) is not TracedFloat:
        return x
    r = next((r for r in reversed(record.reductions.values()) if r.winner is x), None)
    if r is None:
        return x
    del record.reductions[r.site]
    if x != x:
        record.guards.extend(r.guards())
        return x
    out = traced(float.__float__(x), ("reduce", r.f, list(r.originals)))
    earlier = record.reduced.get(Identity(x))  # (a running max: max(best, x))
    if earlier is None:
        record.reduced[Identity(out)] = (x, r.guards())
    else:
        record.reduced[Identity(out)] = (earlier[0], earlier[1] + r.guards())
    return out


def winner_of(x: Any) -> Any:
    """The object a ``max(...)``/``min(...)`` result stands for (itself
    otherwise): asked by identity (``m is x``, ``id(m)``), with the
    comparisons that chose it as guards."""
    record = current()
    if record is None or type(x) is not TracedFloat:
        return x
    found = record.reduced.get(Identity(x))
    if found is None:
        return x
    record.guards.extend(found[1])
    return found[0]


TracedFloat.__gt__ = _compare(operator.gt, builtins.max)  # type: ignore[method-assign]
TracedFloat.__lt__ = _compare(operator.lt, builtins.min)  # type: ignore[method-assign]
TracedFloat.__ge__ = _compare(operator.ge, None)  # type: ignore[method-assign]
TracedFloat.__le__ = _compare(operator.le, None)  # type: ignore[method-assign]
TracedFloat.__eq__ = _compare(operator.eq, None)  # type: ignore[method-assign]
TracedFloat.__ne__ = _compare(operator.ne, None)  # type: ignore[method-assign]


def recipe_nodes(r: Any, into: list[Any]) -> list[Any]:
    """The nodes whose values a recipe reads (appended to ``into``)."""
    if type(r) is tuple and r:
        kind = r[0]
        if kind == "node":
            into.append(r[1])
        elif kind == "op":
            for x in r[2:]:
                recipe_nodes(x, into)
        elif kind == "reduce":
            for x in r[2]:
                recipe_nodes(x, into)
    return into
