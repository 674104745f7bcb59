"""One ``argnums`` convention for every function transform, JAX's: an int
(default 0) gives one result, a tuple of ints a tuple; ``vjp``, ``jvp`` and
``hvp`` differentiate all their primals unless told. Each transform on
numbers, Values, arrays and Tensors against ``torch.func`` in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Tensor, Value, grad, hessian, hvp, jacobian, jvp, value_and_grad, vjp
from tensor_oracle import assert_close

RTOL, ATOL = 1e-11, 1e-13


def _np(x: Any) -> Any:
    """Results of either library as nested lists of NumPy arrays."""
    if isinstance(x, (list, tuple)):
        return [_np(item) for item in x]
    if isinstance(x, (Value, Tensor)):
        return np.asarray(x.data)
    if hasattr(x, "detach"):  # a torch tensor
        return x.detach().numpy()
    return np.asarray(x)


def _same(ours: Any, theirs: Any, what: str) -> None:
    ours, theirs = _np(ours), _np(theirs)
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (what, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _same(a, b, f"{what}[{i}]")
        return
    assert_close(ours, theirs, what, RTOL, ATOL)


def rosenbrock(x: Any, y: Any) -> Any:
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def test_hessian_of_rosenbrock_is_jaxs(torch: Any) -> None:
    assert hessian(rosenbrock)(1.0, 1.0) == 802.0
    assert hessian(rosenbrock, argnums=1)(1.0, 1.0) == 200.0
    blocks = hessian(rosenbrock, argnums=(0, 1))(1.0, 1.0)
    assert blocks == ((802.0, -400.0), (-400.0, 200.0))
    t = torch.tensor(1.0, dtype=torch.float64)
    theirs = torch.func.hessian(rosenbrock, argnums=(0, 1))(t, t)
    _same(blocks, theirs, "rosenbrock")
    # a list argument gives a list of rows (the nested structure JAX gives)
    assert hessian(lambda v: rosenbrock(v[0], v[1]))([1.0, 1.0]) == [
        [802.0, -400.0],
        [-400.0, 200.0],
    ]


# ----------------------------------------------------------------------------
# Every transform on scalars: numbers (floats back) and Values (Values back)
# ----------------------------------------------------------------------------


def scalar_f(x: Any, y: Any) -> Any:
    return x * x * y + chainrule.exp(y) * x  # y may be a number: chainrule.exp takes both


def torch_f(x: Any, y: Any) -> Any:
    return x * x * y + y.exp() * x


POINT = (0.7, -0.4)
ARGNUMS = [0, 1, (0, 1), (1,), (1, 0)]


def _torch_point(torch: Any) -> tuple[Any, ...]:
    return tuple(torch.tensor(v, dtype=torch.float64) for v in POINT)


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_grad_value_and_grad_hessian_on_numbers(torch: Any, argnums: Any) -> None:
    tp = _torch_point(torch)
    g = grad(scalar_f, argnums=argnums)(*POINT)
    assert isinstance(g, float if isinstance(argnums, int) else tuple)
    _same(g, torch.func.grad(torch_f, argnums=argnums)(*tp), "grad")
    value, g2 = value_and_grad(scalar_f, argnums=argnums)(*POINT)
    assert type(value) is float and g2 == g
    h = hessian(scalar_f, argnums=argnums)(*POINT)
    _same(h, torch.func.hessian(torch_f, argnums=argnums)(*tp), "hessian")


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_transforms_on_values_give_values(torch: Any, argnums: Any) -> None:
    x, y = Value(POINT[0]), Value(POINT[1])
    tp = _torch_point(torch)
    g = grad(scalar_f, argnums=argnums)(x, y)
    leaves = [g] if isinstance(argnums, int) else list(g)
    assert all(isinstance(leaf, Value) for leaf in leaves)
    _same(g, torch.func.grad(torch_f, argnums=argnums)(*tp), "grad")
    h = hessian(scalar_f, argnums=argnums)(x, y)
    _same(h, torch.func.hessian(torch_f, argnums=argnums)(*tp), "hessian")


def test_defaults_are_the_first_argument() -> None:
    for transform in (grad, hessian, jacobian):
        assert transform(scalar_f)(*POINT) == transform(scalar_f, argnums=0)(*POINT)
    assert value_and_grad(scalar_f)(*POINT)[1] == grad(scalar_f, argnums=0)(*POINT)


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_jacobian_of_a_list_of_scalars_matches_jacrev(torch: Any, argnums: Any) -> None:
    def f(x: Any, y: Any) -> Any:
        return [scalar_f(x, y), x * y, y]

    def tf(x: Any, y: Any) -> Any:
        return (torch_f(x, y), x * y, y)

    ours = jacobian(f, argnums=argnums)(*POINT)
    assert isinstance(ours, list) and len(ours) == 3
    _same(ours, torch.func.jacrev(tf, argnums=argnums)(*_torch_point(torch)), "jacobian")
    with_values = jacobian(f, argnums=argnums)(Value(POINT[0]), Value(POINT[1]))
    _same(with_values, ours, "jacobian of Values")


def test_vjp_jvp_hvp_on_scalars(torch: Any) -> None:
    tp = _torch_point(torch)
    _, pull = vjp(scalar_f, *POINT)
    _, t_pull = torch.func.vjp(torch_f, *tp)
    every = t_pull(torch.tensor(2.0, dtype=torch.float64))
    _same(pull(2.0), every, "vjp, all primals (jax.vjp)")
    _, pull1 = vjp(scalar_f, *POINT, argnums=1)
    _same(pull1(2.0), every[1], "vjp, argnums=1")
    _, pull10 = vjp(scalar_f, *POINT, argnums=(1, 0))
    _same(pull10(2.0), [every[1], every[0]], "vjp, argnums=(1, 0)")

    tangent = (1.5, -0.5)
    value, tan = jvp(scalar_f, POINT, tangent)
    t_value, t_tan = torch.func.jvp(torch_f, tp, tuple(torch.tensor(t) for t in tangent))
    _same([value, tan], [t_value, t_tan], "jvp")
    # argnums=1: the tangent of y alone, x held fixed
    _, tan_y = jvp(scalar_f, POINT, -0.5, argnums=1)
    zero_x = (torch.tensor(0.0, dtype=torch.float64), torch.tensor(-0.5, dtype=torch.float64))
    _same(tan_y, torch.func.jvp(torch_f, tp, zero_x)[1], "jvp, argnums=1")

    value, product = hvp(scalar_f, POINT, tangent)
    h = np.array(hessian(scalar_f, argnums=(0, 1))(*POINT))
    assert isinstance(product, tuple)
    _same(product, list(h @ np.array(tangent)), "hvp")
    _, p0 = hvp(scalar_f, POINT, 1.5, argnums=0)
    assert isinstance(p0, float)
    _same(p0, h[0, 0] * 1.5, "hvp, argnums=0")
    _, p01 = hvp(scalar_f, POINT, tangent, argnums=(0, 1))
    _same(p01, list(h @ np.array(tangent)), "hvp, argnums=(0, 1)")
    with pytest.raises(ValueError, match="jvp: 2 tangent"):
        jvp(scalar_f, POINT, tangent, argnums=0)


# ----------------------------------------------------------------------------
# Every transform on arrays (arrays back) and Tensors (Tensors back)
# ----------------------------------------------------------------------------


def tensor_f(a: Any, b: Any) -> Any:
    return (a * b).tanh().sum() + (b * b * b).sum()


def tensor_g(a: Any, b: Any) -> Any:
    """A vector function: shape (2, 3)."""
    return (a * b).tanh() * 2.0 + b


def _arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(22)
    return rng.standard_normal((2, 3)), rng.standard_normal(3)


@pytest.mark.parametrize("argnums", ARGNUMS)
@pytest.mark.parametrize("as_tensor", [False, True], ids=["arrays", "Tensors"])
def test_tensor_transforms_match_torch_func(torch: Any, argnums: Any, as_tensor: bool) -> None:
    a, b = _arrays()
    args = (Tensor(a), Tensor(b)) if as_tensor else (a, b)
    kind = Tensor if as_tensor else np.ndarray
    tp = (torch.tensor(a), torch.tensor(b))

    def leaves(x: Any) -> list[Any]:
        if isinstance(x, tuple):
            return [leaf for item in x for leaf in leaves(item)]
        return [x]

    g = grad(tensor_f, argnums=argnums)(*args)
    assert all(isinstance(leaf, kind) for leaf in leaves(g))
    _same(g, torch.func.grad(tensor_f, argnums=argnums)(*tp), "grad")
    h = hessian(tensor_f, argnums=argnums)(*args)
    assert all(isinstance(leaf, kind) for leaf in leaves(h))
    _same(h, torch.func.hessian(tensor_f, argnums=argnums)(*tp), "hessian")
    j = jacobian(tensor_g, argnums=argnums)(*args)
    assert all(isinstance(leaf, kind) for leaf in leaves(j))
    _same(j, torch.func.jacrev(tensor_g, argnums=argnums)(*tp), "jacobian")


def test_jacobian_of_a_vector_function_equals_jacrev(torch: Any) -> None:
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal(3)

    def f(x: Any) -> Any:
        return (w @ x).tanh() * x.sum()

    ours = jacobian(f)(x)
    assert isinstance(ours, np.ndarray) and ours.shape == (4, 3)
    tw = torch.tensor(w)
    theirs = torch.func.jacrev(lambda x: (tw @ x).tanh() * x.sum())(torch.tensor(x))
    assert_close(ours, theirs.numpy(), "jacobian", RTOL, ATOL)
    # differentiable again: the Jacobian of a Tensor argument is a Tensor
    xt = Tensor(x)
    jt = jacobian(f)(xt)
    assert isinstance(jt, Tensor)
    (jt * jt).sum().backward()
    assert xt.grad is not None and xt.grad.shape == (3,)


def test_tensor_vjp_jvp_hvp_argnums(torch: Any) -> None:
    a, b = _arrays()
    tp = (torch.tensor(a), torch.tensor(b))
    u = np.random.default_rng(1).standard_normal((2, 3))
    _, pull = vjp(tensor_g, a, b, argnums=1)
    _, t_pull = torch.func.vjp(tensor_g, *tp)
    every = t_pull(torch.tensor(u))
    _same(pull(u), every[1], "vjp, argnums=1")
    _same(vjp(tensor_g, a, b)[1](u), every, "vjp, all")
    vb = np.ones(3)
    _, tan = jvp(tensor_g, (a, b), vb, argnums=1)
    t_tan = torch.func.jvp(tensor_g, tp, (torch.zeros(2, 3, dtype=torch.float64), torch.ones(3)))[1]
    _same(tan, t_tan, "jvp, argnums=1")
    _, product = hvp(tensor_f, (a, b), vb, argnums=1)
    hb = hessian(tensor_f, argnums=1)(a, b)
    assert isinstance(product, np.ndarray)
    _same(product, hb @ vb, "hvp, argnums=1")


def test_argnums_errors_name_the_transform() -> None:
    with pytest.raises(IndexError, match="hessian: argnums 2 is out of range"):
        hessian(rosenbrock, argnums=2)(1.0, 1.0)
    with pytest.raises(IndexError, match="jacobian: argnums 5"):
        jacobian(lambda x: [x], argnums=5)(1.0)
    with pytest.raises(ValueError, match=r"vjp: argnums .* twice"):
        vjp(rosenbrock, 1.0, 1.0, argnums=(0, 0))
    with pytest.raises(TypeError, match=r"jacobian: the function's result must be .*str"):
        jacobian(lambda x: "x")(1.0)
