"""chainrule.compile with int arguments that pick rows and entries.

Issue 21: a trace is reused when only integer data changes which rows of a
parameter table or which entries of a list of nodes the graph reads
(microgpt's ``state_dict['wte'][token_id]``, ``probs[target_id]``); what
cannot be followed retraces, never gives a stale number.
"""

from __future__ import annotations

import math
import random
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning
from conftest import close

pytestmark = pytest.mark.usefixtures("trace_every_graph")


ROWS, WIDTH = 5, 3


class Model:
    """A table of rows of parameters, a list of parameters, and a random
    program over them whose ints pick rows and entries."""

    def __init__(self, ops: list[tuple[Any, ...]], seed: int) -> None:
        rng = random.Random(seed)
        self.table = [[Value(rng.uniform(-1, 1)) for _ in range(WIDTH)] for _ in range(ROWS)]
        self.bias = [Value(rng.uniform(-1, 1)) for _ in range(ROWS)]
        self.ops = ops

    def parameters(self) -> list[Value]:
        return [p for row in self.table for p in row] + self.bias

    def loss(self, ints: list[int]) -> Value:
        table, bias = self.table, self.bias
        x = [Value(0.1), Value(-0.2), Value(0.3)]
        for op in self.ops:
            kind, a, b = op
            i = ints[a % len(ints)]
            if kind == "row":  # a row of the table: a gather of parameters
                row = table[i]
                x = [(xi * wi + wi).tanh() for xi, wi in zip(x, row)]
            elif kind == "shifted":  # arithmetic on the int, a negative index
                row = table[(i + b) % ROWS - ROWS]
                x = [xi + wi * wi for xi, wi in zip(x, row)]
            elif kind == "bias":  # one parameter of a list
                x = [xi + bias[i] for xi in x]
            elif kind == "entry":  # an entry of a list of nodes made here
                scores = [(xi * (k + 1.0)).exp() for k, xi in enumerate(x)] + [x[0] * x[1]]
                picked = scores[(i + b) % len(scores)]
                x = [xi * picked for xi in x]
            else:  # "stable": microgpt's softmax, its target picked by an int
                top = max(v.data for v in x)
                exps = [(v - top).exp() for v in x]
                total = sum(exps)
                probs = [e / total for e in exps]
                x = [-probs[i % len(probs)].log(), *x[1:]]
        return sum(x) * (1.0 / len(x))  # type: ignore[no-any-return]


op = st.tuples(
    st.sampled_from(["row", "shifted", "bias", "entry", "stable"]),
    st.integers(0, 6),
    st.integers(0, 4),
)


def _gradients(loss: Value, params: list[Value]) -> list[float]:
    for p in params:
        p.grad = 0.0
    loss.backward()
    return [p.grad for p in params]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@given(
    st.lists(op, min_size=1, max_size=6),
    st.integers(1, 4),
    st.lists(st.lists(st.integers(0, ROWS - 1), min_size=4, max_size=4), min_size=2, max_size=8),
    st.integers(0, 99),
)
def test_ints_that_pick_rows_and_entries_replay_one_trace(
    ops: list[tuple[Any, ...]], n_ints: int, calls: list[list[int]], seed: int
) -> None:
    model = Model(ops, seed)
    params = model.parameters()
    compiled = chainrule.compile(model.loss)
    finite = True
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for ints in calls:
            ints = ints[:n_ints]
            eager = model.loss(ints)
            finite = finite and math.isfinite(eager.data)
            expected = _gradients(eager, params)
            out = compiled(ints)
            assert _same(out.data, eager.data), (ints, out.data, eager.data)
            got = _gradients(out, params)
            for g, e in zip(got, expected):
                assert close(g, e, rtol=1e-12, atol=1e-15), (ints, g, e)
    # one structure: the ints only pick. Where a pick overflows to inf or
    # nan, a / b is a true division node, not a * b**-1 (the engine's
    # exactness guard): another graph, rightly traced again; so where
    # "stable"'s max() over the numbers is won by another entry.
    picks_only = finite and all(kind != "stable" for kind, _, _ in ops)
    distinct = len({tuple(ints[:n_ints]) for ints in calls})
    assert compiled.traces == 1 if picks_only else compiled.traces <= distinct
    assert compiled.eager_reason is None


def test_microgpt_embedding_and_target_gathers() -> None:
    """The two subscripts of microgpt's loss, on names of one length."""
    wte = [[Value(0.1 * r - 0.05 * c) for c in range(4)] for r in range(27)]
    wpe = [[Value(0.02 * r + 0.01 * c) for c in range(4)] for r in range(8)]

    def loss(tokens: list[int]) -> Value:
        losses = []
        for pos_id in range(len(tokens) - 1):
            token_id, target_id = tokens[pos_id], tokens[pos_id + 1]
            tok_emb = wte[token_id]
            pos_emb = wpe[pos_id]
            logits = [t + p for t, p in zip(tok_emb, pos_emb)] * 7
            top = max(v.data for v in logits)
            exps = [(v - top).exp() for v in logits]
            total = sum(exps)
            probs = [e / total for e in exps]
            losses.append(-probs[target_id].log())
        return (1 / len(losses)) * sum(losses)

    compiled = chainrule.compile(loss)
    params = [p for t in (wte, wpe) for row in t for p in row]
    for name in ("emma", "liam", "noah", "anna", "zoey"):
        tokens = [26] + [ord(c) - 97 for c in name] + [26]
        eager = loss(tokens)
        expected = _gradients(eager, params)
        out = compiled(tokens)
        assert out.data == eager.data
        assert all(close(g, e) for g, e in zip(_gradients(out, params), expected))
    assert compiled.traces == 1


def test_an_index_out_of_range_raises_as_eagerly() -> None:
    table = [Value(1.0), Value(2.0)]
    compiled = chainrule.compile(lambda i: table[i] * 3.0)
    assert compiled(1).data == 6.0
    with pytest.raises(IndexError):
        compiled(2)
    assert compiled(-2).data == 3.0


def test_uses_that_cannot_be_followed_pin_the_value() -> None:
    w = Value(2.0)
    lookup = {0: Value(1.0), 1: Value(5.0)}
    compiled = chainrule.compile(lambda i: w * lookup[i] + float(i))  # a dict key, float()
    assert [compiled(i).data for i in (0, 1, 0, 1)] == [2.0, 11.0, 2.0, 11.0]
    assert compiled.traces == 2


def test_a_branch_on_an_int_is_a_guard() -> None:
    table = [Value(1.0), Value(2.0), Value(3.0)]

    def f(i: int) -> Value:
        v = table[i]
        return v * 10.0 if i == 2 else v * -1.0

    compiled = chainrule.compile(f)
    assert [compiled(i).data for i in (0, 1, 2, 0, 2)] == [-1.0, -2.0, 30.0, -1.0, 30.0]
    assert compiled.traces == 2  # one per side of the branch, both kept


def test_isinstance_int_holds_while_tracing() -> None:
    table = [Value(1.0), Value(2.0)]

    def f(i: Any) -> Value:
        if not isinstance(i, int):  # (not `assert`: pytest rewrites it, the copy pins)
            raise TypeError(i)
        return table[i] * 2.0

    compiled = chainrule.compile(f)
    assert [compiled(i).data for i in (0, 1)] == [2.0, 4.0]
    assert compiled.traces == 1


def test_a_subscript_of_a_list_a_call_returns_is_a_gather() -> None:
    rows = [[Value(1.0)], [Value(2.0)]]

    def pick() -> list[list[Value]]:
        return rows

    compiled = chainrule.compile(lambda i: pick()[i][0] * 2.0)
    assert [compiled(i).data for i in (0, 1, 0)] == [2.0, 4.0, 2.0]
    assert compiled.traces == 1


def test_no_trace_function_is_left_behind() -> None:
    import sys

    table = [[Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)]]
    compiled = chainrule.compile(lambda i: table[i][0] * table[i][1])
    for i in (0, 1, 0):
        compiled(i)
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__
    assert table[0][0].data == 1.0 and type(table[0]) is list and table[1][1].data == 4.0
