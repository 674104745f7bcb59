"""Capturing a traced graph as a :class:`~chainrule.compiler.program.Program`.

The Values that one trace built are numbered into *slots* of one buffer:
leaves (read at every replay), constants (fixed numbers, or recipes of
read floats recomputed at every replay) and interior nodes, ordered by
level and, within a level, by group (one primitive, one shape), so that a
group's outputs are one slice. Chains of ``+`` that nothing else reads
become one running sum on the way. After this the Values can be freed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..engine import Value
from ..primitives import ADD, Primitive
from ..walk import topological_order
from . import reads, rules
from .program import SMALL_GROUP, Group, Program, RecipeStep, is_recipe
from .reads import Record, TracedFloat
from .rules import SUM_TERMS
from .trace import Unsupported


def _inputs_and_constant(
    v: Value, merged: dict[Value, Any] | None = None
) -> tuple[tuple[Value, ...], Any]:
    if merged and v in merged:
        return merged[v]
    if v._local is None:
        raise Unsupported(
            f"node {v._fn.name!r} backpropagates through a micrograd _backward closure, "
            "which cannot be replayed; define the operation as a chainrule.Primitive"
        )
    if v._fn.derivative is None:
        raise Unsupported(
            f"node {v._fn.name!r} was built with Value(data, children, local_grads), whose "
            "derivative cannot be evaluated again; define it as a chainrule.Primitive"
        )
    return v._prev, None


def _signature(fn: Primitive, n_inputs: int, c: Any) -> Any:
    """What nodes of one group share besides their primitive."""
    if c is None:
        return (n_inputs, None)
    if fn.const and isinstance(c, tuple):
        if len(c) == 2 and isinstance(c[0], tuple):  # SUM_TERMS: (kinds, start)
            return (n_inputs, "terms", c[0], c[1] is None)
        return (n_inputs, "tuple", len(c))
    return (n_inputs, "scalar")


def build(
    outputs: list[Value],
    created: list[Value],
    arg_leaves: dict[Value, int],
    record: Record,
) -> Program:
    """The program that replays the graph behind ``outputs``."""
    made = set(created)
    recipes_seen: set[int] = set()
    order: list[Value] = []  # interior nodes, each after its inputs
    leaves: list[Value] = []
    placed: set[Value] = set()
    read_nodes: set[Value] = set()  # nodes whose value a recipe or guard reads

    def include(root: Value) -> None:
        if root in placed:
            return
        topo, root_leaves = topological_order(root)
        for leaf in root_leaves:
            if leaf not in placed:
                placed.add(leaf)
                leaves.append(leaf)
        for v in reversed(topo):
            if v not in placed:
                placed.add(v)
                order.append(v)

    def nodes_of(recipe: Any) -> None:
        if not is_recipe(recipe) or id(recipe) in recipes_seen:
            return
        recipes_seen.add(id(recipe))
        kind = recipe[0]
        if kind == "node":
            read_nodes.add(recipe[1])
            include(recipe[1])
        elif kind == "op":
            for r in recipe[2:]:
                nodes_of(r)
        elif kind == "reduce":
            for r in recipe[2]:
                nodes_of(r)

    for out in outputs:
        include(out)
    pinned_whole = set()  # recipes whose exact value a guard checks
    for f, a, b, _ in record.guards:
        if f is reads.same:
            pinned_whole.add(id(a))
        nodes_of(a)
        nodes_of(b)
    recipes_seen.clear()
    # constants that are reads pull in the nodes they were read from
    i = j = 0
    while i < len(order) or j < len(leaves):
        while i < len(order):
            for x in _flat_constant(_inputs_and_constant(order[i])[1]):
                if type(x) is TracedFloat:
                    nodes_of(x.recipe)
            i += 1
        while j < len(leaves):
            if leaves[j] in record.leaf_recipes:
                nodes_of(record.leaf_recipes[leaves[j]])
            j += 1
    for x, line in record.consumed.values():
        if id(x.recipe) not in recipes_seen and id(x.recipe) not in pinned_whole:
            raise Unsupported(
                f"{line}: a value read from .data is used where compile cannot follow it "
                "(an exponent, a Python computation); use it as an operation's operand"
            )
    pinned = set(outputs) | read_nodes
    merged = _add_chains(order, pinned)
    order = [v for v in order if v not in merged or merged[v] is not None]
    return _lay_out(order, leaves, made, arg_leaves, record, merged)


def _add_chains(order: list[Value], pinned: set[Value]) -> dict[Value, Any]:
    """Chains of ``+`` whose partial sums nothing else uses (``sum(losses)``
    of non-products, which the eager engine cannot fuse: it cannot know at
    ``+`` time that nobody keeps the partial sum), as one running sum each:
    ``SUM_TERMS`` adds the same terms in the same order, so the floats are
    the same. Maps each chain's last node to ``(terms, (kinds, start))``
    and each absorbed partial sum to None."""
    uses: dict[Value, int] = {}
    for v in order:
        for child in _inputs_and_constant(v)[0]:
            uses[child] = uses.get(child, 0) + 1
    merged: dict[Value, Any] = {}
    for v in order:
        if v._fn is not ADD:
            continue
        a, b = v._prev
        for prev, other in ((a, b), (b, a)):
            if prev is other or uses.get(prev) != 1 or prev in pinned:
                continue
            if prev in merged:
                terms, start = merged[prev]
            elif prev._fn is ADD:
                terms, start = list(prev._prev), None
            else:
                continue
            merged[prev] = None
            merged[v] = (terms + [other], start)
            break
    return {
        v: None if m is None else (tuple(m[0]), ((1,) * len(m[0]), m[1])) for v, m in merged.items()
    }


def _flat_constant(c: Any) -> list[Any]:
    if c is None:
        return []
    if isinstance(c, tuple):
        if len(c) == 2 and isinstance(c[0], tuple):
            return [c[1]]
        return list(c)
    return [c]


def _lay_out(
    order: list[Value],
    leaves: list[Value],
    made: set[Value],
    arg_leaves: dict[Value, int],
    record: Record,
    merged: dict[Value, Any],
) -> Program:
    prog = Program()
    values: list[float] = []
    # Temporary ids: leaves, then constants and recipes, then interior nodes.
    tmp_of: dict[Value, int] = {}
    levels: list[int] = []
    inputs_of: list[tuple[int, ...]] = []
    kind_of: list[
        Any
    ] = []  # per temporary id: ("leaf",), ("const",), ("recipe", r), ("node", v, c_ids)

    def new(lv: int, value: float, kind: Any, inputs: tuple[int, ...] = ()) -> int:
        levels.append(lv)
        values.append(value)
        kind_of.append(kind)
        inputs_of.append(inputs)
        return len(levels) - 1

    recipe_ids: dict[int, tuple[int, Any]] = {}

    def recipe_level(r: Any) -> int:
        if not is_recipe(r):
            return 0
        kind = r[0]
        if kind == "node":
            return levels[tmp_of[r[1]]]
        if kind == "arg":
            return 0
        if kind == "op":
            return max((recipe_level(x) for x in r[2:]), default=0)
        return max((recipe_level(x) for x in r[2]), default=0)

    def constant_slot(x: Any) -> int:
        if type(x) is TracedFloat:
            r = x.recipe
            key = id(r)
            if key not in recipe_ids:
                recipe_ids[key] = (new(recipe_level(r) + 1, float.__float__(x), ("recipe", r)), r)
            return recipe_ids[key][0]
        return new(0, float(x), ("const",))

    for v in _placement_order(leaves, order, record, merged):
        if v in record.leaf_recipes:
            r = record.leaf_recipes[v]
            tmp_of[v] = new(recipe_level(r) + 1, v.data, ("recipe", r))
            continue
        if not v._prev:
            kind: Any = ("const",) if v in made else ("leaf", v)
            tmp_of[v] = new(0, v.data, kind)
            continue
        children, c = _inputs_and_constant(v, merged)
        ins = tuple(tmp_of[x] for x in children)
        c_ids: Any = None
        fn = SUM_TERMS if v in merged else v._fn
        if c is not None:
            if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], tuple):
                c_ids = (c[0], None if c[1] is None else constant_slot(c[1]))
            elif isinstance(c, tuple):
                c_ids = tuple(constant_slot(x) for x in c)
            else:
                c_ids = constant_slot(c)
        dep_levels = [levels[i] for i in ins] + [levels[i] for i in _ids(c_ids)]
        tmp_of[v] = new(max(dep_levels) + 1, v.data, ("node", fn, c_ids), ins)

    # Slots: sorted by level, then by group, so a group's outputs are contiguous.
    def group_key(t: int) -> Any:
        kind = kind_of[t]
        if kind[0] != "node":
            return (levels[t], 0, kind[0], ())
        fn, c_ids = kind[1], kind[2]
        return (levels[t], 1, id(fn), _signature(fn, len(inputs_of[t]), c_ids))

    ranked = sorted(range(len(levels)), key=lambda t: (group_key(t), t))
    slot_of = np.empty(len(levels), dtype=np.intp)
    slot_of[ranked] = np.arange(len(levels))
    prog.n = len(levels)
    prog.base = np.array(values, dtype=float)[ranked]
    prog.inputs_of = [tuple(int(slot_of[i]) for i in inputs_of[t]) for t in ranked]
    for t in ranked:
        kind = kind_of[t]
        if kind[0] == "leaf":
            leaf = kind[1]
            if leaf in arg_leaves:
                prog.arg_leaves.append((int(slot_of[t]), arg_leaves[leaf]))
            else:
                prog.live.append(leaf)
    prog.live_slots = np.array([slot_of[tmp_of[v]] for v in prog.live], dtype=np.intp)
    prog.node_slot = {v: int(slot_of[t]) for v, t in tmp_of.items()}

    _compile_guards(prog, record.guards)

    # Steps, level by level.
    by_level: dict[int, list[Group | RecipeStep]] = {}
    t_i = 0
    while t_i < len(ranked):
        t = ranked[t_i]
        key = group_key(t)
        lv = levels[t]
        kind = kind_of[t]
        if kind[0] in ("leaf", "const"):
            t_i += 1
            continue
        if kind[0] == "recipe":
            by_level.setdefault(lv, []).append(
                RecipeStep(int(slot_of[t]), recipe_function(prog, kind[1]))
            )
            t_i += 1
            continue
        t_end = t_i
        while t_end < len(ranked) and group_key(ranked[t_end]) == key:
            t_end += 1
        members = ranked[t_i:t_end]
        by_level.setdefault(lv, []).append(_group(kind[1], members, slot_of, inputs_of, kind_of))
        t_i = t_end
    prog.steps = [by_level[lv] for lv in sorted(by_level)]
    prog.forward_steps = [step for level in prog.steps for step in level]
    return prog


def recipe_function(prog: Program, r: Any) -> Callable[[np.ndarray, Sequence[Any]], Any]:
    """A recipe as a function of the value buffer and the float arguments."""
    if not is_recipe(r):
        return lambda val, args: r
    kind = r[0]
    if kind == "node":
        s = prog.node_slot[r[1]]
        return lambda val, args: val.item(s)
    if kind == "arg":
        pos = r[1]
        return lambda val, args: args[pos]
    f = r[1]
    if kind == "op":
        parts = [recipe_function(prog, x) for x in r[2:]]
        return lambda val, args: f(*(p(val, args) for p in parts))
    if all(is_recipe(x) and x[0] == "node" for x in r[2]):  # max(v.data for v in xs)
        slots = np.array([prog.node_slot[x[1]] for x in r[2]], dtype=np.intp)
        return lambda val, args: f(val[slots].tolist())
    items = [recipe_function(prog, x) for x in r[2]]
    return lambda val, args: f([p(val, args) for p in items])


def _compile_guards(prog: Program, guards: list[tuple[Any, Any, Any, Any]]) -> None:
    """Guards between node values and numbers are checked a function at a
    time on gathered values (numbers get a slot of their own); others, by
    their recipes."""
    extra: list[float] = []
    by_f: dict[Any, tuple[list[int], list[int], list[Any]]] = {}

    def slot(r: Any) -> int | None:
        if is_recipe(r):
            return prog.node_slot[r[1]] if r[0] == "node" else None
        if type(r) is float or type(r) is int:
            extra.append(float(r))
            return prog.n + len(extra) - 1
        return None

    for f, a, b, expected in guards:
        sa, sb = slot(a), slot(b)
        if sa is None or sb is None:
            prog.guards.append((f, recipe_function(prog, a), recipe_function(prog, b), expected))
            continue
        group = by_f.setdefault(f, ([], [], []))
        group[0].append(sa)
        group[1].append(sb)
        group[2].append(expected)
    prog.node_guards = [
        (f, np.array(a, dtype=np.intp), np.array(b, dtype=np.intp), expected)
        for f, (a, b, expected) in by_f.items()
    ]
    if extra:
        prog.base = np.concatenate([prog.base, extra])
        prog.n += len(extra)
        prog.inputs_of += [()] * len(extra)


def _recipe_nodes(r: Any, into: list[Value]) -> list[Value]:
    """The nodes whose values a recipe reads."""
    if is_recipe(r):
        if r[0] == "node":
            into.append(r[1])
        elif r[0] == "op":
            for x in r[2:]:
                _recipe_nodes(x, into)
        elif r[0] == "reduce":
            for x in r[2]:
                _recipe_nodes(x, into)
    return into


def _placement_order(
    leaves: list[Value], order: list[Value], record: Record, merged: dict[Value, Any]
) -> list[Value]:
    """Leaves and nodes, each after what it depends on: its inputs, and the
    nodes that the read floats among its constants were read from (those
    need not be its inputs: ``v - max(...)``)."""

    def deps(v: Value) -> list[Value]:
        if v in record.leaf_recipes:
            return _recipe_nodes(record.leaf_recipes[v], [])
        if not v._prev:
            return []
        children, c = _inputs_and_constant(v, merged)
        found = list(children)
        for x in _flat_constant(c):
            if type(x) is TracedFloat:
                _recipe_nodes(x.recipe, found)
        return found

    placed: set[Value] = set()
    out: list[Value] = []
    for root in (*leaves, *order):
        if root in placed:
            continue
        stack = [(root, False)]
        while stack:
            v, ready = stack.pop()
            if v in placed:
                continue
            if ready:
                placed.add(v)
                out.append(v)
                continue
            stack.append((v, True))
            stack.extend((d, False) for d in deps(v) if d not in placed)
    return out


def _ids(c_ids: Any) -> list[int]:
    if c_ids is None:
        return []
    if isinstance(c_ids, int):
        return [c_ids]
    if len(c_ids) == 2 and isinstance(c_ids[0], tuple):
        return [] if c_ids[1] is None else [c_ids[1]]
    return list(c_ids)


def _group(
    fn: Primitive,
    members: list[int],
    slot_of: np.ndarray,
    inputs_of: list[tuple[int, ...]],
    kind_of: list[Any],
) -> Group:
    start = int(slot_of[members[0]])
    stop = start + len(members)
    n_in = len(inputs_of[members[0]])
    table = np.array([inputs_of[t] for t in members], dtype=np.intp).reshape(len(members), n_in)
    matrix = np.ascontiguousarray(slot_of[table.T])
    c0 = kind_of[members[0]][2]
    const: Any
    if c0 is None:
        const = None
    elif isinstance(c0, int):
        const = np.array([slot_of[kind_of[t][2]] for t in members], dtype=np.intp)
    elif len(c0) == 2 and isinstance(c0[0], tuple):
        kinds = c0[0]
        const = (
            kinds,
            None
            if c0[1] is None
            else np.array([slot_of[kind_of[t][2][1]] for t in members], dtype=np.intp),
        )
    else:
        const = tuple(
            np.array([slot_of[kind_of[t][2][k]] for t in members], dtype=np.intp)
            for k in range(len(c0))
        )
    small = len(members) < SMALL_GROUP
    forward, local = rules.kernels(fn, small, c0[0] if fn is SUM_TERMS else None)
    scatter = matrix.ravel()
    targets, inverse = np.unique(scatter, return_inverse=True)
    unique = len(targets) == len(scatter)
    return Group(
        fn,
        start,
        stop,
        matrix,
        const,
        forward,
        local,
        unique,
        small,
        scatter if unique else inverse.ravel().astype(np.intp),
        targets,
    )


def flatten(tree: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The items of a nest of tuples, lists and dicts, and the function
    that rebuilds the nest from new items."""
    items: list[Any] = []

    def walk(x: Any) -> Callable[[Any], Any]:
        if isinstance(x, (tuple, list)):
            parts = [walk(y) for y in x]
            kind = type(x)
            return lambda it: kind(p(it) for p in parts)
        if isinstance(x, dict):
            keys = list(x)
            parts = [walk(x[k]) for k in keys]
            return lambda it: {k: p(it) for k, p in zip(keys, parts)}
        items.append(x)
        return lambda it: next(it)

    rebuild = walk(tree)
    return items, lambda new: rebuild(iter(new))
