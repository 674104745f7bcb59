"""The backward-pass table: the micrograd and microgpt walkthroughs row by row, sums for
shared nodes, Markdown, and that explaining changes no gradient."""

from __future__ import annotations

import doctest
import importlib
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chainrule import Value, explain
from chainrule.explainer.formula import evaluate
from chainrule.explainer.table import backward_walk, meaning_of, trace
from chainrule.explainer.text import forward_order
from tables import cells
from test_properties import inputs, instruction, run

# `chainrule.explain` is the function; the module is reached by its full name.
explain_module = importlib.import_module("chainrule.explainer.table")

# f = relu(a*b + d) at a=2, b=-3, d=10, in named steps: grads a -3, b 2, c d e f 1
SEED_002 = """\
node  op    data  local gradient toward each input  grad        meaning
----  ----  ----  --------------------------------  ----------  ----------------------------------------------
f     ReLU   4.0  e: 1.0                            1.0 (seed)  seed: the output itself
e     +      4.0  c: 1.0, d: 1.0                    1.0         if e increases by a small h, f increases by h
d           10.0                                    1.0         if d increases by a small h, f increases by h
c     *     -6.0  a: -3.0, b: 2.0                   1.0         if c increases by a small h, f increases by h
b           -3.0                                    2.0         if b increases by a small h, f increases by 2h
a            2.0                                    -3.0        if a increases by a small h, f decreases by 3h"""  # noqa: E501

SEED_003_MARKDOWN = """\
| node | op | data | local gradient toward each input | grad | meaning |
|---|---|--:|---|---|---|
| `(a*b + a)**2` | `**2` | 64.0 | `a*b + a`: 16.0 | 1.0 (seed) | seed: the output itself |
| `a*b + a` | `+` | 8.0 | `a*b`: 1.0, `a`: 1.0 | 16.0 | if a*b + a increases by a small h, (a*b + a)**2 increases by 16h |
| `a*b` | `*` | 6.0 | `a`: 3.0, `b`: 2.0 | 16.0 | if a*b increases by a small h, (a*b + a)**2 increases by 16h |
| `b` | | 3.0 | | 32.0 | if b increases by a small h, (a*b + a)**2 increases by 32h |
| `a` | | 2.0 | | 16.0 + 48.0 = 64.0 | if a increases by a small h, (a*b + a)**2 increases by 64h |"""  # noqa: E501


def test_docstring_examples() -> None:
    assert doctest.testmod(explain_module).failed == 0


def test_seed_002_table() -> None:
    f = evaluate("c = a*b; e = c + d; f = relu(e)", {"a": 2, "b": -3, "d": 10})
    assert explain(f) == SEED_002


def test_seed_003_trace() -> None:
    # the whole text is the docstring example of trace(); here: a's two contributions
    e = evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3})
    lines = trace(e).splitlines()
    into_a = [line.split("a.grad += ")[1] for line in lines if "a.grad += " in line]
    assert into_a == ["1.0 * 16.0  -> a.grad = 16.0", "3.0 * 16.0  -> a.grad = 16.0 + 48.0 = 64.0"]
    assert lines.index("topological order: a, b, c, d, e") == 0
    assert e.grad == 0.0  # read-only, as the table


def test_walk_records_every_update_against_backward() -> None:
    f = evaluate("c = a*b; d = c + a; e = tanh(d) * a - max(c, b) / d", {"a": 0.7, "b": -1.9})
    walk = backward_walk(f)
    f.backward()
    assert walk.grads == [v.grad for v in walk.nodes]
    assert walk.nodes[walk.root] is f
    for u in walk.updates:  # each update is local * incoming, and the totals run on
        assert u.contribution == u.local * u.incoming
        assert u.after == u.before + u.contribution
    for k in range(len(walk.nodes)):  # every contribution is one update into k
        assert [u.contribution for u in walk.updates if u.child == k] == walk.received[k]
    # a node is processed only after all its consumers have passed to it
    done = {walk.root}
    for u in walk.updates:
        assert u.node in done
        if all(v.child != u.child for v in walk.updates[walk.updates.index(u) + 1 :]):
            done.add(u.child)


@pytest.mark.parametrize(
    ("grad", "words"),
    [
        (-3.0, "if a increases by a small h, f decreases by 3h"),
        (1.0, "if a increases by a small h, f increases by h"),
        (0.25, "if a increases by a small h, f increases by 0.25h"),
        (1e-7, "if a increases by a small h, f increases by 1e-07*h"),
        (0.0, "a small change in a leaves f unchanged"),
        (float("inf"), "f increases without bound as a increases (inf)"),
        (float("nan"), "the rate of change of f is undefined here (nan)"),
    ],
)
def test_meaning_in_words(grad: float, words: str) -> None:
    assert meaning_of("a", "f", grad, False) == words


def test_seed_003_markdown_sums_the_two_paths_into_a() -> None:
    # micrograd's walkthrough: a.grad = 16 + 48 = 64, b.grad = 32
    f = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    assert explain(f, format="markdown") == SEED_003_MARKDOWN


def test_explain_changes_no_grad() -> None:
    f = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    a = f._prev[0]._prev[1]
    explain(f)
    assert (f.grad, a.grad) == (0.0, 0.0)
    f.backward()
    f.backward()  # leaves now hold two passes' worth
    assert a.grad == 128.0
    assert cells(explain(f))[-1]["grad"] == "16.0 + 48.0 = 64.0"  # one pass, as documented
    assert a.grad == 128.0


@pytest.mark.parametrize(
    "formula",
    [
        "(a*b + a)**2",
        "a - a*b",
        "tanh(a*b) * a + exp(-b) / (a*a + 1)",
        "max(a, b) * min(a, b) + softplus(a - b)**3",
        "sqrt(abs(a) + 1) * log(b*b) - sigmoid(a*b) + relu(b - a)",
        # an inf gradient reaches relu, max, min: their masked inputs get 0, not nan
        "relu(b) * 1e308 * 10 + max(a, b) * 1e308 * 10 - min(b, a*a) * 1e308 * 10",
    ],
)
def test_grad_column_is_exactly_what_backward_gives(formula: str) -> None:
    f = evaluate(formula, {"a": 0.7, "b": -1.9})
    f.backward()
    rows = cells(explain(f, digits=17))[1:]
    shown = [row["grad"].rsplit(" ", 1)[-1] for row in rows]
    nodes = forward_order(f)[::-1][1:]
    assert [float(s) for s in shown] == pytest.approx([v.grad for v in nodes], rel=0, nan_ok=True)


def test_negative_contributions_are_subtracted() -> None:
    f = evaluate("a - a*b", {"a": 2, "b": 3})
    assert cells(explain(f))[-1]["grad"] == "1.0 - 3.0 = -2.0"


def test_many_contributions_are_counted_not_listed() -> None:
    f = evaluate("+".join(["x"] * 10), {"x": 1.5})
    assert cells(explain(f))[-1]["grad"] == "sum of 10 contributions = 10.0"


def test_a_leaf_alone() -> None:
    (row,) = cells(explain(Value(2.0, label="w")))
    assert (row["node"], row["data"], row["grad"]) == ("w", "2.0", "1.0 (seed)")
    assert trace(Value(2.0, label="w")).splitlines()[-1] == "w is a leaf: nothing to pass on"


def test_unlabelled_nodes_are_numbered() -> None:
    x = Value(3.0)
    y = x * x + 1.0
    rows = [list(row.values())[:5] for row in cells(explain(y))]
    assert rows == [  # the number 1.0 is a leaf, as in micrograd, shown as itself
        ["#3", "+", "10.0", "#1: 1.0, 1.0: 1.0", "1.0 (seed)"],
        ["1.0", "", "1.0", "", "1.0"],
        ["#1", "*", "9.0", "#0: 3.0, #0: 3.0", "1.0"],
        ["#0", "", "3.0", "", "3.0 + 3.0 = 6.0"],
    ]


def test_markdown_escapes_pipes_in_labels() -> None:
    x = Value(1.0, label="a|b")
    line = explain(x.exp(), format="markdown").splitlines()[2]
    assert (
        line
        == "| `#1` | `exp` | 2.71828 | `a\\|b`: 2.71828 | 1.0 (seed) | seed: the output itself |"
    )


def test_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'text' or 'markdown'"):
        explain(Value(1.0), format="html")
    with pytest.raises(TypeError, match="expected a Value or a Tensor, got float"):
        explain(3.0)
    with pytest.raises(TypeError, match="trace: expected a Value"):
        trace(3.0)  # type: ignore[arg-type]


@given(program=st.lists(instruction, min_size=1, max_size=20), values=inputs)
def test_random_graphs_walk_is_exactly_backward(
    program: list[tuple[Any, ...]], values: list[float]
) -> None:
    # shared subexpressions, reuse, fused neurons: every node's grad, bit for bit
    out = run(program, [Value(v) for v in values])
    walk = backward_walk(out)
    out.backward()
    for node, g in zip(walk.nodes, walk.grads):
        assert g == node.grad or (math.isnan(g) and math.isnan(node.grad))
    for u in walk.updates:
        c = u.local * u.incoming
        assert c == u.contribution or (math.isnan(c) and math.isnan(u.contribution))
    assert len(trace(out).splitlines()) == 3 + len(walk.updates)


def test_trace_names_constant_operands_and_masked_nodes() -> None:
    f = evaluate("c = 2 - a; d = c*3 + a/4 - 1/c", {"a": 1.0})
    heads = [line.split("  ")[1] for line in trace(f).splitlines()[3:] if line[2] != " "]
    # 2 - a is micrograd's (a * -1) + 2; number operands are leaves shown as themselves
    assert "c = #2 + 2.0" in heads and "#2 = a * -1.0" in heads and "c*3 = c * 3.0" in heads
    # inf reaches relu(a) at a = -1: relu's zero local gradient masks it, as PyTorch
    g = evaluate("relu(a) * 1e308 * 10", {"a": -1.0})
    last = trace(g).splitlines()[-1].split()
    assert last[0] == "relu(a)"  # a node named by its own formula: said once
    assert " ".join(last[1:]) == "passes nothing: its grad inf is masked"
    g.backward()
    assert g._prev[0]._prev[0]._prev[0].grad == 0.0  # a: nothing, as the trace says


def test_a_micrograd_closure_node_is_refused_by_name() -> None:
    # micrograd's protocol: Value(data, _children, _op) and a _backward closure
    a = Value(2.0)
    out = Value(a.data**3, (a,), "cube")

    def _backward() -> None:
        a.grad += 3 * a.data**2 * out.grad

    out._backward = _backward
    with pytest.raises(TypeError, match=r"explain: .*'cube'.* _backward closure"):
        explain(out)
