"""gradcheck against deliberately wrong derivatives, and detect_anomaly
naming the op and the line that made the first nan or inf."""

from __future__ import annotations

import inspect
import math
import threading
from typing import Any

import pytest

import chainrule
from chainrule import (
    AnomalyError,
    GradcheckError,
    Primitive,
    Value,
    detect_anomaly,
    dot,
    grad,
    gradcheck,
    gradients,
)
from chainrule.value.mode import mode

# --------------------------------------------------------------------------
# gradcheck
# --------------------------------------------------------------------------

CUBE = Primitive("cube", lambda x: x**3, lambda M, x, out: (3 * x * x,))
# wrong: the derivative of x^3 is 3x^2
BAD_CUBE = Primitive("bad_cube", lambda x: x**3, lambda M, x, out: (2 * x * x,))
# right on floats, wrong on Values: M.data cuts the derivative's own graph,
# so the first derivative is right and the second is 0
FLAT_CUBE = Primitive("flat_cube", lambda x: x**3, lambda M, x, out: (3 * M.data(x) ** 2,))
# x * exp(y) with the derivative in y wrong (exp(y) instead of out)
BAD_XEXPY = Primitive(
    "x*exp(y)", lambda x, y: x * math.exp(y), lambda M, x, y, out: (M.exp(y), M.exp(y))
)


@pytest.mark.parametrize(
    "f, point",
    [
        (lambda x: x.exp() * x.sin(), [0.7]),
        (lambda x, y: (x * y).tanh() / (1.0 + y * y) + x**y, [1.3, -0.6]),
        (lambda a, b, c: dot([a, b], [c.sigmoid(), a.log()], c.softplus()), [1.5, -0.2, 0.4]),
        (lambda x: CUBE(x.cos()) + 2.0**x, [0.3]),
        (lambda x, y: x.max(y) * x.min(y) + abs(x - 2 * y).sqrt(), [0.4, 1.1]),
    ],
)
def test_correct_derivatives_pass_to_second_order(f: Any, point: list[float]) -> None:
    for order in (1, 2):
        report = gradcheck(f, point, order=order)
        assert report.ok and bool(report), str(report)
        n = len(point)
        assert report.checked == (n if order == 1 else n + n * n)
        assert report.mismatches == []


def test_catches_a_wrong_custom_derivative() -> None:
    report = gradcheck(BAD_CUBE, [2.0])
    assert not report and not report.ok
    (m,) = report.mismatches
    assert (m.order, m.index, m.analytic) == (1, (0,), 8.0)
    assert math.isclose(m.numeric, 12.0, rel_tol=1e-8)
    assert "df/dx0: analytic 8.0, numeric 12.0" in str(report)
    assert gradcheck(CUBE, [2.0]).ok


def test_lists_every_mismatching_input() -> None:
    def f(a: Value, b: Value, c: Value) -> Value:
        return BAD_CUBE(a) + CUBE(b) * BAD_XEXPY(c, b)

    report = gradcheck(f, [1.0, 0.5, -2.0])
    assert [m.index for m in report.mismatches] == [(0,), (1,)]  # c's derivative is right
    # numbers by hand: b^3 * c * exp(b) at b = 0.5, c = -2; the wrong rule gives exp(b) for out
    b, c = 0.5, -2.0
    wrong_db = 3 * b * b * c * math.exp(b) + b**3 * math.exp(b)
    right_db = 3 * b * b * c * math.exp(b) + b**3 * c * math.exp(b)
    assert math.isclose(report.mismatches[1].analytic, wrong_db, rel_tol=1e-12)
    assert math.isclose(report.mismatches[1].numeric, right_db, rel_tol=1e-6)
    assert "2 disagree" in str(report)


def test_order_two_catches_a_derivative_that_is_only_right_on_floats() -> None:
    assert gradcheck(FLAT_CUBE, [2.0]).ok  # first derivatives are right
    report = gradcheck(FLAT_CUBE, [2.0], order=2)
    (m,) = report.mismatches
    assert (m.order, m.index, m.analytic) == (2, (0, 0), 0.0)
    assert math.isclose(m.numeric, 12.0, rel_tol=1e-6)  # 6x
    assert "d²f/dx0dx0" in str(report)


def test_order_two_on_a_custom_op_of_two_inputs() -> None:
    good = Primitive("x*exp(y)", lambda x, y: x * math.exp(y), lambda M, x, y, out: (M.exp(y), out))
    assert gradcheck(good, [0.5, -1.0], order=2).ok
    report = gradcheck(BAD_XEXPY, [0.5, -1.0], order=2)
    # Second derivatives are checked against differences of the analytic
    # gradient (as torch's gradgradcheck), so a wrong first derivative shows
    # once, at order 1, and its consistent second derivatives pass.
    assert [(m.order, m.index) for m in report.mismatches] == [(1, (1,))]
    assert report.checked == 2 + 4


def test_raise_exception() -> None:
    with pytest.raises(GradcheckError, match="df/dx0") as info:
        gradcheck(BAD_CUBE, [2.0], raise_exception=True)
    assert isinstance(info.value, RuntimeError)
    assert info.value.report.mismatches[0].analytic == 8.0
    assert gradcheck(CUBE, [2.0], raise_exception=True).ok


def test_tolerances_and_eps_are_used() -> None:
    # analytic 8, numeric 12: agrees only with a tolerance of 4 or more
    assert gradcheck(BAD_CUBE, [2.0], atol=4.1).ok
    assert not gradcheck(BAD_CUBE, [2.0], atol=3.9).ok
    assert gradcheck(BAD_CUBE, [2.0], atol=0.0, rtol=0.34).ok
    # a huge eps makes the central difference of x^3 wrong by eps^2: 3x^2 + eps^2
    report = gradcheck(CUBE, [2.0], eps=1.0, atol=0.0, rtol=1e-6)
    assert report.mismatches[0].numeric == 13.0


def test_nan_never_agrees() -> None:
    report = gradcheck(lambda x: x.sqrt(), [-1.0])
    (m,) = report.mismatches
    assert math.isnan(m.analytic) and math.isnan(m.numeric)


def test_inputs_may_be_values_and_outputs_numbers() -> None:
    assert gradcheck(lambda x, y: x * y, [Value(2.0), 3]).ok
    assert gradcheck(lambda x: 1.0, [2.0], order=2).ok


def test_gradcheck_of_a_function_built_with_grad() -> None:
    # grad(f) is itself a function of Values: its derivative is f''
    f = grad(lambda x: x.sin() * x)
    assert gradcheck(f, [0.8], order=2).ok


def test_gradcheck_errors() -> None:
    with pytest.raises(ValueError, match="order"):
        gradcheck(CUBE, [1.0], order=3)
    with pytest.raises(ValueError, match="eps"):
        gradcheck(CUBE, [1.0], eps=0.0)
    with pytest.raises(TypeError, match="str"):
        gradcheck(CUBE, ["1"])
    with pytest.raises(TypeError, match="scalar"):
        gradcheck(lambda x: [x], [1.0])


# --------------------------------------------------------------------------
# detect_anomaly
# --------------------------------------------------------------------------


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker``."""
    lines = inspect.getsource(inspect.getmodule(_line_of)).splitlines()  # type: ignore[arg-type]
    (n,) = [i for i, line in enumerate(lines, 1) if marker in line and "_line_of" not in line]
    return n


def test_names_log_for_log_of_zero_times_zero() -> None:
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        Value(0.0).log() * 0.0  # the anomaly: log(0) = -inf
    e = info.value
    assert isinstance(e, RuntimeError)
    assert (e.phase, e.op, e.inputs, e.value) == ("forward", "log", (0.0,), -math.inf)
    assert e.location is not None
    assert e.location[0] == __file__ and e.location[1] == _line_of("the anomaly: log(0)")
    message = str(e)
    assert "log" in message and "(0.0,)" in message and "-inf" in message
    assert f"{__file__}:{e.location[1]}" in message
    assert "Value(0.0).log() * 0.0" in message  # the source line itself


def test_the_first_anomaly_wins_and_propagation_is_not_one() -> None:
    with detect_anomaly():
        big = Value(math.inf) + 1.0  # already infinite: propagating is not an anomaly
        nan = Value(math.nan).exp()
    assert big.data == math.inf and math.isnan(nan.data)
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        x = Value(800.0)
        y = x.exp()  # overflow: exp(800) = inf
        y * 0.0 - 1.0  # would give nan next
    assert info.value.op == "exp" and info.value.inputs == (800.0,)


def test_division_by_zero_and_overflowing_product() -> None:
    with pytest.raises(AnomalyError, match=r"^detect_anomaly: / returned inf"), detect_anomaly():
        Value(1.0) / Value(0.0)
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        Value(1e200) * Value(1e200)
    assert info.value.op == "*" and info.value.inputs == (1e200, 1e200)


def test_backward_anomaly_names_the_op_and_where_it_was_made() -> None:
    x = Value(0.0)
    with detect_anomaly():
        y = x.sqrt() * 3.0  # finite forward: sqrt(0) = 0
        with pytest.raises(AnomalyError) as info:
            y.backward()  # d sqrt/dx at 0 = inf
    e = info.value
    assert (e.phase, e.op, e.inputs, e.value) == ("backward", "sqrt", (0.0,), math.inf)
    assert e.location is not None and e.location[1] == _line_of("finite forward: sqrt(0)")
    assert "backward of sqrt" in str(e) and "finite incoming gradient 3.0" in str(e)


def test_backward_anomaly_inf_times_zero() -> None:
    # log(0) * 0 built outside the context: the backward of log gets gradient 0
    # and multiplies it by 1/0 = inf, giving nan
    x = Value(0.0)
    y = x.log() * 0.0
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        y.backward()
    e = info.value
    assert (e.phase, e.op) == ("backward", "log") and math.isnan(e.value)
    assert e.location is None and "outside detect_anomaly" in str(e)


def test_backward_anomaly_through_gradients_and_grad() -> None:
    x = Value(0.0)
    y = x.sqrt()
    with pytest.raises(AnomalyError, match="sqrt"), detect_anomaly():
        gradients(y, [x])
    with pytest.raises(AnomalyError, match="sqrt") as info, detect_anomaly():
        grad(lambda v: v.sqrt() + v)(0.0)
    assert info.value.phase == "backward"
    assert info.value.location is not None and info.value.location[2] == "<lambda>"


def test_anomaly_in_a_create_graph_pass() -> None:
    # second derivative of sqrt at 0: the derivative rule 0.5 / sqrt(x) divides by 0
    x = Value(0.0)
    y = x.sqrt()
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        gradients(y, [x], create_graph=True)
    # the rule's Value division 0.5 / sqrt(x) is the op that made inf
    assert (info.value.phase, info.value.op, info.value.inputs) == ("forward", "/", (0.5, 0.0))


def test_custom_op_anomaly() -> None:
    inverse = Primitive(
        "inverse", lambda x: 1.0 / x if x else math.inf, lambda M, x, out: (-out * out,)
    )
    with pytest.raises(AnomalyError) as info, detect_anomaly():
        inverse(Value(0.0))
    assert info.value.op == "inverse"


def test_no_anomaly_no_error_and_the_hook_is_removed() -> None:
    assert mode.observer is None and mode.fast
    with detect_anomaly() as detector:
        assert mode.observer is detector and not mode.fast
        x = Value(2.0)
        y = (x * x).log() + x.exp()
        y.backward()
        with detect_anomaly():  # nested
            (g,) = gradients(y, [x], create_graph=True)
        assert mode.observer is detector
    assert mode.observer is None and mode.fast
    assert x.grad == 1.0 + math.exp(2.0) and math.isclose(g.data, x.grad)


def test_hook_removed_after_an_error() -> None:
    with pytest.raises(AnomalyError), detect_anomaly():
        Value(-1.0).sqrt()
    assert mode.observer is None and mode.fast


def test_as_a_decorator() -> None:
    @detect_anomaly()
    def step(v: float) -> float:
        return (Value(v).log() + 1.0).data

    assert step(1.0) == 1.0
    with pytest.raises(AnomalyError, match="log"):
        step(0.0)
    assert mode.observer is None


def test_no_grad_ops_are_not_watched() -> None:
    with detect_anomaly(), chainrule.no_grad():
        assert Value(0.0).log().data == -math.inf


@pytest.mark.native  # threads: not in the WebAssembly build
def test_per_thread() -> None:
    # another thread's ops are not watched while this thread detects anomalies
    results: list[float] = []

    def other() -> None:
        results.append(Value(0.0).log().data)

    with detect_anomaly():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
    assert results == [-math.inf]


def test_order_two_refuses_a_rule_that_leaves_the_graph_through_math() -> None:
    # math.exp on a Value would take its float and drop the graph, making the
    # second derivative silently 0: a Value refuses to become a float instead.
    exp_math = Primitive("exp_math", math.exp, lambda M, x, out: (math.exp(x),))
    assert gradcheck(exp_math, [0.3]).ok
    with pytest.raises(TypeError, match=r"chainrule\.sin\(v\)"):
        gradcheck(exp_math, [0.3], order=2)


def test_gradcheck_inside_no_grad() -> None:
    with chainrule.no_grad():
        assert gradcheck(CUBE, [2.0], order=2).ok
        assert not gradcheck(BAD_CUBE, [2.0])


def test_watched_backward_masks_as_the_plain_one() -> None:
    # an infinite seed into relu, max and a zero exponent: the masked inputs
    # get 0, not 0 * inf = nan, whether or not detect_anomaly is watching
    def grads() -> list[float]:
        a, b, c = Value(-1.0), Value(2.0), Value(3.0)
        (a.relu() + a.max(b) + c**0).backward(math.inf)
        return [a.grad, b.grad, c.grad]

    plain = grads()
    with detect_anomaly():
        watched = grads()
    assert plain == watched == [0.0, math.inf, 0.0]


def test_the_check_modules_examples_run() -> None:
    import doctest

    import chainrule.check.anomaly
    import chainrule.check.report
    import chainrule.check.scalar

    for module in (chainrule.check.report, chainrule.check.scalar, chainrule.check.anomaly):
        result = doctest.testmod(module)
        assert result.failed == 0
    assert doctest.testmod(chainrule.check.report).attempted >= 1
