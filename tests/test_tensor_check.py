"""gradcheck and detect_anomaly on Tensor functions, and custom Tensor ops
(``chainrule.tensor.Primitive``) working like built-ins."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

import chainrule.tensor as ct
from chainrule import AnomalyError, GradcheckError, Tensor, detect_anomaly, grad, gradcheck, hessian
from chainrule.tensor import Primitive, gradients
from tensor_cases import OPS, point
from tensor_oracle import assert_close


# astype goes through float32, where differences of step 1e-6 mean nothing
@pytest.mark.parametrize("name", sorted(set(OPS) - {"astype"}))
def test_gradcheck_passes_for_every_op_to_second_order(name: str) -> None:
    ours, _, shapes, domain = OPS[name]
    report = gradcheck(ours, point(shapes, domain, 11), order=2)
    assert report.ok, str(report)
    n = sum(int(np.prod(s)) for s in shapes)
    assert report.checked == n + n * n


def _wrong_cube_vjp(M: Any, g: Any, x: Any, out: Any) -> tuple[Any]:
    return (g * 2.0 * x * x,)  # should be 3 x^2


def test_gradcheck_fails_for_a_wrong_custom_vjp_and_names_the_op() -> None:
    cube = Primitive("cube", lambda x: x**3, _wrong_cube_vjp)
    inputs = [np.array([[0.5, -1.0], [0.2, 0.3]]), np.array([0.7, 1.1])]
    report = gradcheck(lambda a, b: cube((a * b).tanh()).sum(axis=0), inputs)
    assert not report.ok and report.op == "cube"
    worst = report.worst
    assert worst is not None and worst.order == 1
    assert worst == max(report.mismatches, key=lambda m: abs(m.analytic - m.numeric))
    text = str(report)
    assert "the VJP of cube (inputs of shapes ((2, 2),), output (2, 2))" in text
    assert f"{worst.name}: analytic" in text and worst.name.startswith("df/dx")
    with pytest.raises(GradcheckError, match="the VJP of cube"):
        gradcheck(lambda a, b: cube(a * b).sum(), inputs, raise_exception=True)


def test_gradcheck_order_two_finds_a_wrong_create_graph_form() -> None:
    # Right on arrays, wrong as a graph: only the second order can tell.
    def vjp(M: Any, g: Any, x: Any, out: Any) -> tuple[Any]:
        return (g * 3.0 * x * (x.detach() if M.graph else x),)

    cube = Primitive("cube", lambda x: x**3, vjp)
    x = [np.array([0.5, -1.0, 2.0])]
    assert gradcheck(lambda t: cube(t).exp().sum(), x).ok
    report = gradcheck(lambda t: cube(t).exp().sum(), x, order=2)
    assert not report.ok and report.op == "cube"
    assert "the VJP's own derivative (create_graph) of cube" in str(report)
    assert report.worst is not None and report.worst.name.startswith("d²f/dx0[")


def _softsign_vjp(M: Any, g: Any, x: Any, out: Any) -> tuple[Any]:
    d = 1.0 + abs(x)
    return (g / (d * d),)


SOFTSIGN = Primitive("softsign", lambda x: x / (1.0 + np.abs(x)), _softsign_vjp)


def test_a_custom_op_works_like_a_builtin_against_torch(torch: Any) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4))
    w = rng.standard_normal(4)

    def ours(x: Any) -> Any:
        return (SOFTSIGN(x * w) ** 2).sum()

    def theirs(x: Any) -> Any:
        return (torch.nn.functional.softsign(x * torch.tensor(w)) ** 2).sum()

    x = Tensor(a)
    y = ours(x)
    assert y._prev[0]._prev[0]._op == "softsign"
    y.backward(create_graph=True)
    assert isinstance(x.grad, Tensor)
    tx = torch.tensor(a, requires_grad=True)
    (tg,) = torch.autograd.grad(theirs(tx), tx, create_graph=True)
    assert_close(x.grad.data, tg.detach().numpy(), "first derivative")
    (h,) = gradients(x.grad.sum(), [x])
    (th,) = torch.autograd.grad(tg.sum(), tx)
    assert_close(h, th.numpy(), "second derivative", 1e-10, 1e-12)
    assert_close(
        hessian(ours)(a).reshape(12, 12),
        torch.func.hessian(theirs)(torch.tensor(a)).reshape(12, 12).numpy(),
        "hessian",
        1e-10,
        1e-12,
    )
    np.testing.assert_allclose(grad(ours)(a), tg.detach().numpy(), rtol=1e-12)
    assert gradcheck(lambda t: SOFTSIGN(t), [a], order=2).ok


def test_a_custom_op_broadcasts_and_takes_constants() -> None:
    scale = Primitive("scale", lambda x, s: x * s, lambda M, g, x, s, out: (g * s, g * x))
    x, s = Tensor(np.ones((2, 3))), Tensor(np.array([2.0]))
    y = scale(x, s)  # s broadcast: its gradient is summed back to shape (1,)
    y.sum().backward()
    np.testing.assert_array_equal(s.grad, [6.0])
    np.testing.assert_array_equal(x.grad, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(scale(x, 3.0).data, np.full((2, 3), 3.0))


def test_a_custom_op_that_gets_its_vjp_wrong_says_so() -> None:
    two = Primitive("two", lambda x: x * 2.0, lambda M, g, x, out: (g, g))
    with pytest.raises(ValueError, match="two: vjp gave 2 gradients for 1 inputs"):
        two(Tensor([1.0])).sum().backward()
    flat = Primitive("flat", lambda x: x * 2.0, lambda M, g, x, out: (g.reshape(-1),))
    with pytest.raises(ValueError, match=r"flat: vjp gave a gradient of shape \(4,\)"):
        flat(Tensor(np.ones((2, 2)))).sum().backward()
    with pytest.raises(TypeError, match="Primitive: name must be a non-empty string"):
        Primitive("", lambda x: x, lambda M, g, x, out: (g,))


def _line_of(function: Any, marker: str) -> int:
    source, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(source) if marker in line)


def test_detect_anomaly_names_the_op_and_line_of_a_nan_in_backward() -> None:
    # A padded batch: row 0 of the input is zeros, so is row 0 of the
    # features, and the norm's backward turns that into inf, then nan.
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((4, 3)))
    x.data[0] = 0.0
    w1, w2 = Tensor(rng.standard_normal((5, 3))), Tensor(rng.standard_normal((2, 5)))

    def model(x: Tensor) -> Tensor:
        h = ct.linear(x, w1)
        norm = (h * h).sum(axis=1).sqrt()  # marker: sqrt(0) for the padding row
        return ct.linear(h, w2).tanh().sum() + norm.sum()

    # without the detector: a nan gradient, and nothing says where it came from
    loss = model(x)
    assert np.isfinite(loss.data)  # the forward pass is fine
    loss.backward()
    assert np.isnan(w1.grad).any()
    w1.grad = None
    with detect_anomaly():
        loss = model(x)
        with pytest.raises(AnomalyError) as caught:
            loss.backward()
    e = caught.value
    assert (e.phase, e.op, e.inputs) == ("backward", "sqrt", ((4,),))
    assert e.value == np.inf
    assert e.location is not None and e.location[0] == __file__
    here = test_detect_anomaly_names_the_op_and_line_of_a_nan_in_backward
    assert e.location[1] == _line_of(here, "# marker") and e.location[2] == "model"
    assert "the backward of sqrt (inputs of shapes ((4,),), output (4,))" in str(e)
    assert "index [0] of the gradient of input 0" in str(e)
    assert "norm = (h * h).sum(axis=1).sqrt()" in str(e)  # the source line


def test_detect_anomaly_forward_on_tensors() -> None:
    x = Tensor(np.array([[1.0, 2.0], [0.5, 3.0]]))
    with detect_anomaly(), pytest.raises(AnomalyError) as caught:
        (x - 1.0).log()
    e = caught.value
    assert (e.phase, e.op, e.inputs, e.value) == ("forward", "log", ((2, 2),), -np.inf)
    assert "log returned -inf at index [0, 0] of its output (2, 2)" in str(e)


def test_detect_anomaly_watches_create_graph_passes() -> None:
    x = Tensor(np.array([0.0, 1.0]))
    with detect_anomaly():
        y = (x.sqrt() * 2.0).sum()
        with pytest.raises(AnomalyError, match="the backward of sqrt") as caught:
            gradients(y, [x], create_graph=True)
    assert caught.value.phase == "backward"
