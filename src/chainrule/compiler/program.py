"""A captured graph (index arrays and one value buffer) and its replay.

Every node, leaf and constant gets a *slot* in one float64 buffer. An
interior node's *level* is one more than its deepest input's, so all nodes
of a level can run together once the levels below have. Within a level,
nodes of the same primitive (and the same shape: number of inputs, the
kinds of a running sum's terms) form a *group*, whose slots are
contiguous: its forward gathers each input position with one index array,
runs the primitive once on arrays, and writes one slice. The backward pass
walks the levels down: per group, the local derivatives (the table's rule
on arrays) times the group's gradients, scatter-added into the inputs'
gradients.

Gradients equal the eager ones up to the order in which a node's
contributions are added (within a level they are summed in a different
order), so to about 1e-15 relative, not bit for bit; forward values are
bit for bit the eager ones.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import Value
from ..primitives import DEAD_UNIT, ZERO_EXPONENT, ZERO_MASKS, Primitive

_KINDS = ("node", "arg", "int", "op", "reduce")
_get_data = operator.attrgetter("data")

#: Groups of fewer nodes run the table's float functions node by node: a
#: NumPy call costs about as much as a dozen float operations.
SMALL_GROUP = 4


def is_recipe(x: Any) -> bool:
    return type(x) is tuple and bool(x) and x[0] in _KINDS


@dataclass
class Group:
    """Nodes of one primitive at one level: outputs ``start:stop``."""

    fn: Primitive
    start: int
    stop: int
    matrix: np.ndarray  # input slots: one row per input position
    const: Any  # None, an index array, a tuple of them, or (kinds, index array | None)
    forward: Callable[[np.ndarray, Any], np.ndarray]  # (inputs, constant) -> outputs
    local: Callable[
        [np.ndarray, Any, np.ndarray], np.ndarray
    ]  # (inputs, constant, outputs) -> locals
    unique: bool  # no input slot repeats in the group
    small: bool  # so few nodes that floats beat arrays
    scatter: np.ndarray  # unique: the input slots; else each input's index in targets
    targets: np.ndarray  # the distinct input slots

    def run(self, val: np.ndarray, call: Any) -> None:
        val[self.start : self.stop] = self.forward(val.take(self.matrix), self.const_values(val))

    def const_values(self, val: np.ndarray) -> Any:
        c = self.const
        if c is None:
            return None
        if isinstance(c, np.ndarray):
            return val.take(c)
        if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], tuple):
            kinds, start = c
            return (kinds, None if start is None else val[start])
        return tuple(val[i] for i in c)


@dataclass
class RecipeStep:
    """A float that user code read and the engine used as a constant,
    recomputed from its recipe."""

    slot: int
    compute: Callable[[np.ndarray, Any], float]

    def run(self, val: np.ndarray, call: Any) -> None:
        val[self.slot] = self.compute(val, call)


class Retrace(Exception):
    """A replay that cannot give the eager result: trace again."""


@dataclass
class GatherStep:
    """``container[i]`` (see :mod:`chainrule.compiler.symbolic`): the slots
    ``out`` take the values of row ``i`` of ``table`` (the slots of the
    entries the subscript may pick), ``i`` from the call's ints."""

    out: np.ndarray  # the aliases' slots
    table: np.ndarray  # one row of slots per entry of the list
    index: Any  # the int's recipe

    def pick(self, call: Any) -> int:
        from .symbolic import recipe_value

        i = recipe_value(self.index, call.ints)
        n = len(self.table)
        if not -n <= i < n:  # the list raises IndexError: the trace will too
            raise Retrace
        return int(i % n)

    def run(self, val: np.ndarray, call: Any) -> None:
        val[self.out] = val[self.table[self.pick(call)]]

    def backward(self, grad: np.ndarray, call: Any) -> None:
        np.add.at(grad, self.table[self.pick(call)], grad[self.out])


class Program:
    """The captured graph of one trace."""

    def __init__(self) -> None:
        self.n = 0
        self.base = np.zeros(0)
        self.live: list[Value] = []  # leaves that existed before the trace
        self.live_slots = np.zeros(0, dtype=np.intp)
        self.arg_leaves: list[tuple[int, int]] = []  # (slot, position among the args' Values)
        self.steps: list[list[Group | RecipeStep | GatherStep]] = []  # per level
        self.forward_steps: list[Group | RecipeStep | GatherStep] = []  # the levels' steps
        self.guards: list[tuple[Callable[..., Any], Any, Any, Any]] = []
        # guards between two node values (or constants), by function: slots, slots, results
        self.node_guards: list[tuple[Callable[..., Any], np.ndarray, np.ndarray, list[Any]]] = []
        self.node_slot: dict[Value, int] = {}
        self.inputs_of: list[tuple[int, ...]] = []  # per slot: its input slots (gradient-carrying)
        self.outputs: list[int] = []
        self._backward_plans: dict[int, Any] = {}
        self.budget: Any = None  # the compiled function's account, for replay times

    # -- forward ------------------------------------------------------------

    def forward(self, call: Any) -> np.ndarray | None:
        """The buffer of every slot's value for the leaves' current data
        and the call's arguments (:class:`chainrule.compiler.keys.Call`),
        or None when a guard goes the other way (trace again)."""
        val = self.base.copy()
        live = self.live
        if live:
            val[self.live_slots] = np.fromiter(map(_get_data, live), float, len(live))
        arg_values = call.values
        for slot, pos in self.arg_leaves:
            val[slot] = arg_values[pos].data
        try:
            with np.errstate(all="ignore"):
                for step in self.forward_steps:
                    step.run(val, call)
        except Retrace:
            return None
        for f, a, b, expected in self.guards:
            if f(a(val, call), b(val, call)) != expected:
                return None
        for f, slots_a, slots_b, expected in self.node_guards:
            if list(map(f, val[slots_a].tolist(), val[slots_b].tolist())) != expected:
                return None
        return val

    # -- backward -----------------------------------------------------------

    def backward(self, val: np.ndarray, root: int, seed: float, call: Any) -> None:
        """Add d root / d leaf to every leaf's ``.grad`` (eager semantics)."""
        plan = self._backward_plans.get(root)
        if plan is None:
            plan = self._backward_plans[root] = self._plan(root)
        steps, masks, leaves, leaf_slots, arg_mask = plan
        grad = np.zeros(self.n)
        grad[root] = seed
        with np.errstate(all="ignore"):
            for step, mask in zip(steps, masks):
                if type(step) is GatherStep:
                    step.backward(grad, call)
                else:
                    _backward_group(step, mask, val, grad)
        for leaf, d in zip(leaves, grad[leaf_slots].tolist()):
            leaf.grad += d
        arg_values = call.values
        for (slot, pos), used in zip(self.arg_leaves, arg_mask):
            if used:
                arg_values[pos].grad += grad.item(slot)

    def _plan(
        self, root: int
    ) -> tuple[list[Group | GatherStep], list[Any], list[Value], np.ndarray, list[bool]]:
        """The groups to walk for ``root``, with a mask of the nodes that
        are its ancestors where a group holds others too (eager's backward
        never visits those: a 0 gradient times an inf local is not 0)."""
        seen = np.zeros(self.n, dtype=bool)
        seen[root] = True
        stack = [root]
        while stack:
            for i in self.inputs_of[stack.pop()]:
                if not seen[i]:
                    seen[i] = True
                    stack.append(i)
        groups: list[Group | GatherStep] = []
        masks: list[Any] = []
        for level in reversed(self.steps):
            for step in level:
                if type(step) is RecipeStep:
                    continue
                if type(step) is GatherStep:
                    if seen[step.out].any():
                        groups.append(step)
                        masks.append(None)
                    continue
                g: Group = step  # type: ignore[assignment]
                used = seen[g.start : g.stop]
                if used.all():
                    groups.append(g)
                    masks.append(None)
                elif used.any():
                    groups.append(g)
                    masks.append(used.copy())
        used = seen[self.live_slots]
        leaves = [leaf for leaf, u in zip(self.live, used.tolist()) if u]
        arg_mask = [bool(seen[slot]) for slot, _ in self.arg_leaves]
        return groups, masks, leaves, self.live_slots[used], arg_mask

    def nbytes(self) -> int:
        """Bytes of the captured graph: index arrays and the value buffer."""
        total = self.base.nbytes + self.live_slots.nbytes
        for level in self.steps:
            for step in level:
                if type(step) is Group:
                    total += step.matrix.nbytes
                    c = step.const
                    if isinstance(c, np.ndarray):
                        total += c.nbytes
                    elif isinstance(c, tuple) and c and isinstance(c[-1], np.ndarray):
                        total += sum(x.nbytes for x in c if isinstance(x, np.ndarray))
        return total


def _backward_group(g: Group, mask: np.ndarray | None, val: np.ndarray, grad: np.ndarray) -> None:
    gout = grad[g.start : g.stop]
    if mask is not None:
        gout = np.where(mask, gout, 0.0)
    X = val.take(g.matrix)
    local = g.local(X, g.const_values(val), val[g.start : g.stop])
    contributions = local * gout
    if g.fn.masked and not np.isfinite(gout).all():
        contributions = _masked(g, local, contributions, gout, X)
    if mask is not None:
        contributions[:, ~mask] = 0.0
    if g.unique:
        grad[g.scatter] += contributions.ravel()
    else:  # an input used by several nodes of the group: add its contributions first
        grad[g.targets] += np.bincount(g.scatter, contributions.ravel(), len(g.targets))


def _masked(
    g: Group, local: np.ndarray, contributions: np.ndarray, gout: np.ndarray, xs: np.ndarray
) -> np.ndarray:
    """An inf or nan gradient through a selecting op passes as PyTorch
    passes it (``engine._masked``)."""
    bad = ~np.isfinite(gout)
    masked = g.fn.masked
    if masked == ZERO_EXPONENT:
        blocked = bad & (xs[1] == 0.0)
        contributions[0, blocked] = 0.0
        return contributions
    if masked == DEAD_UNIT:
        dead = bad & (local[-1] == 0.0)
        contributions[:, dead] = 0.0
        return contributions
    assert masked == ZERO_MASKS
    for row, d in zip(contributions, local):
        row[bad & (d == 0.0)] = 0.0
    return contributions
