"""The formula language of ``chainrule explain``: what it reads, the graph it
builds, and everything it refuses, with the position of the fault."""

from __future__ import annotations

import doctest
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import chainrule.explainer.formula
from chainrule import Value
from chainrule.explainer.formula import (
    MAX_DEPTH,
    MAX_LENGTH,
    Binary,
    Call,
    ExprError,
    Name,
    Num,
    Unary,
    evaluate,
    parse,
    tokenize,
)


def test_docstring_examples() -> None:
    assert doctest.testmod(chainrule.explainer.formula).failed == 0


# -- reading --------------------------------------------------------------


def test_tokens() -> None:
    tokens = tokenize("relu(a*b**2 + 1e-3)")
    assert [(t.kind, t.text, t.pos) for t in tokens] == [
        ("name", "relu", 0),
        ("op", "(", 4),
        ("name", "a", 5),
        ("op", "*", 6),
        ("name", "b", 7),
        ("op", "**", 8),
        ("num", "2", 10),
        ("op", "+", 12),
        ("num", "1e-3", 14),
        ("op", ")", 18),
        ("end", "", 19),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("2", 2.0), ("0.5", 0.5), (".5", 0.5), ("2.", 2.0), ("1e-3", 1e-3), ("1E+2", 100.0)],
)
def test_numbers(text: str, value: float) -> None:
    assert parse(text) == Num(value, 0, len(text))


def test_precedence_of_sum_and_product() -> None:
    tree = parse("a + b*c")
    assert isinstance(tree, Binary) and tree.op == "+"
    assert tree.left == Name("a", 0, 1)
    assert isinstance(tree.right, Binary) and tree.right.op == "*"


def test_sums_are_left_associative() -> None:
    tree = parse("a - b - c")
    assert isinstance(tree, Binary) and tree.right == Name("c", 8, 9)
    assert isinstance(tree.left, Binary) and tree.left.right == Name("b", 4, 5)


def test_power_is_right_associative() -> None:
    tree = parse("a**b**c")
    assert isinstance(tree, Binary) and tree.left == Name("a", 0, 1)
    assert isinstance(tree.right, Binary) and tree.right.left == Name("b", 3, 4)


def test_unary_minus_binds_looser_than_power() -> None:
    # as in Python: -a**2 is -(a**2), and a**-b is a**(-b)
    tree = parse("-a**2")
    assert isinstance(tree, Unary) and isinstance(tree.operand, Binary)
    tree = parse("a**-b")
    assert isinstance(tree, Binary) and tree.right == Unary("-", Name("b", 4, 5), 3, 5)
    assert evaluate("-a**2", {"a": 3}).data == -9.0
    assert evaluate("2*-a", {"a": 3}).data == -6.0


def test_calls() -> None:
    tree = parse("max(a, 2)")
    assert tree == Call("max", (Name("a", 4, 5), Num(2.0, 7, 8)), 0, 9)


# -- building the graph ---------------------------------------------------


def test_seed_002_relu() -> None:
    f = evaluate("relu(a*b + d)", {"a": 2, "b": -3, "d": 10})
    f.backward()
    e = f._prev[0]
    c, d = e._prev
    a, b = c._prev
    assert [v.label for v in (f, e, c, d, a, b)] == [
        "relu(a*b + d)",
        "a*b + d",
        "a*b",
        "d",
        "a",
        "b",
    ]
    assert f.data == 4.0
    assert (a.grad, b.grad, c.grad, d.grad, e.grad) == (-3.0, 2.0, 1.0, 1.0, 1.0)


def test_seed_003_shared_name_is_one_node() -> None:
    f = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    f.backward()
    d = f._prev[0]
    c, a = d._prev
    assert c._prev[0] is a  # both uses of `a` are the same leaf
    assert (f.label, d.label, c.label) == ("(a*b + a)**2", "a*b + a", "a*b")
    assert (f.data, d.grad, c.grad, a.grad, c._prev[1].grad) == (64.0, 16.0, 16.0, 64.0, 32.0)


def test_same_graph_as_python_code() -> None:
    x = {"x": 0.7, "y": -1.3}
    f = evaluate("tanh(x*y) + exp(-x)/sqrt(y*y + 1) - softplus(x)**2 + abs(y) * sigmoid(x)", x)
    a, b = Value(0.7), Value(-1.3)
    g = (a * b).tanh() + (-a).exp() / (b * b + 1).sqrt() - a.softplus() ** 2 + abs(b) * a.sigmoid()
    f.backward()
    g.backward()
    leaves = {v.label: v for v in _leaves(f)}
    assert f.data == g.data
    assert (leaves["x"].grad, leaves["y"].grad) == (a.grad, b.grad)


def _leaves(root: Value) -> list[Value]:
    seen, stack, out = {root}, [root], []
    while stack:
        v = stack.pop()
        if not v._prev:
            out.append(v)
        for c in v._prev:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return out


def test_every_function() -> None:
    values = {"x": 0.5, "y": 2.0}
    for name in ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "softplus", "sin", "cos", "abs"):
        f = evaluate(f"{name}(x)", {"x": 0.5})
        assert f.data == getattr(Value(0.5), name)().data
        assert f._op == getattr(Value(0.5), name)()._op
    assert evaluate("max(x, y)", values).data == 2.0
    assert evaluate("min(x, y)", values).data == 0.5


def test_numbers_are_leaves_as_in_micrograd() -> None:
    f = evaluate("a*2 + 10", {"a": 1.5})
    assert f.data == 13.0
    product, ten = f._prev
    assert ten.data == 10.0 and not ten._prev  # a leaf, as micrograd's Value(10)
    assert product._prev[0].label == "a" and product._prev[1].data == 2.0


def test_constant_subexpressions_fold_with_engine_semantics() -> None:
    f = evaluate("2*3 + a", {"a": 1})
    assert f.data == 7.0 and [v.label for v in f._prev] == ["a", ""]  # 6.0: one leaf
    assert f._prev[1].data == 6.0 and not f._prev[1]._prev
    assert evaluate("1/0", {}).data == math.inf  # as PyTorch, not ZeroDivisionError
    assert math.isnan(evaluate("(-8)**0.5", {}).data)  # never a complex number
    whole = evaluate("exp(0) + 1", {})
    assert (whole.data, whole.label, whole._prev) == (2.0, "exp(0) + 1", ())


def test_max_with_a_constant_makes_a_labelled_leaf() -> None:
    f = evaluate("max(a, 3)", {"a": 1})
    f.backward()
    assert [(v.label, v.grad) for v in f._prev] == [("a", 0.0), ("3", 1.0)]


def test_unary_plus_is_no_node() -> None:
    f = evaluate("+a", {"a": 4})
    assert f.label == "a" and f._prev == ()


def test_labels_normalise_spaces_and_drop_outer_parentheses() -> None:
    f = evaluate("(  a  *   b )", {"a": 1, "b": 2})
    assert f.label == "a * b"


def test_values_may_be_given_as_values() -> None:
    w = Value(3.0)
    f = evaluate("w*w", {"w": w})
    f.backward()
    assert (w.label, w.grad) == ("w", 6.0)


@pytest.mark.native  # WebAssembly's stack is too small to free a 3,000-deep chain
def test_a_long_flat_formula_does_not_recurse() -> None:
    n = 3000
    f = evaluate("+".join(["a"] * n), {"a": 1.0})
    f.backward()
    (a,) = _leaves(f)
    assert (f.data, a.grad) == (n, n)


# -- refusals -------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message", "position"),
    [
        ("__import__('os')", "unknown function '__import__'", 0),
        ("exec(a)", "unknown function 'exec'", 0),
        ("a.__class__", "no attribute access", 1),
        ("relu(a).real", "no attribute access", 7),
        ("(a*b", "'(' is never closed", 0),
        ("relu(a*(b + 1)", "'(' is never closed", 4),
        ("a*b)", "unmatched ')'", 3),
        ("(a b)", "expected ')' or an operator, found 'b'", 3),
        ("x + 1", "unknown name 'x'", 0),
        ("a + relu", "call it as relu(...)", 4),
        ("a(2)", "unknown function 'a'", 0),
        ("2**9**9", "exponent 3.8742e+08 is too large", 3),
        ("a**1e6", "exponent 1e+06 is too large", 3),
        ("a**-(2000)", "exponent -2000 is too large", 3),
        ("a**(1/0)", "exponent inf is too large", 4),
        ("'a'", "string literals are not allowed", 0),
        ('a + "b"', "string literals are not allowed", 4),
        ("a[0]", "no indexing", 1),
        ("a ^ b", "write ** for a power", 2),
        ("a = 1", "a is given (a=...) and also defined by a step", 0),
        ("a + 1 = b", "'=' must follow a step's name", 6),
        ("c = a; relu(c)", "c = a only renames a", 0),
        ("relu = a*b; relu", "'relu' is a function", 0),
        ("c = ; a", "a formula must follow '='", 4),
        ("a;;b", "empty step", 2),
        (";a", "empty step", 0),
        ("a; b", "only the last step may be a formula without a name", 0),
        ("c = a*b d = c", "unexpected 'd': expected an operator or ';' before the next step", 8),
        ("lambda: a", "unexpected character ':'", 6),
        ("a b", "unexpected 'b'", 2),
        ("2a", "unexpected 'a'", 1),
        ("", "empty expression", 0),
        ("   ", "empty expression", 3),
        ("a +", "expected a number, name or '(' at the end", 3),
        ("a * / b", "found '/'", 4),
        ("max(a)", "max takes 2 arguments, got 1", 0),
        ("relu(a, b)", "relu takes 1 argument, got 2", 0),
        ("max(a,)", "found ')'", 6),
    ],
)
def test_refusals(source: str, message: str, position: int) -> None:
    with pytest.raises(ExprError) as info:
        evaluate(source, {"a": 1.0, "b": 2.0})
    assert message in info.value.message
    assert info.value.position == position
    assert info.value.column == position + 1
    assert str(info.value).endswith(f"(column {position + 1})")


def test_refuses_deep_nesting_before_python_does() -> None:
    for source in ("(" * 2000 + "a" + ")" * 2000, "-" * 2000 + "a", "a" + "**a" * 2000):
        with pytest.raises(ExprError, match="nested too deeply") as info:
            evaluate(source, {"a": 1.0})
        assert info.value.position <= 3 * MAX_DEPTH + 3  # at the level that is one too deep
    # just under the limit is fine
    assert evaluate("(" * (MAX_DEPTH - 1) + "a" + ")" * (MAX_DEPTH - 1), {"a": 2.0}).data == 2.0


def test_refuses_overlong_input() -> None:
    with pytest.raises(ExprError, match="too long"):
        parse("a+" * (MAX_LENGTH // 2) + "a")


def test_caret_points_at_the_fault() -> None:
    with pytest.raises(ExprError) as info:
        parse("relu(a.b)")
    assert info.value.caret() == "  relu(a.b)\n        ^"


def test_refuses_non_text() -> None:
    with pytest.raises(TypeError, match="expected a str"):
        parse(42)  # type: ignore[arg-type]


PIECES = [
    *"ab()+-*/,.'[]= ^;",
    "c =",
    "**",
    "1",
    "2.5",
    "1e-3",
    "relu(",
    "max(",
    "exp(",
    "__import__(",
    "os",
    "9**9**9",
]


@given(st.lists(st.sampled_from(PIECES), max_size=25).map("".join))
def test_any_text_gives_a_value_or_an_expr_error(source: str) -> None:
    try:
        f = evaluate(source, {"a": 0.5, "b": -2.0})
    except ExprError as e:
        if e.position is None:  # a value given for a name the formula does not use
            assert "given but the formula does not use" in e.message
        else:
            assert 0 <= e.position <= len(source)
    else:
        assert isinstance(f, Value)


# -- named steps ----------------------------------------------------------


def test_named_steps_label_their_nodes() -> None:
    # The walkthrough of f = relu(a*b + d), step by step: c, e, f are the nodes
    f = evaluate("c = a*b; e = c + d; f = relu(e)", {"a": 2, "b": -3, "d": 10})
    f.backward()
    e = f._prev[0]
    c, d = e._prev
    a, b = c._prev
    assert [v.label for v in (f, e, d, c, b, a)] == ["f", "e", "d", "c", "b", "a"]
    assert [v.grad for v in (f, e, d, c, b, a)] == [1.0, 1.0, 1.0, 1.0, 2.0, -3.0]


def test_named_steps_share_a_node_used_twice() -> None:
    e = evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3})
    e.backward()
    d = e._prev[0]
    c, a = d._prev
    b = c._prev[1]
    assert c._prev[0] is a
    assert [(v.label, v.grad) for v in (e, d, c, a, b)] == [
        ("e", 1.0),
        ("d", 16.0),
        ("c", 16.0),
        ("a", 64.0),
        ("b", 32.0),
    ]


def test_steps_are_the_same_graph_as_the_one_formula() -> None:
    steps = evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3})
    whole = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    assert [v._op for v in _leaves(steps)] == [v._op for v in _leaves(whole)]
    steps.backward()
    whole.backward()
    assert sorted((v.label, v.grad) for v in _leaves(steps)) == [("a", 64.0), ("b", 32.0)]
    assert sorted((v.label, v.grad) for v in _leaves(whole)) == [("a", 64.0), ("b", 32.0)]


def test_a_step_may_hold_subexpressions_and_constants() -> None:
    f = evaluate("k = 2*3; c = a*k + 1; f = relu(c);", {"a": 2})
    assert (f.label, f.data, f._prev[0].label, f._prev[0]._prev[0].label) == ("f", 13.0, "c", "a*k")
    last_unnamed = evaluate("c = a*b; relu(c + 1)", {"a": 2, "b": 3})
    assert last_unnamed.label == "relu(c + 1)" and last_unnamed._prev[0]._prev[0].label == "c"
    constant = evaluate("k = 2; m = k*3", {})
    assert (constant.label, constant.data) == ("m", 6.0)


@pytest.mark.parametrize(
    ("source", "values", "message", "position"),
    [
        ("e = c + d; c = a*b; f = relu(e)", {"a": 1, "d": 1}, "c is used before it is defined", 4),
        ("c = c + 1; f = c*2", {}, "c is used before it is defined", 4),
        ("c = a*b; c = c + 1", {"a": 1, "b": 1}, "c is defined twice", 9),
        (
            "c = a*b; e = a + d; f = relu(e)",
            {"a": 1, "b": 1, "d": 1},
            "c is defined but never used",
            0,
        ),
        (
            "relu(a*b + d)",
            {"a": 1, "b": 1, "d": 1, "c": 3},
            "c is given but the formula does not use it",
            None,
        ),
        ("a*2", {"a": 1, "x": 1, "y": 2}, "x, y are given but the formula does not use them", None),
        ("c = a*b; f = c + 1", {"a": 1, "b": 1, "f": 0}, "f is given (f=...) and also defined", 9),
    ],
)
def test_step_names_are_checked(
    source: str, values: dict[str, float], message: str, position: int | None
) -> None:
    with pytest.raises(ExprError) as info:
        evaluate(source, values)
    assert info.value.message == message if position is None else message in info.value.message
    assert info.value.position == position
    if position is None:
        assert str(info.value) == message and info.value.caret() == ""
