"""``chainrule.compile``: trace scalar code once, replay it on NumPy arrays.

>>> import chainrule
>>> from chainrule import Value
>>> w = [Value(0.5), Value(-1.0)]
>>> def loss(x):
...     return sum(wi * xi for wi, xi in zip(w, x)).relu()
>>> fast = chainrule.compile(loss)
>>> out = fast([2.0, 0.25])  # the first call traces
>>> out = fast([2.0, 0.25])  # later calls replay
>>> out.backward()
>>> out.data, w[0].grad
(0.75, 2.0)

The first call of the compiled function runs ``fn`` as usual while watching
it (``chainrule.compiler.trace``) and captures the graph it builds as
index arrays and one value buffer (``chainrule.compiler.capture``,
``chainrule.compiler.program``). Later
calls with arguments of the same *key* skip ``fn`` and the Value objects:
they read the current ``.data`` of the leaves that existed before the call
(parameters, Values among the arguments) and run the graph level by level,
many nodes per NumPy call. The outputs are Values whose ``.data`` is current
and whose ``backward()`` adds the gradients into the leaves' ``.grad``,
as the eager ``backward()`` would.

The key: the shape of the arguments (lists' lengths, dicts' keys), the
value of every int, str, bool and None among them (they may choose the
graph: a token picks an embedding row), the identity of other objects.
Floats and leaf Values among the arguments are inputs, read at every call.
A new key traces again; at most ``max_traces`` traces are kept (the least
recently used is dropped). Values made inside ``fn`` from numbers are
constants of the trace.

Reads of ``.data`` inside ``fn`` are followed (see
``chainrule.compiler.reads``): used as an operation's constant they are
recomputed at every replay; the builtin ``max``/``min`` over them is
recomputed by the same builtin; any other comparison or conversion is a
guard, checked at every replay, and a replay where it would go the other
way traces again. What cannot be replayed (a micrograd ``_backward``
closure, ``Value(data, children, local_grads)`` nodes, writes to ``.data``
inside ``fn``, a read float used where it cannot be followed) makes the
function run eagerly from then on, with one :class:`CompileWarning`
naming the reason and the line.

Forward values equal the eager ones bit for bit. Gradients equal them to
about 1e-15 relative: a node that receives several contributions adds
them in another order than the eager pass.

Tracing swaps attributes of ``Value`` while ``fn`` runs (one thread at a
time, under a lock); replays touch nothing shared.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..engine import LEAF, Value, _new
from ..graph import mode

__all__ = ["CompileWarning", "Compiled", "compile"]


class CompileWarning(UserWarning):
    """A compiled function runs eagerly instead (the message says why)."""


class CompiledValue(Value):
    """An output of a replay: a Value whose ``backward()`` runs the
    captured graph backward."""

    __slots__ = ("_program", "_slot", "_buffer", "_arg_values")
    _program: Any
    _slot: int
    _buffer: Any
    _arg_values: Sequence[Value]

    def backward(self, gradient: Any = 1.0, *, create_graph: bool = False) -> None:
        """Add d self / d leaf into every leaf's ``.grad``, as
        :meth:`Value.backward` does for the eager graph."""
        if create_graph:
            raise TypeError(
                "backward: a compiled graph has no Values to differentiate again; "
                "call the function without chainrule.compile for create_graph=True"
            )
        from ..engine import _as_float

        seed = _as_float(gradient, "backward")
        self._program.backward(self._buffer, self._slot, seed, self._arg_values)
        self.grad = seed


def _output(value: float, program: Any, slot: int, buffer: Any, args: Sequence[Value]) -> Value:
    v = _new(CompiledValue)
    v.data = value
    v.grad = 0.0
    v._prev = v._local = ()
    v._fn = LEAF
    v._program, v._slot, v._buffer, v._arg_values = program, slot, buffer, args
    return v


class _Entry:
    __slots__ = ("program", "rebuild", "outputs")

    def __init__(
        self, program: Any, rebuild: Callable[[list[Any]], Any], outputs: list[Any]
    ) -> None:
        self.program = program
        self.rebuild = rebuild
        # per output item: ("slot", i), ("arg", i), ("leaf", Value), ("recipe", f), ("as is", x)
        self.outputs = outputs


class Compiled:
    """A function wrapped by :func:`compile`: call it as the function."""

    def __init__(self, fn: Callable[..., Any], max_traces: int = 8) -> None:
        if not callable(fn):
            raise TypeError(f"compile: expected a function, got {type(fn).__name__} {fn!r}")
        if not isinstance(max_traces, int) or max_traces < 1:
            raise ValueError(f"compile: max_traces must be a positive int, got {max_traces!r}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_traces = max_traces
        self.traces = 0  # how many times fn was traced
        self.retraces = 0  # of those, how many because a guard went the other way
        self.eager_reason: str | None = None
        self._cache: collections.OrderedDict[Any, _Entry] = collections.OrderedDict()

    def keys(self) -> list[Any]:
        """The keys of the traces kept, least recently used first."""
        return list(self._cache)

    def memory(self) -> dict[str, int]:
        """Nodes and bytes of the most recent trace's captured graph."""
        if not self._cache:
            return {"nodes": 0, "bytes": 0}
        program = next(reversed(self._cache.values())).program
        return {"nodes": program.n, "bytes": program.nbytes()}

    def __call__(self, *args: Any) -> Any:
        if self.eager_reason is not None or not mode.fast:
            return self.fn(*args)
        try:
            import numpy  # noqa: F401
        except ImportError:
            raise ImportError(
                "chainrule.compile replays graphs with NumPy: pip install numpy"
            ) from None

        from .capture import flatten

        items, rebuild_args = flatten(list(args))
        try:
            key, arg_values, arg_floats = _key(items)
        except _Eager as e:
            return self._eager(str(e), args)
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            buffer = entry.program.forward(arg_values, arg_floats)
            if buffer is not None:
                return _outputs(entry, buffer, arg_values, arg_floats)
            self.retraces += 1
            del self._cache[key]
        return self._trace(key, items, rebuild_args, arg_values, arg_floats)

    def _trace(
        self,
        key: Any,
        items: list[Any],
        rebuild_args: Callable[[list[Any]], Any],
        arg_values: list[Value],
        arg_floats: list[Any],
    ) -> Any:
        from . import capture as P
        from .reads import Record, plain_floats, traced
        from .trace import Unsupported, run_traced

        record = Record()
        fed = []
        k = 0
        for x in items:
            if type(x) is float:
                fed.append(traced(x, ("arg", k)))
                k += 1
            else:
                fed.append(x)
        self.traces += 1
        out, created = run_traced(self.fn, tuple(rebuild_args(fed)), record)
        out_items, rebuild = P.flatten(out)
        try:
            if record.problems:
                raise Unsupported(record.problems[0])
            values = [x for x in out_items if isinstance(x, Value)]
            positions = {v: i for i, v in enumerate(arg_values)}
            program = P.build(values, created, positions, record)
        except Unsupported as e:
            self._eager(str(e), None)
            plain_floats([x for x in out_items if isinstance(x, Value)])
            return out  # the trace ran fn eagerly: its result is this call's
        outputs: list[Any] = []
        made = set(created)
        for x in out_items:
            if isinstance(x, Value):
                if x in positions:
                    outputs.append(("arg", positions[x]))
                elif not x._prev and x not in made:
                    outputs.append(("leaf", x))
                else:
                    outputs.append(("slot", program.node_slot[x]))
            elif hasattr(x, "recipe"):
                outputs.append(("recipe", P.recipe_function(program, x.recipe)))
            else:
                outputs.append(("as is", x))
        program.node_slot = {}  # the traced graph can be freed
        entry = _Entry(program, rebuild, outputs)
        self._cache[key] = entry
        while len(self._cache) > self.max_traces:
            self._cache.popitem(last=False)
        buffer = program.forward(arg_values, arg_floats)
        if buffer is None:  # a guard that cannot hold even on the traced values
            del self._cache[key]
            return self._eager(
                "a guard does not hold on the values it was traced with", rebuild_args(items)
            )
        return _outputs(entry, buffer, arg_values, arg_floats)

    def _eager(self, reason: str, args: Any) -> Any:
        """From now on, run ``fn`` as it is (and now, with ``args``)."""
        self.eager_reason = reason
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        warnings.warn(
            f"chainrule.compile: {name} runs eagerly: {reason}", CompileWarning, stacklevel=4
        )
        self._cache.clear()
        return None if args is None else self.fn(*args)


class _Eager(Exception):
    pass


def _key(items: list[Any]) -> tuple[Any, list[Value], list[Any]]:
    key: list[Any] = []
    values: list[Value] = []
    floats: list[Any] = []
    for x in items:
        t = type(x)
        if t is float:
            key.append(float)
            floats.append(x)
        elif isinstance(x, Value):
            if x._prev:
                raise _Eager(
                    "an argument is a Value computed by other operations; pass leaves "
                    "(parameters, inputs) and build the rest inside the function"
                )
            key.append(Value)
            values.append(x)
        elif t in (int, bool, str, bytes) or x is None:
            key.append((t, x))
        else:
            key.append((t, id(x)))
    return tuple(key), values, floats


def _outputs(entry: _Entry, buffer: Any, arg_values: list[Value], arg_floats: list[Any]) -> Any:
    new = []
    program = entry.program
    for kind, x in entry.outputs:
        if kind == "slot":
            new.append(_output(buffer.item(x), program, x, buffer, arg_values))
        elif kind == "recipe":
            new.append(x(buffer, arg_floats))
        elif kind == "arg":
            new.append(arg_values[x])
        else:
            new.append(x)
    return entry.rebuild(new)


def compile(fn: Callable[..., Any] | None = None, *, max_traces: int = 8) -> Any:  # noqa: A001
    """Wrap ``fn`` so that it is traced once and replayed on NumPy arrays
    (see the module's documentation); also a decorator,
    ``@chainrule.compile`` or ``@chainrule.compile(max_traces=4)``."""
    if fn is None:
        return lambda f: Compiled(f, max_traces)
    return Compiled(fn, max_traces)
