"""The backward-pass table: the seeds' walkthroughs row by row, sums for
shared nodes, Markdown, and that explaining changes no gradient."""

from __future__ import annotations

import doctest
import importlib

import pytest

from chainrule import Value, explain
from chainrule.expr import evaluate
from chainrule.viz import forward_order

# `chainrule.explain` is the function; the module is reached by its full name.
explain_module = importlib.import_module("chainrule.explain")

SEED_002 = """\
node           op    data  local gradient toward each input  grad
-------------  ----  ----  --------------------------------  ----------
relu(a*b + d)  ReLU   4.0  a*b + d: 1.0                      1.0 (seed)
a*b + d        +      4.0  a*b: 1.0, d: 1.0                  1.0
d                    10.0                                    1.0
a*b            *     -6.0  a: -3.0, b: 2.0                   1.0
b                    -3.0                                    2.0
a                     2.0                                    -3.0"""

SEED_003_MARKDOWN = """\
| node | op | data | local gradient toward each input | grad |
|---|---|--:|---|---|
| `(a*b + a)**2` | `**2` | 64.0 | `a*b + a`: 16.0 | 1.0 (seed) |
| `a*b + a` | `+` | 8.0 | `a*b`: 1.0, `a`: 1.0 | 16.0 |
| `a*b` | `*` | 6.0 | `a`: 3.0, `b`: 2.0 | 16.0 |
| `b` |  | 3.0 |  | 32.0 |
| `a` |  | 2.0 |  | 16.0 + 48.0 = 64.0 |"""


def test_docstring_examples() -> None:
    assert doctest.testmod(explain_module).failed == 0


def test_seed_002_table() -> None:
    # seed 002: f = relu(a*b + d) at a=2, b=-3, d=10; grads a -3, b 2, c d e f 1
    f = evaluate("relu(a*b + d)", {"a": 2, "b": -3, "d": 10})
    assert explain(f) == SEED_002


def test_seed_003_markdown_sums_the_two_paths_into_a() -> None:
    # seed 003: a.grad = 16 + 48 = 64, b.grad = 32
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
    assert explain(f).splitlines()[-1].endswith("16.0 + 48.0 = 64.0")  # one pass, as documented
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
    rows = explain(f, digits=17).splitlines()[2:]
    shown = [row.rsplit(" ", 1)[-1] for row in rows if not row.endswith("(seed)")]
    nodes = forward_order(f)[::-1][1:]
    assert shown == [repr(v.grad) for v in nodes]


def test_negative_contributions_are_subtracted() -> None:
    f = evaluate("a - a*b", {"a": 2, "b": 3})
    assert explain(f).splitlines()[-1].split("  ")[-1] == "1.0 - 3.0 = -2.0"


def test_many_contributions_are_counted_not_listed() -> None:
    f = evaluate("+".join(["x"] * 10), {"x": 1.5})
    assert explain(f).splitlines()[-1].endswith("sum of 10 contributions = 10.0")


def test_a_leaf_alone() -> None:
    assert explain(Value(2.0, label="w")).splitlines()[2].split() == ["w", "2.0", "1.0", "(seed)"]


def test_unlabelled_nodes_are_numbered() -> None:
    x = Value(3.0)
    y = x * x + 1.0
    lines = explain(y).splitlines()
    assert lines[2].split() == ["#2", "+", "10.0", "#1:", "1.0", "1.0", "(seed)"]
    assert lines[3].split() == ["#1", "*", "9.0", "#0:", "3.0,", "#0:", "3.0", "1.0"]
    assert lines[4].split() == ["#0", "3.0", "3.0", "+", "3.0", "=", "6.0"]


def test_markdown_escapes_pipes_in_labels() -> None:
    x = Value(1.0, label="a|b")
    line = explain(x.exp(), format="markdown").splitlines()[2]
    assert line == "| `#1` | `exp` | 2.71828 | `a\\|b`: 2.71828 | 1.0 (seed) |"


def test_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'text' or 'markdown'"):
        explain(Value(1.0), format="html")
    with pytest.raises(TypeError, match="expected a Value"):
        explain(3.0)  # type: ignore[arg-type]
