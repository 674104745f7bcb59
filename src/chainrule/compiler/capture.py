"""Capturing a traced graph as a :class:`~chainrule.compiler.program.Program`.

One walk (:func:`chainrule.value.walk.topological_order`, the order of the
backward pass) from the outputs and from the nodes that guards and
recipes read lists everything the program needs. Read floats that became
leaves (:mod:`chainrule.compiler.reads`) and the aliases of gathers
(:mod:`chainrule.compiler.symbolic`) carry, while tracing, the nodes they
depend on as their inputs, so the walk orders them too.

Then one pass over the order, inputs first, numbers every Value into a
*slot* of one buffer and gives each node a *level*, one more than its
deepest input: leaves (read at every replay), constants, read floats
(recomputed from their recipe), gathers' picks, interior nodes. On the way
a chain of ``+`` whose partial sums nothing else uses (what ``sum()``
builds) becomes one running sum, its single-use products included
(:data:`~chainrule.compiler.rules.SUM_TERMS`: the same terms added in the
same order, so the same floats). Nodes of one level, primitive and shape
form a *group* whose slots are one slice; running sums of one level whose
kinds of terms begin a longer one's join its group, padded with -0.0. After this the Values can be
freed.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..value.engine import Value
from ..value.primitives import ADD, BY_NAME, MUL, NUMBER, Primitive
from ..value.walk import topological_order
from . import reads, rules
from .keys import identities
from .program import (
    GUARDS_ON_ARRAYS,
    SMALL_GROUP,
    GatherStep,
    Group,
    Program,
    RecipeStep,
    SavedLocalsGroup,
    SumGroup,
    is_recipe,
    odd_number,
)
from .reads import Record, recipe_nodes
from .rules import SUM_TERMS
from .trace import GATHER, RECIPE, StandIn, TraceValue, Unsupported

_get_data = operator.attrgetter("data")
_get_prev = operator.attrgetter("_prev")
#: A node's slots read through the slots themselves (a trace's nodes have
#: watched properties of those names: a call each).
_prev_of, _local_of = Value.__dict__["_prev"].__get__, Value.__dict__["_local"].__get__


class _Roots:
    """The root of the one walk: everything the program needs as inputs."""

    __slots__ = ("_prev",)

    def __init__(self, roots: list[Any]) -> None:
        self._prev = tuple(dict.fromkeys(roots))


class MadeOutside(Unsupported):
    """The graph reads a node (not a leaf) made before the call: ``h = w * 2.0``
    outside ``fn``, a cached node, another compiled function's output. Eagerly
    its ``.data`` is as it was made and ``backward()`` goes on through it with
    the local derivatives it recorded then; a replay would recompute it from
    the leaves and stop there. ``node``: that Value, for the message."""

    def __init__(self, node: Value, name: str | None = None) -> None:
        self.node = node
        what = f"{name} = ..., " if name else ""
        super().__init__(
            f"it reads a Value made outside it by an operation ({what}a {node._fn.name!r} node "
            f"of data {Value.__dict__['data'].__get__(node, Value)!r}): eagerly its .data is "
            "the number it was made with and backward() goes on through it, where a replay "
            "would recompute it; pass it as an argument or make it inside the function"
        )


def _recipe_ids(r: Any, into: set[int]) -> None:
    """The ids of a recipe and of the recipes it is made of."""
    if type(r) is tuple and r and id(r) not in into:
        into.add(id(r))
        if r[0] == "op":
            for x in r[2:]:
                _recipe_ids(x, into)
        elif r[0] == "reduce":
            for x in r[2]:
                _recipe_ids(x, into)


def build(
    outputs: list[Value],
    output_recipes: list[Any],
    created: list[Value],
    arg_leaves: dict[Value, int],
    record: Record,
) -> Program:
    """The program that replays the graph behind ``outputs`` (and the read
    floats among the outputs, ``output_recipes``)."""
    read: list[Value] = []
    pinned_whole = set()  # recipes whose exact value a guard checks
    for f, a, b, _ in record.guards:
        if f is reads.same:
            pinned_whole.add(id(a))
        recipe_nodes(a, read)
        recipe_nodes(b, read)
    for r in output_recipes:
        recipe_nodes(r, read)
    roots = _Roots([*outputs, *read])
    # (a graph of nothing, a function that returns its float argument or
    # None: no nodes; the walk gives the root itself as its one leaf)
    nodes, leaves = topological_order(roots) if roots._prev else ([roots], [])
    for v in record.leaf_recipes:  # what the read floats were read from is read too
        if v._prev:
            read.extend(v._prev)
    pinned = set(outputs).union(read)
    program = _lay_out(nodes[1:], leaves, set(created), arg_leaves, record, pinned)
    followed = set(pinned_whole)
    for r in record.leaf_recipes.values():
        _recipe_ids(r, followed)
    for x, line in record.consumed.values():
        if id(x.recipe) not in followed:
            raise Unsupported(
                f"{line}: a traced number (a float argument, or a value read from .data) is "
                "used where compile cannot follow it (an exponent, a Python computation, "
                "a comparison with a Value); use it as an operation's operand"
            )
    return program


#: A term's *place*: ``position << PLACE_BITS | input``, where ``position``
#: is the walk position (root first) of the node whose chain rule makes the
#: term and ``input`` its input's position: one int, whose order is the
#: order in which the eager pass makes the terms (positions first, then
#: inputs). An int, not a (node, input) pair: no tuple per term, no lookup
#: of a node's position.
PLACE_BITS = 32


def _check_replayable(fn: Primitive) -> None:
    """Refuse a primitive whose backward pass cannot be replayed (checked
    once per group, where its first node meets it)."""
    if fn.closure is not None:
        raise Unsupported(
            f"node {fn.name!r} backpropagates through a micrograd _backward closure, "
            "which cannot be replayed; define the operation as a chainrule.Primitive"
        )
    if fn.derivative is None and fn is not RECIPE and fn is not GATHER:
        raise Unsupported(
            f"node {fn.name!r} was built with Value(data, children, local_grads), whose "
            "derivative cannot be evaluated again; define it as a chainrule.Primitive"
        )


def _check_numbers(leaves: list[Any], data: Any = Value.__dict__["data"].__get__) -> None:
    """Refuse a leaf whose ``.data`` is not a Python float or int (a NumPy
    scalar assigned to it: ``p.data = arr[i]``): eagerly its operations
    follow NumPy's rules (a float32's precision, inf for a division by
    zero, its type), which a float64 replay would not."""
    odd = odd_number(list(map(data, leaves)))
    if odd is not None:
        raise Unsupported(odd)


#: A running sum while its chain may grow: its inputs, the kinds of its
#: terms (1: a plain term, 2: a product's two factors), each input's place
#: (:data:`PLACE_BITS`: whose chain rule makes its term, the + or the
#: product) and the place of its last + (where padding terms go).
Chain = tuple[list[Value], list[int], list[int], int]


def _lay_out(
    nodes: list[Value],
    leaves: list[Value],
    made: set[Value],
    arg_leaves: dict[Value, int],
    record: Record,
    pinned: set[Value],
) -> Program:
    prevs, locals_ = list(map(_prev_of, nodes)), list(map(_local_of, nodes))
    uses = collections.Counter(itertools.chain.from_iterable(prevs))
    level: dict[Any, int] = dict.fromkeys(leaves, 0)
    get_level = level.__getitem__
    # Running sums, by their last +, while their chain may grow.
    chains: dict[Value, Chain] = {}
    # The nodes whose only use may extend a running sum (used once, not
    # pinned): running sums (by their last +) and products.
    extendable: set[Value] = set()
    products: set[Value] = set()
    # (level, order, kind, shape) -> members and the place of each one's
    # first term (a dict: a product joining a running sum leaves its group)
    groups: dict[Any, dict[Any, int]] = {}

    def join(x: Value, place: int, ins: list[Value], kinds: list[int], places: list[int]) -> int:
        """Input ``x`` (``place``: its term's place) as the next term of a
        running sum: a product used once, its two factors; else ``x``
        itself. Returns the term's level + 1."""
        if x in products:  # its two factors
            lv = level.pop(x)
            at = groups[(lv, 3, MUL, 2)].pop(x)
            ins += x._prev
            kinds.append(2)
            places += (at, at + 1)
            return lv
        ins.append(x)
        kinds.append(1)
        places.append(place)
        return level[x] + 1

    one_place = 1 << PLACE_BITS
    # v's place: its walk position, with input 0
    places_down = range((len(nodes) - 1) * one_place, -1, -one_place)
    for place, v, prev, local in zip(
        places_down, reversed(nodes), reversed(prevs), reversed(locals_)
    ):
        if (  # (a stand-in another trace made and left in a list: made outside)
            type(v) is not TraceValue
            and v not in made
            and (type(v) is not StandIn or v not in record.aliases)
        ):
            if any(type(x) is TraceValue or x in made for x in prev):
                raise Unsupported(  # (its inputs made inside: so was it, though not seen)
                    "it builds a node by hand on Values made inside it "
                    "(Value.__new__ and Value's own slots), which a replay would not make; "
                    "build it with Value's operations or Value(data, children, local_grads)"
                )
            raise MadeOutside(v)
        fn = local[-1] if local else None  # (v._fn without its property: the common cases)
        if type(fn) is str:
            fn = BY_NAME[fn]
        elif type(fn) is not Primitive:
            fn = v._fn
        if fn is ADD:
            a, b = prev
            if a in extendable:
                ins, kinds, places, _ = chains.pop(a)
                lv = level.pop(a)
                lv_more = join(b, place + 1, ins, kinds, places)
            elif b in extendable:  # a + b is b + a, exactly
                ins, kinds, places, _ = chains.pop(b)
                lv = level.pop(b)
                lv_more = join(a, place, ins, kinds, places)
            else:
                ins, kinds, places = [], [], []
                lv = join(a, place, ins, kinds, places)
                lv_more = join(b, place + 1, ins, kinds, places)
            chains[v] = (ins, kinds, places, place)
            level[v] = lv if lv > lv_more else lv_more
            if uses[v] == 1 and v not in pinned:
                extendable.add(v)
            continue
        n_in = len(prev)
        if n_in == 1:
            lv = level[prev[0]] + 1
        elif n_in == 2:
            lv, lv_b = level[prev[0]], level[prev[1]]
            lv = (lv if lv > lv_b else lv_b) + 1
        else:
            lv = 1 + max(map(get_level, prev))
        level[v] = lv
        if fn is GATHER:
            key: Any = (lv, 2, "gather", n_in)
        elif fn is RECIPE:
            key = (lv, 1, "recipe", 0)
        else:
            key = (lv, 3, fn, n_in)
            if fn is MUL and uses[v] == 1 and v not in pinned:
                products.add(v)
        group = groups.get(key)
        if group is None:
            _check_replayable(fn)
            group = groups[key] = {}
        group[v] = place
    sums: dict[Any, list[tuple[Value, Chain]]] = {}
    for v, chain in chains.items():
        kinds = chain[1]
        if len(kinds) == 2 and kinds[0] == kinds[1] == 1:  # one +: stays a plain +
            groups.setdefault((level[v], 3, ADD, 2), {})[v] = chain[3]
        else:
            sums.setdefault((level[v], 4, SUM_TERMS, tuple(kinds)), []).append((v, chain))
    pads = (Value(-0.0), Value(1.0))
    padded = _merge_sums(sums, *pads)

    prog = Program()
    slot: dict[Any, int] = {}
    live, constants, arg_slots, recipe_leaves = [], [], [], []
    for leaf in leaves:
        if leaf in record.leaf_recipes:
            recipe_leaves.append(leaf)
        elif leaf in arg_leaves:
            arg_slots.append(leaf)
        elif leaf in made:
            constants.append(leaf)
        else:
            live.append(leaf)
    if padded:
        constants += pads
    _check_numbers(live)
    order: list[Any] = [*live, *arg_slots, *constants]
    slot.update(zip(order, range(len(order))))
    prog.live = live
    prog.live_inputs = tuple(live)
    prog.live_slots = np.arange(len(live), dtype=np.intp)
    prog.arg_leaves = [(slot[v], arg_leaves[v]) for v in arg_slots]
    members_of: dict[Any, Any] = {k: g for k, g in groups.items() if g}
    members_of.update(sums)
    keys = sorted(members_of, key=lambda k: (k[0], k[1], id(k[2]), k[3]))
    for leaf in recipe_leaves:  # read floats of the arguments only
        slot[leaf] = len(slot)
    for key in keys:
        members = members_of[key]
        nodes_here = members if type(members) is dict else [m[0] for m in members]
        slot.update(zip(nodes_here, itertools.count(len(slot))))
    prog.n = len(slot) + 1
    data = Value.__dict__["data"].__get__  # the slot itself (not a trace's property)
    prog.base = np.fromiter(map(data, slot, itertools.repeat(Value)), float, len(slot))
    prog.base = np.append(prog.base, 1.0)  # the last slot: 1.0, plain terms' local derivative
    prog.node_slot = slot
    prog.numbers = _numbers(prog.n, slot, [*constants, *recipe_leaves], pads)

    recipes = record.leaf_recipes
    edges = _Edges()
    steps: list[Any] = []
    if recipe_leaves:
        steps.append(_recipe_step(prog, recipe_leaves, recipes))
    for key in keys:
        _, _, kind, shape = key
        members = members_of[key]
        if kind == "recipe":
            steps.append(_recipe_step(prog, list(members), recipes))
        elif kind == "gather":
            steps.append(_gather_step(list(members), slot, record))
        elif kind is SUM_TERMS:
            start = slot[members[0][0]]
            made_sum = _group(SUM_TERMS, [m[1][0] for m in members], start, slot, shape, len(slot))
            edges.add_sums(made_sum, [m[1][2] for m in members])
            steps.append(made_sum)
        else:
            first = next(iter(members))
            node_group = _group(kind, list(map(_get_prev, members)), slot[first], slot, None)
            if type(node_group) is SavedLocalsGroup:
                _save_locals(prog, node_group, list(members))
            edges.add(node_group, members.values())
            steps.append(node_group)
    prog.steps = steps
    edges.lay_out(prog, len(live) + len(arg_slots))
    _compile_guards(prog, record.guards, arg_leaves)
    return prog


def _numbers(n: int, slot: dict[Any, int], leaves: list[Any], pads: tuple[Any, ...]) -> Any:
    """Which slots hold a number operand (``x * 2.0``, a float argument, a
    read float: eagerly a ``NUMBER`` leaf, whose gradient detect_anomaly
    ignores), the pads and the slot of 1.0 (see ``Program.numbers``)."""
    numbers = np.zeros(n, dtype=bool)
    numbers[-1] = True
    for leaf in leaves:
        numbers[slot[leaf]] = leaf._fn is NUMBER or any(leaf is pad for pad in pads)
    return numbers


def _merge_sums(sums: dict[Any, list[tuple[Value, Chain]]], zero: Value, one: Value) -> bool:
    """Running sums of a level whose kinds of terms begin those of longer
    ones there (softmax denominators over rows of different lengths) join
    the longest: the terms they lack are ``zero`` (-0.0; for a product,
    -0.0 times ``one``), added last, which leaves a sum as it is (``x +
    -0.0`` is ``x``, bit for bit); their gradients go to those constants.
    One group instead of several: fewer NumPy calls. Whether any joined."""
    by_level: dict[int, list[Any]] = {}
    for key in sums:
        by_level.setdefault(key[0], []).append(key)
    joined = False
    for keys in by_level.values():
        keys.sort(key=lambda k: -len(k[3]))  # longest first
        for i, short in enumerate(keys):
            kinds = short[3]
            for long in keys[:i]:
                if long not in sums or long[3][: len(kinds)] != kinds:
                    continue
                for v, chain in sums.pop(short):
                    ins, _, places, at = chain
                    for kind in long[3][len(kinds) :]:
                        for pad in (zero, one)[:kind]:
                            places.append(at + len(ins))
                            ins.append(pad)
                    sums[long].append((v, chain))
                joined = True
                break
    return joined


class _Edges:
    """The backward pass's terms (a node's local derivative times its
    gradient, for one input), numbered group by group as the groups write
    them, and for every slot the terms it adds up, in the order the eager
    pass adds them: by the walk position of the node whose chain rule makes
    the term (root first), then by input position: by their places
    (:data:`PLACE_BITS`)."""

    def __init__(self) -> None:
        self.targets: list[np.ndarray] = []
        self.places: list[np.ndarray] = []
        self.count = 0

    def add(self, group: Group, places: Iterable[int]) -> None:
        """The terms of ``group``, whose member c makes the terms of its
        inputs (row r of the matrix: input r), its first term at
        ``places[c]``."""
        n_in, n = group.matrix.shape
        first = np.fromiter(places, np.intp, n)
        self._append(group, (first + np.arange(n_in, dtype=np.intp)[:, None]).ravel())

    def add_sums(self, group: Group, places: list[list[int]]) -> None:
        """The terms of the running sums ``group``: row r, column c is input
        r of sum c, its term at ``places[c][r]``."""
        n_in, n = group.matrix.shape
        flat = np.fromiter(itertools.chain.from_iterable(places), np.intp, n * n_in)
        self._append(group, flat.reshape(n, n_in).T.ravel())

    def _append(self, group: Group, places: np.ndarray) -> None:
        group.first_term = self.count
        self.count += places.size
        self.targets.append(group.matrix.ravel())
        self.places.append(places)

    def lay_out(self, prog: Program, n_leaves: int) -> None:
        """Per step, and for the leaves, the matrix of the terms each of its
        slots adds (one row per term, in order; short columns padded with
        the term past the last, which is 0)."""
        prog.n_terms = self.count
        pad = self.count
        if self.count:
            targets = np.concatenate(self.targets)
            places = np.concatenate(self.places)
            order = np.lexsort((places, targets))
        else:
            targets = order = np.zeros(0, dtype=np.intp)
        sorted_targets = targets[order]
        # every term's place in the eager pass (where a gather's pick makes
        # two slots one node, their terms merge in this order: Program)
        prog.term_rank = np.empty(self.count + 1, dtype=np.intp)
        if self.count:
            prog.term_rank[np.argsort(places, kind="stable")] = np.arange(self.count)
        prog.term_rank[-1] = self.count  # the padding term, last
        counts = np.bincount(targets, minlength=prog.n)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
        rank = np.arange(len(order)) - starts[sorted_targets]

        def incoming(first: int, stop: int) -> np.ndarray:
            width = stop - first
            lo = int(starts[first]) if width else 0
            hi = int(starts[stop - 1] + counts[stop - 1]) if width else 0
            depth = int(counts[first:stop].max()) if width else 0
            matrix = np.full((max(depth, 1), width), pad, dtype=np.intp)
            matrix[rank[lo:hi], sorted_targets[lo:hi] - first] = order[lo:hi]
            return matrix

        for step in prog.steps:
            if isinstance(step, Group):
                step.incoming = incoming(step.start, step.stop)
            elif type(step) is GatherStep:
                first = int(step.out[0])
                assert (step.out == np.arange(first, first + len(step.out))).all()
                step.incoming = incoming(first, first + len(step.out))
        prog.leaf_incoming = incoming(0, n_leaves)


def _group(
    fn: Primitive,
    inputs: list[Any],
    start: int,
    slot: dict[Any, int],
    kinds: tuple[int, ...] | None,
    one_slot: int = -1,
) -> Group:
    n = len(inputs)
    n_in = len(inputs[0])
    flat = map(slot.__getitem__, itertools.chain.from_iterable(inputs))
    matrix = np.fromiter(flat, np.intp, n * n_in).reshape(n, n_in).T.copy()
    small = n < SMALL_GROUP
    const = None if kinds is None else (kinds, None)
    forward, local = rules.kernels(fn, small, kinds)
    if kinds is None:
        kind = Group if rules.is_own(fn) else SavedLocalsGroup
        return kind(fn, start, start + n, matrix, const, forward, local, small)
    rows = np.cumsum((0, *kinds))[:-1]  # each term's first input row
    is_product = np.array(kinds) == 2
    firsts = rows[is_product]
    partner = np.full_like(matrix, one_slot)
    partner[firsts] = matrix[firsts + 1]
    partner[firsts + 1] = matrix[firsts]
    return SumGroup(
        fn,
        start,
        start + n,
        matrix,
        const,
        forward,
        local,
        small,
        left=matrix[firsts],
        right=matrix[firsts + 1],
        single=matrix[rows[~is_product]],
        products=np.flatnonzero(is_product),
        singles=np.flatnonzero(~is_product),
        partner=partner,
    )


def _save_locals(prog: Program, group: SavedLocalsGroup, members: list[Value]) -> None:
    """Slots past the program's for the local derivatives of a user's
    primitive (``SavedLocalsGroup``), holding the traced nodes' (a replay
    of the traced call computes them again: the same numbers, or the
    function runs eagerly)."""
    n_in, n = group.matrix.shape
    traced = [x for v in members for x in v._local[:n_in]]
    odd = [x for x in traced if not rules.replays_as_float(x)]
    if odd and isinstance(odd[0], reads.TracedFloat):
        raise Unsupported(
            f"the derivative rule of {group.fn.name!r} computes a local derivative from a "
            "float the function reads (a float argument, a Value's .data): a replay would "
            "reuse the traced number (make what it reads an input of the primitive)"
        )
    if odd:
        raise Unsupported(
            f"the derivative rule of {group.fn.name!r} returns a local derivative of type "
            f"{type(odd[0]).__name__} (eager's backward() uses it as is; a replay holds float64)"
        )
    group.saved = np.arange(prog.n, prog.n + n_in * n, dtype=np.intp).reshape(n, n_in).T.copy()
    prog.base = np.concatenate([prog.base, traced])
    prog.n += n_in * n


def _gather_step(aliases: list[Value], slot: dict[Any, int], record: Record) -> GatherStep:
    """The picks of the aliases of one level that have as many entries to
    pick from: a table of candidate slots, one row per alias, and the int
    recipe that picks the column."""
    out = np.array([slot[a] for a in aliases], dtype=np.intp)
    rows, recipes = [], []
    for a in aliases:
        g, j = record.aliases[a]
        gather = record.gathers[g]
        entries = [row[j] for row in gather.candidates] if gather.row else gather.candidates
        rows.append([slot[c] for c in entries])
        recipes.append(gather.index)
    return GatherStep(out, np.array(rows, dtype=np.intp), recipes)


def _recipe_step(prog: Program, leaves: list[Value], recipes: dict[Any, Any]) -> RecipeStep:
    slots = np.array([prog.node_slot[v] for v in leaves], dtype=np.intp)
    return RecipeStep(slots, recipes_function(prog, [recipes[v] for v in leaves], arrays=True))


def recipes_function(
    prog: Program, rs: list[Any], arrays: bool = False
) -> Callable[[np.ndarray, Any], Any]:
    """Several recipes as one function of the value buffer and the call,
    each shared part computed once (a softmax's ``-max(...)`` is read by
    every one of its ``v - top``): the recipes become a list of
    instructions whose results fill a list in order. With ``arrays``, the
    function may return a float64 array instead (see :func:`_on_arrays`)."""
    code: list[tuple[Any, ...]] = []  # (kind, ...): one result each
    seen: dict[Any, int] = {}

    def emit(r: Any) -> int:
        key: Any = id(r)
        if key in seen:
            return seen[key]
        instr: tuple[Any, ...]
        if not is_recipe(r):
            instr = ("const", r)
        else:
            kind = r[0]
            if kind == "node":
                instr = ("slot", prog.node_slot[r[1]])
            elif kind in ("arg", "int"):
                instr = (kind, r[1])
            elif kind == "op":
                instr = ("op", r[1], tuple(emit(x) for x in r[2:]))
            elif all(is_recipe(x) and x[0] == "node" for x in r[2]):  # max(v.data for v in xs)
                slots = np.array([prog.node_slot[x[1]] for x in r[2]], dtype=np.intp)
                instr = ("reduce slots", r[1], slots)
            else:
                instr = ("reduce", r[1], tuple(emit(x) for x in r[2]))
            if instr[0] in ("op", "slot", "arg", "int"):  # the same computation: once
                structural = instr if instr[0] != "op" else ("op", id(instr[1]), *instr[2:])
                if structural in seen:
                    seen[key] = seen[structural]
                    return seen[key]
                seen[structural] = len(code)
        seen[key] = len(code)
        code.append(instr)
        return seen[key]

    outs = [emit(r) for r in rs]
    slots, where = _gathered(code)
    looped = _looped(code, outs, slots, where)
    on_arrays = _on_arrays(code, outs, slots, where, looped) if arrays else None
    return looped if on_arrays is None else on_arrays


def _gathered(code: list[tuple[Any, ...]]) -> tuple[np.ndarray, list[Any]]:
    """Every slot the instructions read, in their order, and per
    instruction the part of those it reads (an index, a slice, or None)."""
    read: list[np.ndarray] = []
    where: list[Any] = []
    at = 0
    for instr in code:
        if instr[0] == "slot":
            read.append(np.array([instr[1]], dtype=np.intp))
            where.append(at)
            at += 1
        elif instr[0] == "reduce slots":
            n = len(instr[2])
            read.append(instr[2])
            where.append(slice(at, at + n))
            at += n
        else:
            where.append(None)
    return (np.concatenate(read) if read else np.zeros(0, dtype=np.intp)), where


#: The builtins over read floats that :func:`_on_arrays` runs as NumPy calls.
_REDUCTIONS = {max: np.maximum, min: np.minimum}


def _on_arrays(
    code: list[tuple[Any, ...]],
    outs: list[int],
    slots: np.ndarray,
    where: list[Any],
    looped: Callable[..., list[Any]],
) -> Callable[..., Any] | None:
    """The instructions on arrays when they are only slots, ``max`` or
    ``min`` over slots and negations of those (a stable softmax's
    ``-max(v.data for v in row)``, every row at once): one gather, one
    ``reduceat`` per kind of reduction, one negation; None otherwise. The
    builtin's pick among equal floats (``0.0`` and ``-0.0``) and among nan
    is its own: a call whose values hold a zero or a nan runs ``looped``."""
    kinds: dict[str, list[int]] = {"slot": [], "reduce": [], "negate": []}  # positions
    reducer: dict[Any, list[int]] = {}  # np.maximum / np.minimum -> instructions
    argument = []  # per negation: the instruction it negates
    for i, instr in enumerate(code):
        kind = instr[0]
        if kind == "slot":
            kinds["slot"].append(i)
        elif kind == "reduce slots" and instr[1] in _REDUCTIONS and len(instr[2]):
            kinds["reduce"].append(i)
            reducer.setdefault(_REDUCTIONS[instr[1]], []).append(i)
        elif kind == "op" and instr[1] is reads.apply1:
            f, x = instr[2]
            if code[f][0] != "const" or code[f][1] is not operator.neg:
                return None
            if code[x][0] not in ("slot", "reduce slots"):
                return None
            kinds["negate"].append(i)
            argument.append(x)
        elif kind != "const" or i in outs:
            return None
    if not kinds["reduce"] and not kinds["negate"]:
        return None  # nothing to gain
    # every part of the gathered values in order: reduceat's segments
    parts = [where[i] for i in range(len(code)) if where[i] is not None]
    starts = np.array([p if type(p) is int else p.start for p in parts], dtype=np.intp)
    segment = {i: k for k, i in enumerate(j for j in range(len(code)) if where[j] is not None)}
    by_reducer = [
        (ufunc, np.array(mine, dtype=np.intp), np.array([segment[i] for i in mine], np.intp))
        for ufunc, mine in reducer.items()
    ]
    plain = np.array(kinds["slot"], dtype=np.intp)
    plain_at = np.array([where[i] for i in kinds["slot"]], dtype=np.intp)
    negated = np.array(kinds["negate"], dtype=np.intp)
    negated_of = np.array(argument, dtype=np.intp)
    picks = np.array(outs, dtype=np.intp)
    n = len(code)

    def compute(val: np.ndarray, call: Any) -> Any:
        values = val.take(slots)
        if not values.all() or np.isnan(values).any():
            return looped(val, call)
        results = np.empty(n)
        results[plain] = values[plain_at]
        for ufunc, mine, segments in by_reducer:
            results[mine] = ufunc.reduceat(values, starts)[segments]
        results[negated] = -results[negated_of]
        return results.take(picks)

    return compute


def _looped(
    code: list[tuple[Any, ...]], outs: list[int], slots: np.ndarray, where: list[Any]
) -> Callable[..., list[Any]]:
    """The instructions as a function of the buffer and the call: a loop
    over them, with every slot they read gathered at once first (the
    buffer does not change while they run)."""

    def compute(val: np.ndarray, call: Any) -> list[Any]:
        env: list[Any] = []
        push = env.append
        values = val.take(slots).tolist()
        for instr, part in zip(code, where):
            kind = instr[0]
            if kind == "op":
                push(instr[1](*[env[i] for i in instr[2]]))
            elif kind == "slot" or kind == "reduce slots":
                push(values[part] if kind == "slot" else instr[1](values[part]))
            elif kind == "const":
                push(instr[1])
            elif kind == "arg":
                push(call.floats[instr[1]])
            elif kind == "int":
                push(call.ints[instr[1]])
            else:
                push(instr[1]([env[i] for i in instr[2]]))
        return [env[i] for i in outs]

    return compute


def recipe_function(prog: Program, r: Any) -> Callable[[np.ndarray, Any], Any]:
    """One recipe as a function of the value buffer and the call."""
    compute = recipes_function(prog, [r])
    return lambda val, call: compute(val, call)[0]


def _object_of(r: Any, arg_leaves: dict[Value, int]) -> Callable[[np.ndarray, Any], Any]:
    """The float object that a recipe of :func:`~chainrule.compiler.reads.identical`
    finds at replay: a float argument, a leaf's ``.data``, a constant."""
    kind, x = r
    if kind == "arg":
        return lambda val, call: call.floats[x]
    if kind == "node":
        pos = arg_leaves.get(x)
        if pos is not None:  # a Value argument: this call's
            return lambda val, call: call.values[pos].data
        return lambda val, call: x.data
    return lambda val, call: x  # ("const", x)


def _identities_now(val: np.ndarray, call: Any) -> tuple[int, ...]:
    """Which of this call's float arguments are one object."""
    return identities(call.floats)


def _compile_guards(
    prog: Program, guards: list[tuple[Any, Any, Any, Any]], arg_leaves: dict[Value, int]
) -> None:
    """Guards between node values and numbers are checked a function at a
    time on gathered values (numbers get a slot of their own); others, by
    their recipes; identities, on the objects (:func:`_object_of`)."""
    extra: list[float] = []
    by_f: dict[Any, tuple[list[int], list[int], list[Any]]] = {}

    args: dict[int, int] = {}  # a float argument -> its slot (filled at each replay)

    def slot(r: Any) -> int | None:
        if is_recipe(r):
            if r[0] == "arg":
                if r[1] not in args:
                    extra.append(0.0)
                    args[r[1]] = prog.n + len(extra) - 1
                return args[r[1]]
            return prog.node_slot[r[1]] if r[0] == "node" else None
        if type(r) is float or (type(r) is int and -(2**53) <= r <= 2**53):
            extra.append(float(r))  # (an int beyond 2**53: compared exactly, by its recipe)
            return prog.n + len(extra) - 1
        return None

    for f, a, b, expected in guards:
        if f is reads.is_same:
            prog.guards.append((f, _object_of(a, arg_leaves), _object_of(b, arg_leaves), expected))
            continue
        if f is reads.cached_again:  # (a: the call of a functools cache)
            prog.late_guards.append((f, lambda *_, a=a: a, lambda *_: None, True))
            continue
        if f is identities:  # (b: the call's pattern)
            prog.guards.append((operator.eq, _identities_now, lambda *_, b=b: b, True))
            continue
        if f is reads.same_pattern:  # (a: the recipes of the objects, b: their pattern)
            found = [_object_of(r, arg_leaves) for r in a]
            prog.guards.append(
                (
                    f,
                    lambda val, call, found=found: identities([g(val, call) for g in found]),
                    lambda *_, b=b: b,
                    True,
                )
            )
            continue
        sa, sb = slot(a), slot(b)
        if sa is None or sb is None:
            prog.guards.append((f, recipe_function(prog, a), recipe_function(prog, b), expected))
            continue
        group = by_f.setdefault(f, ([], [], []))
        group[0].append(sa)
        group[1].append(sb)
        group[2].append(expected)
    prog.node_guards = [
        (
            f,
            np.array(a, dtype=np.intp),
            np.array(b, dtype=np.intp),
            np.array(expected) if f in GUARDS_ON_ARRAYS else expected,  # as they compare
        )
        for f, (a, b, expected) in by_f.items()
    ]
    if extra:
        prog.base = np.concatenate([prog.base, extra])
        prog.n += len(extra)
    if args:
        prog.arg_slots = np.array(list(args.values()), dtype=np.intp)
        prog.arg_positions = list(args)
