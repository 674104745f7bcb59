"""grad, value_and_grad and hessian: values, argnums, nesting to any order,
functions of numbers or Values."""

from __future__ import annotations

import math
import threading
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from chainrule import Value, dot, grad, hessian, no_grad, sin, value_and_grad
from conftest import close


def test_grad_of_a_polynomial_returns_a_float() -> None:
    g = grad(lambda x: 3.0 * x**2 + 2.0 * x + 1.0)(2.0)
    assert g == 14.0 and type(g) is float


def test_grad_of_sin_to_fourth_order() -> None:
    f = lambda x: x.sin()  # noqa: E731
    x = 0.9
    d1, d2, d3, d4 = grad(f), grad(grad(f)), grad(grad(grad(f))), grad(grad(grad(grad(f))))
    assert close(d1(x), math.cos(x))
    assert close(d2(x), -math.sin(x))
    assert close(d3(x), -math.cos(x))
    assert close(d4(x), math.sin(x))


def test_nested_grad_matches_torch(torch: Any) -> None:
    def f(x: Any) -> Any:
        return (x * 2.0).tanh() * x.exp() - x**3 / 7.0

    ours = [grad(f)(0.3), grad(grad(f))(0.3), grad(grad(grad(f)))(0.3)]
    t = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    g, theirs = f(t), []
    for _ in range(3):
        (g,) = torch.autograd.grad(g, t, create_graph=True)
        theirs.append(g.item())
    assert all(close(a, b, rtol=1e-12) for a, b in zip(ours, theirs)), (ours, theirs)


def test_argnums_int_tuple_and_negative() -> None:
    def f(x: Any, y: Any, z: Any) -> Any:
        return x * y * y + z

    assert grad(f)(2.0, 3.0, 4.0) == 9.0
    assert grad(f, argnums=1)(2.0, 3.0, 4.0) == 12.0
    assert grad(f, argnums=-1)(2.0, 3.0, 4.0) == 1.0
    assert grad(f, argnums=(0, 2))(2.0, 3.0, 4.0) == (9.0, 1.0)
    assert grad(f, argnums=(1,))(2.0, 3.0, 4.0) == (12.0,)


def test_value_and_grad() -> None:
    value, g = value_and_grad(lambda x, y: x.exp() * y, argnums=(0, 1))(0.0, 5.0)
    assert value == 5.0 and g == (5.0, 1.0)
    assert type(value) is float


def test_list_and_tuple_arguments() -> None:
    def norm2(v: Any) -> Any:
        return sum(x * x for x in v)

    assert grad(norm2)([1.0, -2.0, 3.0]) == [2.0, -4.0, 6.0]
    assert grad(norm2)((1.0, 2.0)) == (2.0, 4.0)
    assert grad(lambda v, s: dot(v, [1.0, 2.0]) * s, argnums=(0, 1))([3.0, 4.0], 2.0) == (
        [2.0, 4.0],
        11.0,
    )


def test_accepted_number_types() -> None:
    for x in (2, 2.0, True + True, Fraction(2), np.float64(2.0), np.int32(2)):
        assert grad(lambda v: v * v)(x) == 4.0


def test_keyword_arguments_pass_through() -> None:
    assert grad(lambda x, scale=1.0: x * x * scale)(3.0, scale=2.0) == 12.0


def test_a_constant_function_has_gradient_zero() -> None:
    assert grad(lambda x: 5.0)(3.0) == 0.0
    assert value_and_grad(lambda x, y: y * 2.0)(1.0, Value(4.0))[0].data == 8.0
    assert grad(lambda x: x)(3.0) == 1.0
    assert grad(grad(lambda x: x))(3.0) == 0.0


def test_unused_argument_gets_zero() -> None:
    assert grad(lambda x, y: y * y, argnums=(0, 1))(1.0, 3.0) == (0.0, 6.0)


def test_closures_over_an_outer_variable() -> None:
    # inner: d/dy (x*y) = x, a function of the outer x; outer: d/dx x*x = 2x
    assert grad(lambda x: x * grad(lambda y: x * y)(2.0))(3.0) == 6.0


def test_no_perturbation_confusion() -> None:
    # inner derivative d/dy (x*y) = x evaluated at y = x; then d/dx x = 1, not 2
    assert grad(lambda x: grad(lambda y: x * y)(x))(3.0) == 1.0


def test_called_with_values_returns_a_differentiable_value() -> None:
    # a gradient penalty: (d/dx w*x^2)^2 = (2 w x)^2, then d/dw
    w = Value(0.5)
    g = grad(lambda x, w: w * x * x)(3.0, w)
    assert isinstance(g, Value) and g.data == 3.0
    penalty = g * g
    penalty.backward()
    assert w.grad == 2 * g.data * 2 * 3.0


def test_a_value_argument_is_differentiated_without_touching_grad() -> None:
    x = Value(2.0)
    g = grad(lambda v: v**3)(x)
    assert g.data == 12.0
    assert x.grad == 0.0
    g.backward()
    assert x.grad == 12.0  # d/dx 3x^2


def test_grad_ignores_an_outer_no_grad() -> None:
    with no_grad():
        assert grad(lambda x: x * x)(3.0) == 6.0
        assert grad(grad(lambda x: x**3))(1.0) == 6.0


def test_no_grad_inside_the_function_is_respected() -> None:
    def f(x: Any) -> Any:
        with no_grad():
            c = x * x  # a constant for the derivative
        return c * x

    assert grad(f)(3.0) == 9.0


def test_errors_name_the_transform() -> None:
    with pytest.raises(TypeError, match=r"^grad: argument 0 must be.*str"):
        grad(lambda x: x)("2")
    with pytest.raises(TypeError, match=r"return a scalar.*list"):
        grad(lambda x: [x])(1.0)
    with pytest.raises(IndexError, match="argnums 3"):
        grad(lambda x: x, argnums=3)(1.0)
    with pytest.raises(ValueError, match="twice"):
        grad(lambda x, y: x, argnums=(0, -2))(1.0, 2.0)
    with pytest.raises(TypeError, match="argnums"):
        grad(lambda x: x, argnums=(0.5,))(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got NoneType"):
        hessian(lambda v: v[0])([None])


def test_transformed_function_is_named() -> None:
    def loss(x: Any) -> Any:
        return x

    assert grad(loss).__name__ == "grad(loss)"
    assert hessian(grad).__name__ == "hessian(grad)"


def test_hessian_by_hand() -> None:
    # f = x^3 y + sin(y): H = [[6xy, 3x^2], [3x^2, -sin y]]
    def f(x: Any, y: Any) -> Any:
        return x**3 * y + sin(y)  # y may be a number (not differentiated)

    h = hessian(f, argnums=(0, 1))(2.0, 0.5)
    assert h[0][0] == 6.0 and h[0][1] == h[1][0] == 12.0 and close(h[1][1], -math.sin(0.5))
    assert isinstance(h, tuple) and all(isinstance(row, tuple) for row in h)
    assert hessian(f)(2.0, 0.5) == h[0][0]  # argnums=0 by default, as jax.hessian
    assert hessian(f, argnums=1)(2.0, 0.5) == h[1][1]
    assert hessian(f, argnums=(1,))(2.0, 0.5) == ((h[1][1],),)
    assert hessian(lambda v, s: v[0] * v[1] * s, argnums=0)([1.0, 2.0], 3.0) == [
        [0.0, 3.0],
        [3.0, 0.0],
    ]


def test_hessian_composes_with_grad() -> None:
    # Laplacian of f = x^3 y is 6xy; its gradient is (6y, 6x).
    def laplacian(x: Any, y: Any) -> Any:
        h = hessian(lambda a, b: a**3 * b, argnums=(0, 1))(x, y)
        return h[0][0] + h[1][1]

    assert laplacian(1.0, 2.0) == 12.0
    assert grad(laplacian, argnums=(0, 1))(1.0, 2.0) == (12.0, 6.0)


def test_grad_of_hessian_with_values_gives_values() -> None:
    x = Value(1.5)
    h = hessian(lambda v: v**4)(x)
    assert isinstance(h, Value) and h.data == 12 * 1.5**2
    h.backward()
    assert x.grad == 24 * 1.5


def test_newtons_method_with_grad() -> None:
    # minimise f(x) = x^4 - 3x^2 + x, starting near the right-hand minimum
    def f(x: Any) -> Any:
        return x**4 - 3.0 * x**2 + x

    df, d2f = grad(f), grad(grad(f))
    x = 1.5
    for _ in range(20):
        x -= df(x) / d2f(x)
    assert abs(4 * x**3 - 6 * x + 1) < 1e-12 and 12 * x**2 - 6 > 0


def test_nesting_depth_is_per_thread() -> None:
    # A grad running in another thread while this one is inside a transform
    # still returns floats: the nesting level is thread-local.
    seen: list[Any] = []
    started, done = threading.Event(), threading.Event()

    def other() -> None:
        started.wait(5)
        seen.append(grad(lambda x: x * x)(3.0))
        done.set()

    def f(x: Any) -> Any:
        started.set()
        done.wait(5)
        return x * x

    thread = threading.Thread(target=other)
    thread.start()
    assert grad(f)(2.0) == 4.0
    thread.join(5)
    assert seen == [6.0] and type(seen[0]) is float


def test_a_value_keyword_argument_makes_the_result_differentiable() -> None:
    w = Value(2.0)
    g = grad(lambda x, w=1.0: w * x * x)(3.0, w=w)
    assert isinstance(g, Value) and g.data == 12.0
    g.backward()
    assert w.grad == 6.0
