"""``chainrule.compile``: trace scalar code once, replay it on NumPy arrays.

>>> import chainrule
>>> from chainrule import Value
>>> w = [Value(0.5), Value(-1.0)]
>>> def loss(x):
...     return sum(wi * xi for wi, xi in zip(w, x)).relu()
>>> fast = chainrule.compile(loss, budget=False)  # (a function this small would run eagerly)
>>> out = fast([2.0, 0.25])  # the first call traces
>>> out = fast([2.0, 0.25])  # later calls replay
>>> out.backward()
>>> out.data, w[0].grad
(0.75, 2.0)

A call that traces runs ``fn`` as usual while watching
it (``chainrule.compiler.trace``) and captures the graph it builds as
index arrays and one value buffer (``chainrule.compiler.capture``,
``chainrule.compiler.program``). Later
calls with arguments of the same *key* skip ``fn`` and the Value objects:
they read the current ``.data`` of the leaves that existed before the call
(parameters, Values among the arguments) and run the graph level by level,
many nodes per NumPy call. The outputs are Values whose ``.data`` is current
and whose ``backward()`` adds the gradients into the leaves' ``.grad``,
as the eager ``backward()`` would.

The key (``chainrule.compiler.keys``): the nesting of the arguments
(lists' lengths, dicts' keys), the value of every str, bool, None and
NumPy scalar among them, the identity of other objects. Floats and leaf
Values among the arguments are inputs, read at every call (a float that a
C function reads whole, ``math.exp(x)``, is a guard instead:
``chainrule.compiler.escapes``). What the function reads besides its
arguments (globals, closures, ``self``) is guarded before every replay
(``chainrule.compiler.sources``). An output is one node of the caller's
graph, whose backward is the replay's. Ints are followed while tracing
(``chainrule.compiler.symbolic``): one that only picks an entry of a list
(``wte[token]``, ``probs[target]``) is replayed as a gather, one used
otherwise holds the trace to its value. To see the picks, a trace runs
copies of the user's functions compiled from their source, in which each
subscript and call goes through compile (``chainrule.compiler.rewrite``):
a pick hands back a stand-in for "entry ``i``" without touching the
list, so the user's objects are never modified, not even for a moment
(functions whose source is not the code that runs are run as they are,
and their picks hold the trace to the int's value). A new key, or ints a kept trace
does not hold for, traces again; at most ``max_traces`` traces are kept
(the least recently used is dropped). Values made inside ``fn`` from
numbers are constants of the trace.

When to trace is the budget's decision (``chainrule.compiler.budget``,
in seconds): the first call runs eagerly, timed; a function whose eager
call is too short for a replay to save time runs eagerly; a new graph is
traced at once while tracing has paid, else the second time it is met;
and when traces are not paid back by replays, calls with a new graph run
eagerly. One :class:`CompileWarning` says so. ``compile(fn,
budget=False)`` traces every graph at once.

Reads of ``.data`` inside ``fn`` are followed (see
``chainrule.compiler.reads``): used as an operation's constant they are
recomputed at every replay; the builtin ``max``/``min`` over them is
recomputed by the same builtin; any other comparison or conversion is a
guard, checked at every replay, and a replay where it would go the other
way traces again. What cannot be replayed (a micrograd ``_backward``
closure, ``Value(data, children, local_grads)`` nodes, writes to ``.data``
or reads of ``.grad`` inside ``fn``, a ``backward()`` inside ``fn``, an
output other than Values and numbers in tuples, lists and dicts, a read
float used where it cannot be followed) makes the
function run eagerly from then on, with one :class:`CompileWarning`
naming the reason and the line.

Forward values and gradients equal the eager ones bit for bit (a node's
gradient terms are added in the eager pass's order), except where the
eager walk would meet the nodes in another order than the trace's: see
``chainrule.compiler.program``.

Tracing swaps attributes of ``Value`` while ``fn`` runs (one thread at a
time, under a lock; only that thread's operations are recorded); the
cache is under a lock, and replays touch nothing else shared.

The layer above the engines and the training API (``optim`` for the
compiled step), which it may import; the engines never import it.

"""

from __future__ import annotations

import collections
import dataclasses
import functools
import gc
import itertools
import operator
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from copy import deepcopy
from types import MethodType
from typing import Any, ClassVar

from ..optim import Optimizer
from ..value import autograd
from ..value.engine import Value
from ..value.mode import mode
from ..value.protocols import UserOp
from . import budget, reads
from .budget import Budget
from .dispatch import as_value
from .escapes import drew, generators_state
from .keys import Call, Identity, NotReplayable, classify, describe, flatten, identities

__all__ = ["CompileWarning", "Compiled", "compile"]


class CompileWarning(UserWarning):
    """A compiled function runs eagerly instead (the message says why)."""


#: Why a compiled output cannot be differentiated again (``create_graph=True``).
NOT_AGAIN = (
    "a compiled function's output has no Values to differentiate again; "
    "call the function without chainrule.compile for create_graph=True"
)


class CompiledValue(Value):
    """An output of a replay: one node of the caller's graph whose inputs
    are the Values the captured graph reads (parameters, Values among the
    arguments) and whose backward is the replay's backward (as
    ``torch.autograd.Function`` wraps a region). Used in more arithmetic,
    summed over a batch, its gradient reaches the parameters as eagerly."""

    __slots__ = ("_program", "_slot", "_buffer", "_call", "_siblings", "__weakref__")
    _program: Any
    _slot: int
    _buffer: Any
    _call: Call
    # the nodes of the same call returned with it (``return h, loss``), by
    # slot: its backward() sets their .grad as the eager pass does; or None
    _siblings: tuple[tuple[int, weakref.ref[CompiledValue]], ...] | None

    def backward(self, gradient: Any = 1.0, *, create_graph: bool = False) -> None:
        """Add d self / d leaf into every leaf's ``.grad``, as
        :meth:`Value.backward` does for the eager graph."""
        if create_graph:
            raise TypeError(f"backward: {NOT_AGAIN}")
        from ..value.engine import _as_float

        seed = _as_float(gradient, "backward")
        if mode.observer is not None:  # detect_anomaly: the eager walk's check
            from .anomaly import check_backward  # (a replay: NumPy is there)

            check_backward(self._program, self._buffer, self._slot, seed, self._call)
        start = time.perf_counter()
        siblings = self._siblings
        if siblings is None:
            self._program.backward(self._buffer, self._slot, seed, self._call)
        else:  # the eager pass sets the gradient of every node the root depends on
            got = self._program.backward(
                self._buffer, self._slot, seed, self._call, [s for s, _ in siblings]
            )
            for slot, ref in siblings:
                v = ref()
                if v is not None and slot in got:
                    v.grad = got[slot]
        self.grad = seed
        if self._program.budget is not None:
            self._program.budget.backward(time.perf_counter() - start, self._program.eager_seconds)

    def __copy__(self) -> CompiledValue:
        """As eagerly's ``copy.copy`` of a node: its inputs and the call's
        other outputs shared; its backward is its own (a pass from the copy
        sets the nodes returned beside it, as from the original)."""
        new = _node_like(self, self._prev, self._program, self._buffer, self._call)
        if self._siblings is not None:
            new._siblings = tuple(
                (slot, weakref.ref(new) if ref() is self else ref) for slot, ref in self._siblings
            )
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledValue:
        """As eagerly's ``copy.deepcopy`` of a node, which copies its graph:
        the copy's backward adds into copies of the leaves (parameters,
        argument Values) and sets the copies of the nodes returned beside it
        (``h2, loss2 = deepcopy((h, loss))``), never the originals. The
        captured graph is shared; what it reads and writes is the copies."""
        prev = deepcopy(self._prev, memo)
        program = memo.get(id(self._program))
        if program is None:
            program = memo[id(self._program)] = self._program.rebound(
                deepcopy(self._program.live, memo)
            )
        call = memo.get(id(self._call))
        if call is None:
            values = deepcopy(self._call.values, memo)
            call = memo[id(self._call)] = dataclasses.replace(self._call, values=values)
        new = memo[id(self)] = _node_like(self, prev, program, deepcopy(self._buffer, memo), call)
        if self._siblings is not None:  # (copied too: in eager's graph, or a node beside)
            alive = [(slot, ref()) for slot, ref in self._siblings]
            new._siblings = tuple(
                (slot, weakref.ref(deepcopy(v, memo))) for slot, v in alive if v is not None
            )
        return new


def _node_like(
    v: CompiledValue, prev: tuple[Value, ...], program: Any, buffer: Any, call: Call
) -> CompiledValue:
    """A copy of the output ``v`` over the given inputs, program, buffer
    and call, with its own node backward (no siblings yet)."""
    new = object.__new__(CompiledValue)
    new.data, new.grad, new._prev, new._slot = v.data, v.grad, prev, v._slot
    new._local = (UserOp("compiled", _NodeBackward(new)),)
    new._program, new._buffer, new._call, new._siblings = program, buffer, call, None
    return new


as_value(CompiledValue)  # (fast(2.0) * m: the user's m.__rmul__ first, as for a Value)
# a Value by name, as eagerly ('Value' object is not subscriptable; pickle refuses it)
CompiledValue.__name__ = CompiledValue.__qualname__ = Value.__name__
CompiledValue.__module__ = Value.__module__


def _gradient_beside(v: CompiledValue, root: Any, seed: Any, reached: set[Any]) -> Any:
    """``gradients(root, [v])`` where ``v`` is a node returned beside
    ``root`` by the same call (``return h, loss``): outside root's graph
    (the call is one node), so the walk did not reach it; the replay's
    backward gives d root / d v, as the eager walk does through the graph
    that holds it. Where root's graph holds another output of the call,
    not the root itself, that derivative is not known: a clear error."""
    siblings = v._siblings
    if siblings is None or root is v:
        return 0.0
    if any(ref() is root for _, ref in siblings):
        got = v._program.backward(v._buffer, root._slot, seed, v._call, [v._slot])
        return got.get(v._slot, 0.0)  # (the leaves' .grad it added: put back by the walk)
    if any(ref() in reached for _, ref in siblings):
        raise TypeError(
            "gradients: the input is a node a compiled call returned beside another of its "
            "outputs that this graph uses: ask gradients() of that output itself, or call "
            "its backward() and read .grad"
        )
    return 0.0


def _node_backward(v: CompiledValue) -> None:
    """The chain rule of one compiled output inside a larger graph: the
    replay's backward, seeded with the output's gradient, adds into the
    inputs' ``.grad`` (a micrograd ``_backward`` closure's protocol), each
    term one by one, as the eager walk adds them (``Program.backward``
    ``within``)."""
    g = v.grad
    if type(g) is not float:
        raise TypeError(f"backward: {NOT_AGAIN}")
    program = v._program
    if mode.observer is not None:  # detect_anomaly: the eager walk's check
        from .anomaly import check_backward  # (a replay: NumPy is there)

        check_backward(program, v._buffer, v._slot, g, v._call)
    program.backward(v._buffer, v._slot, g, v._call, within=True)
    if (
        v._siblings is not None
        and not program.warned_beside
        and not autograd.aside.get()
        and _beside_on_path(v)
    ):
        # (a sibling's gradient through v would be its share of this pass only
        # where the pass does not reach it too: which the walk does not tell)
        program.warned_beside = True
        warnings.warn(
            "chainrule.compile: a backward pass from a graph built on a compiled output "
            "(loss * 2.0, a sum of losses) does not set .grad of the nodes returned beside "
            "it (return h, loss): h.grad stays as it was; call backward() on that output "
            "itself, or use chainrule.gradients(loss, [h])",
            CompileWarning,
            stacklevel=reads.user_stacklevel(),
        )


def _beside_on_path(v: CompiledValue) -> bool:
    """Whether a node returned beside ``v`` (alive, another slot) is one
    that ``v`` depends on in the captured graph: its ``.grad`` through ``v``
    is then not 0 (a metric or a head the loss does not use: nothing to
    say). Kept by slot, and by the call's ints where a program picks by
    them (the path depends on the picks), a few hundred at most."""
    program = v._program
    known = program.beside_paths
    others = [slot for slot, ref in v._siblings or () if slot != v._slot and ref() is not None]
    key = (v._slot, tuple(v._call.ints)) if program.picks_by_int else (v._slot, ())
    on_path = known.get(key)
    if on_path is None:
        seen = program._reach(v._slot, v._call)
        on_path = {slot for slot, _ in v._siblings or () if seen[slot]}
        if len(known) >= _BESIDE_PATHS:
            known.clear()
        known[key] = on_path
    return any(slot in on_path for slot in others)


#: In ``Compiled._why``: what changed between calls, named when a warning says it.
_CHANGED = "<what changed>"

#: Traces kept per graph (the same arguments' shapes): one per outcome of its
#: guards (a flag toggled between calls, a branch on an int), the latest used
#: tried first; a global that changes at every call does not pile up more.
PER_GRAPH = 8

#: The paths :func:`_beside_on_path` keeps per program.
_BESIDE_PATHS = 256


class _NodeBackward:
    """The closure of a compiled output's node: :func:`_node_backward` of
    the output, held weakly (no reference cycle keeps a replay's buffer
    alive until the collector runs)."""

    __slots__ = ("ref",)
    #: what a create_graph backward through it says (chainrule.value.edges)
    not_again = NOT_AGAIN
    #: what asking for its local derivatives says (explain, walkthrough, _local_grads)
    no_local_grads = (
        "_local_grads: a chainrule.compile output is one node that replays the "
        "function's graph, without local gradients to show; explain the function's "
        "eager result (call it without chainrule.compile)"
    )
    #: under detect_anomaly, it checks its own terms (chainrule.value.edges)
    observed = True

    def __init__(self, v: CompiledValue) -> None:
        self.ref = weakref.ref(v)

    def __call__(self) -> None:
        v = self.ref()
        if v is not None:
            _node_backward(v)


CompiledValue._gradient_beside = _gradient_beside  # type: ignore[attr-defined]


def _output(value: float, program: Any, slot: int, buffer: Any, call: Call) -> CompiledValue:
    v = object.__new__(CompiledValue)
    v.data = value
    v.grad = 0.0
    if program.arg_leaves:
        values = call.values
        v._prev = program.live_inputs + tuple(values[pos] for _, pos in program.arg_leaves)
    else:
        v._prev = program.live_inputs
    v._local = (UserOp("compiled", _NodeBackward(v)),)
    v._program, v._slot, v._buffer, v._call = program, slot, buffer, call
    v._siblings = None
    return v


class _Entry:
    __slots__ = (
        "program",
        "rebuild",
        "outputs",
        "holds",
        "eager_seconds",
        "sources",
        "snapshot",
        "objects",
        "objects_snapshot",
        "reached",
        "shared",
    )

    def __init__(
        self,
        program: Any,
        rebuild: Callable[[list[Any]], Any],
        outputs: list[Any],
        holds: Callable[[list[int]], bool],
        eager_seconds: float,
    ) -> None:
        self.program = program
        self.rebuild = rebuild
        # per output item: ("slot", i), ("arg", i), ("leaf", Value), ("recipe", f), ("as is", x)
        self.outputs = outputs
        self.holds = holds  # whether a call's int arguments are ones this trace holds for
        self.eager_seconds = eager_seconds  # an eager call of this graph (budget.eager_of)
        # the globals, closures and self it read: what (a sources.Sources, made
        # for this trace: a helper rebound since is followed) and their state
        self.sources: Any = None
        self.snapshot: Any = None
        # the state of the objects among its arguments (keyed by identity): None, or
        # a sources.Sources over them and its take() after the trace
        self.objects: Any = None
        self.objects_snapshot: Any = None
        # with Value arguments: the ids of the Values it reads otherwise (globals,
        # self, argument objects, the program's leaves), and the Value arguments
        # among them by position (a replay's must be these, and no others)
        self.reached: set[Identity] | None = None
        self.shared: dict[int, Value] = {}


class Compiled:
    """A function wrapped by :func:`compile`: call it as the function (with
    an ``optimizer``, a call is also that optimizer's training step on the
    loss it returns: see :func:`compile`).

    ``traces``, ``retraces`` (traces because a guard went the other way),
    ``hits`` (replays) and :meth:`stats` (with the time spent tracing and
    replaying) say how it went; ``eager_reason`` is set once it runs
    eagerly for good."""

    #: The attributes ``__init__`` sets (its counters, cache, budget), not the
    #: function's own: a function that reads ``step.scale`` of a compiled
    #: ``step`` is guarded on that, never on these (set below the class).
    _bookkeeping: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        fn: Callable[..., Any],
        max_traces: int = 32,
        optimizer: Optimizer | None = None,
        gc_while_tracing: bool = True,
        budget: bool = True,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"compile: expected a function, got {type(fn).__name__} {fn!r}")
        if not isinstance(max_traces, int) or max_traces < 1:
            raise ValueError(f"compile: max_traces must be a positive int, got {max_traces!r}")
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise TypeError(
                "compile: optimizer must be a chainrule.optim optimizer (SGD, Adam), "
                f"got {type(optimizer).__name__}"
            )
        if not isinstance(gc_while_tracing, bool):
            raise TypeError(
                f"compile: gc_while_tracing must be True or False, got {gc_while_tracing!r}"
            )
        if not isinstance(budget, bool):
            raise TypeError(f"compile: budget must be True or False, got {budget!r}")
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.max_traces = max_traces
        self.optimizer = optimizer
        self.gc_while_tracing = gc_while_tracing
        self.traces = 0  # how many times fn was traced
        self.retraces = 0  # of those, how many because a guard went the other way
        self.hits = 0  # replays
        self.eager_reason: str | None = None
        self.small: str | None = None  # too small to gain: eagerly while calls stay short
        self._long_calls: list[float] = []  # the last calls, one after another, that were not
        self.budget = Budget(enabled=budget)
        # key -> the traces kept for it (several when int values pin them), LRU order
        self._cache: collections.OrderedDict[Any, list[_Entry]] = collections.OrderedDict()
        self._lock = threading.Lock()  # the cache, the counters and the budget
        self._last_key: Any = None
        self._other_key: Any = None  # the last call's key that was not the one after it
        # ints as symbolic.SymInt and floats as reads.TracedFloat while tracing;
        # False for a function that reads the builtin type (type(x) is float
        # must hold): they are then keyed by value (escapes.reads_type)
        self.symbolic_ints: bool | None = None
        # the first escape of a float argument (escapes.CCalls), for messages
        self.pinned: str | None = None
        self._why: list[str] = []  # how the last trace's arguments were used (keys.describe)
        self._changed: Any = None  # (sources, snapshot) of the last guards that failed
        self._warned = False  # the budget's warning, once
        # the last trace changed what it read (a global, an argument object's
        # state): a second trace in a row that does gives up (a counter); one
        # that does not was a cache filling once (functools.singledispatch's)
        self._changed_state = False
        self._changes = 0  # traces that changed what they read (a few: then eagerly)
        self._warned_shared = False  # the warning of one list for several arguments, once
        self._sources: Any = None  # the globals, closures and self it reads (sources.Sources)

    @property
    def fn(self) -> Callable[..., Any]:
        """The function compiled (its traces and guards are this one's)."""
        return self._fn

    @fn.setter
    def fn(self, fn: Any) -> None:
        raise AttributeError(
            "a compiled function's fn cannot be changed (its traces and guards are the "
            "old one's): compile the new function, chainrule.compile(fn)"
        )

    def keys(self) -> list[Any]:
        """The keys of the traces kept, least recently used first."""
        with self._lock:
            return [key for key, entries in self._cache.items() for _ in entries]

    def stats(self) -> dict[str, Any]:
        """Traces, retraces, hits, and the seconds spent tracing and
        replaying (forward and backward)."""
        with self._lock:
            return {
                "traces": self.traces,
                "retraces": self.retraces,
                "hits": self.hits,
                "trace_seconds": self.budget.trace_seconds,
                "replay_seconds": self.budget.replay_seconds,
                "eager": self.eager_reason or self.small,
            }

    def memory(self) -> dict[str, int]:
        """Nodes and bytes of the most recent trace's captured graph."""
        with self._lock:
            if not self._cache:
                return {"nodes": 0, "bytes": 0}
            program = next(reversed(self._cache.values()))[-1].program
        return {"nodes": program.n, "bytes": program.nbytes()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._call(args, kwargs)
        return out if self.optimizer is None else self._train(out)

    def _chainrule_inlined(self) -> Callable[..., Any] | None:
        """What a call of this function runs while another one traces (as
        part of that trace, :meth:`_call`): ``fn``; None for a training
        step, whose update runs as it is."""
        return self.fn if self.optimizer is None else None

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        """``@chainrule.compile`` on a method: bound to ``obj``, a call
        passes it as the first argument (an object keyed by identity, its
        state guarded: two instances never share a trace)."""
        return self if obj is None else MethodType(self, obj)

    def _own(self) -> dict[str, Any]:
        """The attributes that are the function's, not compile's: its names
        (``__qualname__``), what it carried (``fn.__dict__``) and what was
        set on this object since (``step.scale = 2.0``)."""
        names = functools.WRAPPER_ASSIGNMENTS
        return {k: v for k, v in vars(self).items() if k in names or k not in self._bookkeeping}

    def _fresh(self, fn: Callable[..., Any], optimizer: Optimizer | None, own: Any) -> Compiled:
        """A Compiled of ``fn`` with this one's options and ``own``
        attributes, and no traces, counters or budget of its own yet."""
        new = object.__new__(type(self))
        new._refill(fn, optimizer, self, own)
        return new

    def _refill(self, fn: Callable[..., Any], optimizer: Any, like: Compiled, own: Any) -> None:
        """Initialise ``self`` as :meth:`_fresh` says (split from it: a
        ``deepcopy`` records the new object in its memo before copying ``fn``,
        which may lead back to it: ``net.fast = compile(net.loss)``)."""
        Compiled.__init__(
            self, fn, like.max_traces, optimizer, like.gc_while_tracing, like.budget.enabled
        )
        vars(self).update(own)

    def __copy__(self) -> Compiled:
        """A new compiled function of the same ``fn`` and optimizer, with
        traces of its own (none yet)."""
        return self._fresh(self.fn, self.optimizer, self._own())

    def __deepcopy__(self, memo: dict[int, Any]) -> Compiled:
        """A compiled function of ``copy.deepcopy(fn)``: a bound method is
        bound to the copy of its object, as eagerly (``best =
        copy.deepcopy(net)`` holding ``net.fast = compile(net.loss)``), and
        the optimizer is copied with it (shared where ``fn`` is the same
        function). Never the traces: their guards and programs hold the
        original objects; the copy traces anew."""
        new = memo[id(self)] = object.__new__(type(self))
        fn = deepcopy(self.fn, memo)
        optimizer = self.optimizer if fn is self.fn else deepcopy(self.optimizer, memo)
        new._refill(fn, optimizer, self, deepcopy(self._own(), memo))
        return new

    def __reduce__(self) -> Any:
        """Pickled by reference where its module's attribute of its
        ``__qualname__`` is this object (a module-level ``@chainrule.compile
        def``, as a function pickles); else as ``fn`` (by pickle's own rules)
        with the options, unpickled as a new compiled function without traces."""
        name = getattr(self, "__qualname__", None)
        target: Any = sys.modules.get(self.__module__)
        for part in (name or "<no name>").split("."):
            target = getattr(target, part, None)
        if target is self:
            return name
        options = (self.max_traces, self.optimizer, self.gc_while_tracing, self.budget.enabled)
        return (type(self), (self.fn, *options), self._own())

    def _train(self, loss: Any) -> Value:
        """``zero_grad()``, ``loss.backward()``, ``step()``: on arrays for a
        replay (``chainrule.compiler.step``)."""
        optimizer = self.optimizer
        assert optimizer is not None
        if not isinstance(loss, Value):
            name = _named(self.fn)
            raise TypeError(
                f"chainrule.compile(optimizer=...): {name} must return the loss, one Value; "
                f"it returned {type(loss).__name__}"
            )
        # a replay of this function's own (its budget is ours): another compiled
        # step's loss, returned by fn, was trained by that one, eagerly's order
        if (
            type(loss) is CompiledValue
            and loss._program.budget is self.budget
            and optimizer.on_arrays()
        ):
            from .step import train  # a replay: NumPy is there

            start = time.perf_counter()
            program = loss._program
            train(program, loss._buffer, loss._slot, loss._call, optimizer)
            loss.grad = 1.0
            if program.budget is not None:
                program.budget.backward(time.perf_counter() - start, program.eager_seconds)
        else:
            if not self.budget.eager_backwards:
                _load_flat_path()  # (not in the first step's time: its budget)
            start = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with self._lock:  # what a replay's backward and update save
                self.budget.ran_backward_eagerly(time.perf_counter() - start)
        return loss

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.eager_reason is not None or not mode.fast or reads.current() is not None:
            # (called while this thread traces another compiled function: fn is
            # part of that trace, as torch.compile inlines a nested one)
            if reads.current() is not None:
                from . import rewrite

                return rewrite._call(self.fn, *args, **kwargs)
            return self.fn(*args, **kwargs)
        if self.small is not None:
            return self._small_call(args, kwargs)
        first = not self.budget.eager_runs and self.budget.active()
        if not first:
            try:
                import numpy  # noqa: F401
            except ImportError:
                raise ImportError(
                    "chainrule.compile replays graphs with NumPy: pip install numpy"
                ) from None

        try:  # (keyword arguments: a dict after the positional ones)
            items, rebuild_args, shape = flatten((list(args), kwargs) if kwargs else list(args))
        except NotReplayable as e:
            return self._eager(str(e), args, kwargs)
        if self.symbolic_ints is None:
            from .escapes import reads_type

            self.symbolic_ints = not reads_type(self.fn)
        try:
            call = classify(items, shape, self.symbolic_ints)
        except NotReplayable as e:
            return self._eager(str(e), args, kwargs)
        if first:  # (its graph counted as met)
            with self._lock:
                self.budget.first_sight(call.key)
            return self._first_call(args, kwargs, call.key)
        tried: list[_Entry] = []  # (kept: a flag toggled back finds its trace again)
        while True:
            with self._lock:
                entry = self._lookup(call, tried)
            if entry is None:
                break
            start = time.perf_counter()
            sources = entry.sources
            fresh = sources is None or sources.hold(entry.snapshot)
            held = (entry.objects is None or entry.objects.hold(entry.objects_snapshot)) and (
                entry.reached is None or _shared_alike(entry, call.values)
            )
            buffer = entry.program.forward(call) if fresh and held else None
            if buffer is not None:
                out = _outputs(entry, buffer, call)
                with self._lock:
                    self.hits += 1
                    self.budget.replayed(time.perf_counter() - start, entry.eager_seconds)
                    slower = self.budget.replays_lose()
                if slower is not None:
                    self._eager(slower, None)
                return out
            with self._lock:  # a guard went the other way, or a global changed: another
                tried.append(entry)  # trace of this graph, or a new one
                if not fresh:  # (what changed: found only if a warning says it)
                    self._why, self._changed = [_CHANGED], (sources, entry.snapshot)
                elif not held:
                    objects = _objects(_argument_objects(call))
                    self._why = [
                        f"the state of {objects} changes between calls, or a "
                        "Value passed as an argument is one it also reads through a global, "
                        "self or an argument object in one call and not another (each change "
                        "is a new trace)"
                    ]
                else:  # (a guard of the program's, or a leaf's .data no float: named)
                    from .program import odd_number

                    odd = odd_number([v.data for v in entry.program.live])
                    if odd is not None:
                        self._why = [odd]
        with self._lock:
            sight = self.budget.first_sight(call.key)
            warn = sight in ("eager", "rare") and not self._warned and self.budget.mostly_met_once()
            last, self._last_key = self._last_key, call.key
            if last is not None and last != call.key:
                self._other_key = last
            elif self._other_key is not None:  # (the same graph twice: what it differs from)
                last = self._other_key
        if warn and last is not None:  # most calls meet a graph that is not traced
            if sight == "rare":
                reason = (
                    f"most of the last {budget.WINDOW} calls met a graph met too rarely to "
                    "repay a trace (a trace costs about "
                    f"{self.budget.trace_estimate(self.budget.eager_estimate()):.3g} s)"
                )
            else:
                reason = f"most of the last {budget.WINDOW} calls met a graph not seen before"
            self._warn_eager(f"{reason} ({describe(last, call.key, self._reasons())})", 4)
        if sight in ("eager", "rare"):  # the first call, a graph met once, or met too rarely
            return self._timed_eager(args, kwargs, call.key)
        if sight == "small":
            self._too_small(self.budget.eager_estimate(), 4)
            return self._small_call(args, kwargs)
        with self._lock:
            refused = self.budget.refuse()
            if refused is None:
                self.traces += 1
                self.retraces += bool(tried)  # (no kept trace of this graph held)
            elif last is not None:
                refused += f" ({describe(last, call.key, self._reasons())})"
        if refused is not None:
            return self._refused(refused, args, kwargs, call.key)
        from .reads import Record
        from .trace import release

        record = Record()
        try:
            with _collector_paused(not self.gc_while_tracing):
                return self._trace_and_capture(call, items, rebuild_args, args, kwargs, record)
        finally:
            release(record)  # (the nodes the trace made that outlive it are plain Values)

    def _reasons(self) -> list[str]:
        """``_why`` for a message, with what changed between calls named
        (:meth:`~chainrule.compiler.sources.Sources.changed`: a walk of the
        guards, made only where a warning says it)."""
        reasons = list(self._why)
        if _CHANGED in reasons:
            sources, snapshot = self._changed
            reasons[reasons.index(_CHANGED)] = (
                f"{sources.changed(snapshot)} (a global, a closure's or self's value that it "
                "reads, or what they hold) changes between calls (each change is a new trace)"
            )
        return reasons

    def _lookup(self, call: Call, tried: list[_Entry]) -> _Entry | None:
        """The kept trace for this call not ``tried`` yet, the latest used
        first (under the lock)."""
        entries = self._cache.get(call.key)
        if not entries:
            return None
        ints = call.ints
        for entry in reversed(entries):
            if entry.holds(ints) and not any(entry is t for t in tried):
                self._cache.move_to_end(call.key)
                entries.remove(entry)  # (the latest used: last)
                entries.append(entry)
                return entry
        return None

    def _keep(self, key: Any, entry: _Entry) -> None:
        entries = self._cache.setdefault(key, [])
        entries.append(entry)
        if len(entries) > PER_GRAPH:  # (a global that changes at every call: no pile)
            entries.pop(0)
        self._cache.move_to_end(key)
        kept = sum(len(e) for e in self._cache.values())
        while kept > self.max_traces:
            oldest = next(iter(self._cache))
            self._cache[oldest].pop(0)
            if not self._cache[oldest]:
                del self._cache[oldest]
            kept -= 1

    def _trace_and_capture(
        self,
        call: Call,
        items: list[Any],
        rebuild_args: Callable[[list[Any]], Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        record: Any,
    ) -> Any:
        import numpy

        from . import capture as P
        from . import rewrite
        from . import step as _step  # noqa: F401  (its replays': loaded before the snapshot)
        from .reads import standing_for, traced
        from .slotreads import operators
        from .symbolic import SymInt, int_checker
        from .trace import Unsupported, grad_written, parts_written, run_traced

        # (first: it imports numpy.random, which a function that reads sys.modules
        # must not see as its own change, and which is not the trace's cost)
        generators = generators_state()
        start = time.perf_counter()
        copying = rewrite.COPYING[0]  # (the copies made: once per function, not per trace)
        from .sources import Sources

        # (made at each trace: what the function reaches now, a helper rebound
        # since the last trace included)
        sources = self._sources = Sources(self.fn, self.optimizer)
        before = sources.take()
        objects = _object_sources(call, sources.names)
        objects_before = None if objects is None else objects.take()
        caches = rewrite.caches_in(itertools.chain(before, objects_before or ()))
        fed: list[Any] = []
        floats = iter(range(len(call.floats)))
        ints = iter(range(len(call.ints)))
        for x, part in zip(items, call.key[1:]):
            if part is float:
                k = next(floats)
                arg = call.floats[k]
                fed.append(standing_for(traced(arg, ("arg", k)), arg, ("arg", k)))
            elif part is int:
                k = next(ints)
                fed.append(SymInt(call.ints[k], ("int", k), record))
            else:
                fed.append(x)
        # fn runs on copies of the argument containers (the floats and ints
        # in them traced): what it changes in them is written back below
        copies = rebuild_args(fed)
        containers = _containers(copies, (list(args), kwargs) if kwargs else list(args), [])
        record.arg_copies = {Identity(c): o for c, o, _ in containers}
        mutable = [id(o) for _, o, before in containers if before is not None]
        if len(set(mutable)) < len(mutable):
            # one list or dict for several arguments: the copies would be two
            # objects, so this call runs eagerly (and is not traced)
            with self._lock:
                self.traces -= 1
                first, self._warned_shared = not self._warned_shared, True
            if first:
                name = _named(self.fn)
                warnings.warn(
                    f"chainrule.compile: {name} runs a call eagerly, not traced, where one "
                    "list or dict is passed twice among its arguments, for several of them or "
                    "twice inside one (a batch holding one row twice: batch + [row] * 4, "
                    "[[0.0] * d] * n); a trace runs on copies of them, which would be two "
                    "objects: pass it once, or pass copies ([list(r) for r in batch])",
                    CompileWarning,
                    stacklevel=5,
                )
            return self._timed_eager(args, kwargs, call.key)
        # fn's own exception, if it raises, once (its side effects happened once)
        # the trace runs the copy of fn that hands back gathers' stand-ins
        # instead of putting them in the user's lists (rewrite)
        try:
            if kwargs:
                out, created, run_seconds, escaped = run_traced(
                    _call_with_keywords,
                    (self.fn, copies[0], copies[1]),
                    record,
                    bool(call.floats),
                    rewrite.RELAY | {_call_with_keywords.__code__},
                    rewrite.hands_on,
                    operators,
                )
            else:
                out, created, run_seconds, escaped = run_traced(
                    rewrite.call,
                    (self.fn, *copies),
                    record,
                    bool(call.floats),
                    rewrite.RELAY,
                    rewrite.hands_on,
                    operators,
                )
        except BaseException:
            _write_rows(record)
            _write_back(containers)
            raise
        rows = _write_rows(record)
        written = _write_back(containers)
        cut = grad_written(record) or parts_written(record)
        if cut is not None:
            record.problems.append(cut)
        if drew(generators, generators_state()):
            record.problems.append(
                "it draws random numbers from code compile does not copy (a @dataclass's "
                "__init__ with a default_factory, a library's function), or another thread "
                "drew while it traced: a replay would reuse the traced ones"
            )
        unseen = rewrite.unseen_miss(caches, record) if caches else None
        if unseen is not None:
            record.problems.append(unseen)
        if rows:
            record.problems.append(
                "it changes a row picked by an int argument in place (row = R[i]; "
                "row.append(v) or row[0] = v: a replay would not change it; it runs on the "
                "list's own rows eagerly)"
            )
        if written is not None:
            record.problems.append(
                f"it changes {written} in place (a replay would not change it; it runs on "
                "the caller's own lists and dicts eagerly)"
            )
        if escaped is not None:
            # a C function may have read a float argument whole: this trace
            # holds for these floats only, bit for bit
            self.pinned = self.pinned or escaped
            for k, x in enumerate(call.floats):
                record.guards.append((reads.same, ("arg", k), x, True))
            if len(call.floats) > 1:  # (and which of them are one object)
                record.guards.append((identities, None, identities(call.floats), True))
        snapshot = sources.take()
        if not sources.complete:
            record.problems.append(sources.why)  # (too much, or a container it cannot walk)
        changed = None
        if not sources.hold(before):
            changed = (
                "it changes a global, a closure's or self's value while it runs (a counter, a "
                "list it appends to): a replay would not"
            )
        objects_snapshot = None
        if objects is not None:
            objects_snapshot = objects.take()
            if not objects.complete:
                from .sources import LIMIT

                record.problems.append(
                    f"it reads more than {LIMIT:,} numbers and objects through "
                    f"{_objects(_argument_objects(call))}, too many to check before every replay"
                )
            elif not objects.hold(objects_before):
                changed = changed or (
                    f"it changes the state of {_objects(_argument_objects(call))} while it runs: a "
                    "replay would not"
                )
        # (the first of two traces in a row that change what they read: the next call traces)
        once = (
            changed is not None
            and not self._changed_state
            and self._changes < 3
            and not record.problems
        )
        self._changed_state = changed is not None
        self._changes += changed is not None
        if changed is not None:
            record.problems.append(changed)
        self._why = [*record.pins]
        if escaped is not None:
            self._why.append(f"a float argument is read whole by {escaped}")
        arg_values = call.values
        # the containers that existed before the call: eager hands back the very object
        known = _before_call(before, objects_before, containers, record)
        try:
            try:
                out_items, rebuild, _ = flatten(out, known)
            except NotReplayable as e:
                out_items, rebuild = _values_in(out), lambda _: out
                raise Unsupported(str(e)) from None
            if record.problems:
                raise Unsupported(record.problems[0])
            for x in out_items:
                if Identity(x) in known:
                    _, replay, words = known[Identity(x)]
                    if replay is None:
                        raise Unsupported(
                            f"it returns {words} (eagerly that very {type(x).__name__}, which "
                            "the caller may change; a replay would hand back a new one)"
                        )
                elif isinstance(x, Value) and any(
                    Identity(c) in record.made_leaves
                    and (not c._prev or c in record.leaf_recipes)  # (a leaf eagerly)
                    for c in (_may_pick(x, record) if x in record.aliases else (x,))
                ):
                    raise Unsupported(
                        "it returns a Value it made as a leaf (Value(x), v.detach()): eagerly "
                        "that leaf, whose .grad a backward pass through the others fills and "
                        "whose label is its own; a replay would hand back a new node: pass it "
                        "as an argument"
                    )
                elif not (isinstance(x, Value) or hasattr(x, "recipe") or _as_is(x)):
                    raise Unsupported(
                        f"it returns a {type(x).__name__} (not a Value, a number or a "
                        "tuple, list or dict of them): a replay would hand back the object "
                        "this trace made"
                    )
            values = [x for x in out_items if isinstance(x, Value)]
            picks = [v for v in values if v in record.aliases] if len(values) > 1 else []
            used = _used_directly(record, values) if picks else (set(), set())
            if any(_picks_a_used_node(v, record, used) for v in picks):
                raise Unsupported(
                    "it returns an entry picked by an int argument from a list of nodes it "
                    "made (h[k]) beside other Values: eagerly that very node, whose .grad "
                    "gathers every use of it; a replay hands back the pick: return it alone"
                )
            recipes = [x.recipe for x in out_items if hasattr(x, "recipe")]
            positions = {v: i for i, v in enumerate(arg_values)}
            program = P.build(values, recipes, created, positions, record)
        except Unsupported as e:
            if isinstance(e, P.MadeOutside):  # named, where fn reads it by a name
                e = P.MadeOutside(e.node, sources.name_of(e.node, self.fn))
            if not (once and str(e) == record.problems[-1]):  # (once: the next call traces)
                self._eager(str(e), None, stacklevel=5)
            # the trace ran fn: its result (and what it put in the arguments) is this call's
            # (and the nodes it put in a functools cache)
            extra = [x for o in (*(o for _, o, _ in containers), *rows) for x in _values_in(o)]
            return _untraced(out_items, record, rebuild, known, extra + record.cached)
        outputs: list[Any] = []
        made = set(created)
        for x in out_items:
            if Identity(x) in known:  # (one a replay hands back too: as the trace's)
                outputs.append(known[Identity(x)][1])
            elif isinstance(x, Value):
                if x in positions:
                    outputs.append(("arg", positions[x]))
                elif x in record.aliases:  # a pick: the entry itself, as eagerly
                    outputs.append(_picked(x, program.node_slot, record, positions, made))
                elif not x._prev and x not in made:
                    outputs.append(("leaf", x))
                else:
                    outputs.append(("slot", program.node_slot[x]))
            elif hasattr(x, "recipe"):
                outputs.append(("recipe", P.recipe_function(program, x.recipe)))
            else:
                outputs.append(("as is", x))
        # nodes returned together (a pick that may land on one: "node pick"):
        # each one's backward fills the others' .grad
        nodes = [kind for kind, x in outputs if kind == "slot" or _may_be_node(kind, x)]
        if len(nodes) > 1:
            together = {"slot": "node", "pick": "node pick"}
            outputs = [
                (together[kind], x) if kind == "slot" or _may_be_node(kind, x) else (kind, x)
                for kind, x in outputs
            ]
        program.node_slot = {}  # the traced graph can be freed
        program.budget = self.budget
        with self._lock:
            eager = self.budget.eager_of(call.key, run_seconds)
        program.eager_seconds = eager  # an eager call of this graph (budget.eager_of)
        entry = _Entry(program, rebuild, outputs, int_checker(record.int_guards), eager)
        entry.sources, entry.snapshot = sources, snapshot
        entry.objects, entry.objects_snapshot = objects, objects_snapshot
        if arg_values:
            # by identity (keys.Identity holds its Value: no stale match)
            reached = {Identity(v) for v in program.live_inputs}
            for x in itertools.chain(snapshot, objects_snapshot or ()):
                if isinstance(x, Value):
                    reached.add(Identity(x))
            # (an argument whose identity fn asked for, id(p): that very Value)
            reached.update(Identity(v) for v in arg_values if Identity(v) in record.identified)
            entry.reached = reached
            entry.shared = {k: v for k, v in enumerate(arg_values) if Identity(v) in reached}
        if program.arg_slots is not None:  # (the traced values of the float arguments guarded)
            program.base[program.arg_slots] = [call.floats[k] for k in program.arg_positions]
        buffer = program.forward(call, late=False)  # (the caches: called by the trace)
        if buffer is None or not numpy.array_equal(buffer, program.base, equal_nan=True):
            # a guard that does not hold on the traced values, or a node whose
            # replayed value is not its traced one (a write to .data of a node
            # made inside fn, an operation that gives another result when run
            # again): the trace's own result is this call's
            self._eager(
                "replaying the trace does not give the values it traced (a guard that "
                "does not hold, a write to .data of a node made inside the function, or "
                "an operation that gives another result when run again)",
                None,
                stacklevel=5,
            )
            return _untraced(out_items, record, rebuild, known)
        result = _outputs(entry, buffer, call)
        with self._lock:
            self._keep(call.key, entry)
            copied = rewrite.COPYING[0] - copying
            self.budget.traced(time.perf_counter() - start, run_seconds, eager, copied)
        return result

    def _refused(self, reason: str, args: Any, kwargs: dict[str, Any], key: Any) -> Any:
        """A call whose graph is new while tracing does not pay: eagerly (the
        traces kept still replay), with one warning the first time."""
        self._warn_eager(reason, 5)
        with self._lock:
            self.budget.remember(key)
        return self._timed_eager(args, kwargs, key)

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Any) -> Any:
        """The first call: eagerly, timed (an eager call's true time before
        any trace is paid for, its graph's own: ``key``); one too short to
        gain makes the function run eagerly while its calls stay short."""
        start = time.perf_counter()
        out = self.fn(*args, **kwargs)
        took = time.perf_counter() - start
        with self._lock:
            self.budget.ran_eagerly(took, key)
        if took < budget.MIN_CALL:
            self._too_small(took, 5)
        return out

    def _too_small(self, eager: float, stacklevel: int) -> None:
        """Eagerly from now on while calls stay short (one warning, pointing
        ``stacklevel`` frames up: the user's call)."""
        with self._lock:
            first = self.small is None and not self._warned
            self._warned = True
            self.small = (
                f"an eager call takes {eager * 1e6:.0f} us, too short for a replay to save "
                f"time (under {budget.MIN_CALL * 1e6:.0f} us: a replay's NumPy calls cost "
                "about that)"
            )
        if first:
            name = _named(self.fn)
            warnings.warn(
                f"chainrule.compile: {name} runs eagerly: {self.small}",
                CompileWarning,
                stacklevel=stacklevel,
            )

    def _small_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call of a function too small to gain: eagerly, timed; calls
        that take longer than :data:`~chainrule.compiler.budget.MIN_CALL`,
        :data:`~chainrule.compiler.budget.LONG_CALLS` in a row, end that
        (its graph grew with its arguments), and the budget decides again."""
        start = time.perf_counter()
        out = self.fn(*args, **kwargs)
        took = time.perf_counter() - start
        if took < budget.MIN_CALL:
            self._long_calls.clear()
            return out
        with self._lock:
            # (one long call is a pause, a garbage collection, another
            # thread holding the interpreter: LONG_CALLS in a row are not)
            self._long_calls.append(took)
            if len(self._long_calls) >= budget.LONG_CALLS:
                self.small = None
                self.budget.grew = True
                self.budget.forget_eager_runs()
                for t in self._long_calls:
                    self.budget.ran_eagerly(t)
                self._long_calls.clear()
        return out

    def _warn_eager(self, reason: str, stacklevel: int) -> None:
        """The warning that calls with a new graph run eagerly, once
        (pointing ``stacklevel`` frames up: the user's call)."""
        if not self._warned:
            self._warned = True
            name = _named(self.fn)
            warnings.warn(
                f"chainrule.compile: {name} runs eagerly where it would trace (a graph that "
                "is new, or a kept trace whose guard went the other way) while its replays "
                f"have not paid for its traces: {reason}; pass what changes as floats or "
                "Values (inputs), or call the function without chainrule.compile",
                CompileWarning,
                stacklevel=stacklevel,
            )

    def _timed_eager(self, args: Any, kwargs: dict[str, Any], key: Any = None) -> Any:
        """``fn`` called eagerly on the caller's own arguments, timed."""
        start = time.perf_counter()
        out = self.fn(*args, **kwargs)
        with self._lock:
            self.budget.ran_eagerly(time.perf_counter() - start, key)
        return out

    def _eager(
        self, reason: str, args: Any, kwargs: dict[str, Any] | None = None, stacklevel: int = 4
    ) -> Any:
        """From now on, run ``fn`` as it is (and now, with ``args``); the
        warning points ``stacklevel`` frames up (the user's call)."""
        with self._lock:
            first = self.eager_reason is None and not self._warned
            self._warned = True
            self.eager_reason = reason
            self._cache.clear()
        if first:
            name = _named(self.fn)
            warnings.warn(
                f"chainrule.compile: {name} runs eagerly: {reason}",
                CompileWarning,
                stacklevel=stacklevel,
            )
        return None if args is None else self.fn(*args, **(kwargs or {}))


Compiled._bookkeeping = frozenset(vars(Compiled(lambda: None)))


def _load_flat_path() -> None:
    """Load what an optimizer's first step on arrays imports (NumPy and
    :mod:`chainrule.tensor.floatpack`, 0.05-0.1 s), so that the budget
    times a step, not an import."""
    with suppress(ImportError):  # (no NumPy: the loop, which imports nothing)
        from ..tensor import floatpack  # noqa: F401


@contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """With ``pause``, Python's cyclic garbage collector off while the block
    runs and on again after it (if it was on): ``gc_while_tracing=False``.
    A trace grows the heap by its whole graph, and each full collection
    while it runs walks all of it."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: Outputs a replay hands back as the trace returned them: immutable
#: values that a trace can only return unchanged (a read float or a
#: followed int is a recipe; one read whole holds the trace to its value).
_IMMUTABLE = frozenset((type(None), bool, int, float, complex, str, bytes))


def _as_is(x: Any) -> bool:
    """Whether ``x``, an output of a trace, is a replay's output too."""
    if type(x) in _IMMUTABLE:
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.generic) and not x.dtype.hasobject


def _call_with_keywords(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` as a trace runs it (``rewrite.call``, with keywords)."""
    from . import rewrite

    return rewrite._call(fn, *args, **kwargs)


def _named(fn: Any) -> str:
    """A compiled function's function for a message: its qualified name; a
    ``functools.partial``'s, its function's (not the repr of what it holds:
    a model printed whole); else its type's."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({_named(fn.func)})"
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else f"a {type(fn).__name__} object"


def _shared_alike(entry: _Entry, values: list[Value]) -> bool:
    """Whether the Value arguments a replay reads are the trace's where the
    trace read them also otherwise, and none of the others is a Value the
    program reads otherwise (``f(w)`` of a global ``w``, and ``f(u)``)."""
    reached = entry.reached
    assert reached is not None
    shared = entry.shared
    for k, v in enumerate(values):
        s = shared.get(k)
        if s is not None:
            if s is not v:
                return False
        elif Identity(v) in reached:
            return False
    return True


def _object_sources(call: Call, names: tuple[str, ...]) -> Any:
    """A :class:`~chainrule.compiler.sources.Sources` whose bindings are the
    objects among a call's arguments (None when there are none): its
    ``take``/``hold`` walk everything reachable from them, as for globals
    and ``self``, arrays at any size by their bytes (a large array passed
    as an argument is keyed by identity), the entries of their classes
    of the user's (``Model.temperature``, a method patched on the class:
    :func:`~chainrule.compiler.sources.user_spaces`, as for any object the
    walk enters; :func:`~chainrule.compiler.sources.class_roots` for a class
    passed, which is not entered), and
    of a module among them the attributes in ``names``, those the
    function's code reads (as for a global module)."""
    from .sources import Sources, class_roots

    objects = _argument_objects(call)
    made = _argument_classes(call)  # (a named tuple's class, a Value subclass's)
    if not objects and not made:
        return None
    sources = Sources.of(list(objects), names)
    made.extend(x for x in objects if isinstance(x, type))
    sources.roots += {id(r): r for x in made for r in class_roots(x)}.values()
    return sources


def _argument_classes(call: Call) -> list[type]:
    """The classes of the user's among a call's arguments that the key
    holds as their shape, not by identity: a named tuple's (its fields
    are the key; its methods and class attributes are guarded as an
    argument object's), a Value subclass's (its number is an input; what
    its methods read is guarded)."""
    from .sources import user_spaces

    found = [type(v) for v in call.values if type(v) is not Value]
    stack = [call.key[0]]
    while stack:
        x = stack.pop()
        if type(x) is tuple:
            stack.extend(x)
        elif isinstance(x, type) and x not in _SHAPES:
            found.append(x)
    return [k for k in dict.fromkeys(found) if user_spaces(k)]


#: The shapes a key holds that are no class of the user's.
_SHAPES = frozenset((list, tuple, dict))


def _argument_objects(call: Call) -> tuple[Any, ...]:
    """The arguments keyed by identity: the objects among them and the
    NumPy arrays too large (or of objects) to be keyed by their bytes."""
    return tuple(
        part[1].obj
        for part in call.key[1:]
        if type(part) is tuple and len(part) == 2 and type(part[1]) is Identity
    )


def _objects(objects: tuple[Any, ...]) -> str:
    """The objects among the arguments, in words."""
    names = sorted({type(x).__name__ for x in objects})
    return f"the {' or '.join(names)} object{'s' if len(objects) > 1 else ''} among its arguments"


#: The containers :func:`~chainrule.compiler.keys.flatten` rebuilds that fn may change.
_MUTABLE = (list, dict)


def _containers(copy: Any, original: Any, out: list[Any]) -> list[Any]:
    """Each container of the argument copies a trace runs on, with the
    caller's container it copies and (for a list or dict) its entries now."""
    if copy is original or not isinstance(copy, (list, tuple, dict)):
        return out
    out.append((copy, original, _entries(copy) if isinstance(copy, _MUTABLE) else None))
    if isinstance(copy, dict):
        for k in copy:
            _containers(copy[k], original[k], out)
    else:
        for a, b in zip(copy, original):
            _containers(a, b, out)
    return out


def _entries(container: Any) -> list[Any]:
    return [*container.keys(), *container.values()] if isinstance(container, dict) else [*container]


def _write_back(containers: list[Any]) -> str | None:
    """After a trace: the containers that ``fn`` changed get the change in
    the caller's own (the copies' floats and ints as the plain numbers,
    copies as the caller's containers); in words, what it changed."""
    changed = [
        (c, o)
        for c, o, before in containers
        if before is not None
        and (len(e := _entries(c)) != len(before) or not all(map(operator.is_, e, before)))
    ]
    if not changed:
        return None
    back = {Identity(c): o for c, o, _ in containers}

    def plain(x: Any) -> Any:
        if type(x) is reads.TracedFloat:
            return float.__float__(x)
        if isinstance(x, reads.TracedInt):
            return x.value
        return back.get(Identity(x), x)

    for copy, original in changed:
        if isinstance(copy, dict):
            new = [(k, plain(v)) for k, v in copy.items()]
            original.clear()
            original.update(new)
        else:
            original[:] = [plain(x) for x in copy]
    names = sorted({type(o).__name__ for _, o in changed})
    return f"a {' and a '.join(names)} among its arguments"


def _values_in(tree: Any) -> list[Any]:
    """The Values in a nest of lists, tuples and dicts (of any subclass)."""
    out: list[Any] = []
    level = [tree]
    seen: set[int] = set()
    while level:
        below: list[Any] = []
        for x in level:
            if isinstance(x, Value):
                out.append(x)
            elif isinstance(x, (list, tuple, dict)) and id(x) not in seen:
                seen.add(id(x))
                below.extend(x.values() if isinstance(x, dict) else x)
        level = below
    return out


def _untraced(
    out_items: list[Any],
    record: Any,
    rebuild: Callable[[list[Any]], Any],
    known: dict[Identity, Any],
    extra: list[Any] | None = None,
) -> Any:
    """The result of a trace that is not kept, as ``fn`` returned it
    eagerly: the graph made eager (:func:`~chainrule.compiler.trace.untrace`),
    a pick as the entry itself, a followed int or float as the plain number,
    a container that existed before the call as that very object
    (:func:`_before_call`)."""
    from .trace import StandIn, untrace

    picks = untrace(out_items + (extra or []), record)
    return rebuild(
        [
            known[Identity(x)][0]
            if Identity(x) in known
            else reads.plain(picks.get(x, x) if type(x) is StandIn else x)
            for x in out_items
        ]
    )


def _write_rows(record: Any) -> list[Any]:
    """After a trace: a row picked by an int argument is handed back as a
    new list standing for the list's own row (``symbolic.Gather.rows``);
    where ``fn`` changed it (``row = R[i]; row.append(v)``, ``row[0] = v``)
    the change is put in the list's own row, as eagerly (picks as their
    entries, followed numbers as the plain ones). Returns the rows changed."""
    from .trace import _entry

    changed = []
    for found in record.gathers:
        stand_in = found.rows.get(found.picked)
        aliases = found.aliases
        if type(stand_in) is list and (
            len(stand_in) != len(aliases) or not all(map(operator.is_, stand_in, aliases))
        ):
            row = found.origins[found.picked]
            row[:] = [reads.plain(_entry(x)) for x in stand_in]
            changed.append(row)
    return changed


#: The containers :func:`~chainrule.compiler.keys.flatten` walks.
_NESTS = (list, tuple, dict)


def _before_call(
    before: Any, objects_before: Any, containers: list[Any], record: Any
) -> dict[Identity, tuple[Any, Any, str]]:
    """The containers that existed before a trace's call, by identity, of the
    object ``fn`` may hand back for one: eager's object (the caller's own),
    what a replay hands back for it, or None where it cannot, and the
    container in words. Those the guards walk (reached through globals,
    closures, ``self``, the objects among the arguments) are the same objects
    at every replay: as they are. An argument's list (``fn`` runs on a copy)
    is the caller's at the next call: None. A row picked by an int argument
    (a new list standing for it) is the row the replay's int picks, where the
    guards walk the list it is picked from; of an argument's list, None (of
    a list made inside ``fn``: not there, a new list at each call as eagerly)."""
    guarded = {
        Identity(x): x
        for x in itertools.chain(before, objects_before or ())
        if isinstance(x, _NESTS) and (type(x) is not tuple or x)  # (() is one object)
    }
    known: dict[Identity, tuple[Any, Any, str]] = {
        k: (x, ("as is", x), "") for k, x in guarded.items()
    }
    for copy, original, _ in containers:
        known[Identity(copy)] = (original, None, f"a {type(original).__name__} among its arguments")
    for (container, _), found in record.picked.items():
        if not found.row:
            continue
        origin = found.origins[found.picked]
        if container in guarded:
            replay = ("row", (found.index, found.origins))
            known[Identity(found.rows[found.picked])] = (origin, replay, "")
        elif Identity(origin) in known:  # a row of an argument's list (a copy)
            words = "a row picked by an int argument from a list passed as an argument"
            known[Identity(found.rows[found.picked])] = (known[Identity(origin)][0], None, words)
        # (a row of a list made inside fn: a new list at each call, eagerly too)
    return known


def _used_directly(record: Any, values: list[Any]) -> tuple[set[Identity], set[Any]]:
    """The nodes made inside ``fn`` that an operation took as an input, or
    that ``fn`` returns itself (not through a pick); and the picks
    (stand-ins) that an operation took or ``fn`` returns."""
    from .trace import StandIn

    used = {Identity(v) for v in values if type(v) is not StandIn}
    for n in record.nodes:
        used.update(Identity(p) for p in getattr(n, "_prev", ()))
    aliases = {v for v in values if v in record.aliases}
    aliases.update(p for n in record.nodes for p in getattr(n, "_prev", ()) if p in record.aliases)
    return used, aliases


def _may_pick(v: Any, record: Any) -> Iterator[Any]:
    """What the pick ``v`` (``h[k]``) may be: the entries of its gather's
    column, and through a pick of picks what those may be, each once."""
    seen: set[Identity] = set()
    todo = [v]
    while todo:
        g, j = record.aliases[todo.pop()]
        gather = record.gathers[g]
        for c in [row[j] for row in gather.candidates] if gather.row else gather.candidates:
            if Identity(c) not in seen:
                seen.add(Identity(c))
                yield c
                if c in record.aliases:
                    todo.append(c)


def _picks_a_used_node(v: Any, record: Any, used: tuple[set[Identity], set[Any]]) -> bool:
    """Whether the output ``v`` is a gather's pick (``h[k]``, through picks
    of picks too) that may be a node made inside ``fn`` also used other than
    through the pick (``sum(h) + h[k]``, ``-probs[t].log()`` beside
    ``probs[p]``, ``h[k], h[j]``): eagerly its ``.grad`` gathers every use,
    a replayed pick's only those through it."""
    from .trace import TraceValue

    if v not in record.aliases:
        return False
    nodes, aliases = used
    elsewhere = set(nodes)
    for a in aliases:
        if a is not v:
            elsewhere.update(map(Identity, _may_pick(a, record)))
    return any(
        type(c) is TraceValue and Identity(c) in elsewhere for c in _may_pick(v, record)
    )  # (an entry that existed before the call is handed back itself: its .grad is eager's)


def _picked(
    alias: Any, slots: dict[Any, int], record: Any, positions: dict[Any, int], made: set[Any]
) -> Any:
    """The output that a gather's pick is (``return table[i]``): the picked
    entry itself where it is a Value that existed before the call (a
    parameter) or an argument, as eagerly, also through a pick of picks
    (``[W[i], W[j]][k]``); a node of the graph otherwise."""
    from .trace import TraceValue

    g, j = record.aliases[alias]
    gather = record.gathers[g]
    column = [row[j] for row in gather.candidates] if gather.row else gather.candidates
    choices: list[Any] = []
    for c in column:
        if c in positions:
            choices.append(("arg", positions[c]))
        elif c in record.aliases:  # another pick: its own choices, or its slot
            inner = _picked(c, slots, record, positions, made)
            choices.append(None if inner[0] == "slot" else inner)
        elif type(c) is TraceValue or c in made:
            # a node made inside fn (an operation's: a TraceValue; a leaf made
            # there: in made): the alias's slot holds its value
            choices.append(None)
        else:  # a leaf that existed before the call (a node that did is refused: capture)
            choices.append(("leaf", c))
    slot = slots[alias]
    if not any(choices):
        return ("slot", slot)
    return ("pick", (slot, gather.index, choices))


def _outputs(entry: _Entry, buffer: Any, call: Call) -> Any:
    new: list[Any] = []
    program = entry.program
    nodes: dict[int, CompiledValue] | None = None  # "node" outputs, by slot
    for kind, x in entry.outputs:
        if kind == "slot":
            new.append(_output(buffer.item(x), program, x, buffer, call))
        elif kind == "recipe":
            new.append(x(buffer, call))
        elif kind == "arg":
            new.append(call.values[x])
        elif kind == "node":  # one of several nodes returned (h, loss): see CompiledValue
            if nodes is None:
                nodes = {}
            v = nodes.get(x)
            if v is None:
                v = nodes[x] = _output(buffer.item(x), program, x, buffer, call)
            new.append(v)
        elif kind == "pick":
            new.append(_pick(x, program, buffer, call, None))
        elif kind == "node pick":  # a pick among several nodes returned: as "node"
            if nodes is None:
                nodes = {}
            new.append(_pick(x, program, buffer, call, nodes))
        elif kind == "row":
            new.append(_row(x, call))
        else:
            new.append(x)
    if nodes is not None:
        siblings = tuple((slot, weakref.ref(v)) for slot, v in nodes.items())
        for v in nodes.values():
            v._siblings = siblings
    return entry.rebuild(new)


def _row(row: tuple[Any, list[Any]], call: Call) -> Any:
    """A returned row picked by an int argument: the very row of the list
    (guarded) that this call's ints pick (see :func:`_before_call`)."""
    from .symbolic import recipe_value

    index, rows = row
    return rows[recipe_value(index, call.ints) % len(rows)]


def _pick(
    pick: tuple[int, Any, list[Any]],
    program: Any,
    buffer: Any,
    call: Call,
    nodes: dict[int, CompiledValue] | None,
) -> Any:
    """A returned gather's pick for this call's ints (see :func:`_picked`);
    a node among ``nodes`` (by slot, see :func:`_outputs`) where given."""
    from .symbolic import recipe_value

    slot, index, choices = pick
    choice = choices[recipe_value(index, call.ints) % len(choices)]
    if choice is None:
        if nodes is None:
            return _output(buffer.item(slot), program, slot, buffer, call)
        v = nodes.get(slot)
        if v is None:
            v = nodes[slot] = _output(buffer.item(slot), program, slot, buffer, call)
        return v
    kind, x = choice
    if kind == "pick":  # a pick of picks: the entry the inner one picks
        return _pick(x, program, buffer, call, nodes)
    return call.values[x] if kind == "arg" else x


def _may_be_node(kind: str, x: Any) -> bool:
    """Whether the output ``(kind, x)`` is a pick that may land on a node
    of the graph (not a parameter or an argument)."""
    return kind == "pick" and any(choice is None or _may_be_node(*choice) for choice in x[2])


def compile(  # noqa: A001
    fn: Callable[..., Any] | None = None,
    *,
    max_traces: int = 32,
    optimizer: Optimizer | None = None,
    gc_while_tracing: bool = True,
    budget: bool = True,
) -> Any:
    """Wrap ``fn`` so that it is traced once and replayed on NumPy arrays
    (see the module's documentation); also a decorator,
    ``@chainrule.compile`` or ``@chainrule.compile(max_traces=4)``.

    With ``optimizer`` (a :mod:`chainrule.optim` optimizer), a call is one
    training step: ``loss = fn(*args)``, then ``optimizer.zero_grad()``,
    ``loss.backward()`` and ``optimizer.step()``; it returns the loss. A
    replay runs the three on arrays, with the same numbers
    (``chainrule.compiler.step``).

    ``gc_while_tracing=False`` turns Python's cyclic garbage collector off
    while a trace runs and on again after it: a trace makes the whole graph
    as Values, and the collector's full passes over it are about a third of
    tracing microgpt's model. The switch is process-wide: no thread's
    reference cycles are collected until the trace ends. Replays are not
    affected either way.

    ``budget=False`` traces every new graph at once, the first call
    included, and never runs eagerly for the clock
    (``chainrule.compiler.budget``): to watch tracing on a function too
    small to gain from it, or where replays are known to pay."""
    if fn is None:
        return lambda f: Compiled(f, max_traces, optimizer, gc_while_tracing, budget)
    return Compiled(fn, max_traces, optimizer, gc_while_tracing, budget)
