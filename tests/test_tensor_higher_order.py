"""Second (and third) derivatives of every Tensor op against PyTorch
float64: ``create_graph=True`` gradients differentiated again, at points
drawn by hypothesis."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chainrule.tensor as ct
from chainrule import Tensor, no_grad
from chainrule.tensor import gradients
from tensor_cases import OPS, point
from tensor_oracle import assert_close

RTOL = 1e-9
ATOL = 1e-11


@pytest.mark.parametrize("name", sorted(OPS))
@settings(max_examples=4)
@given(seed=st.integers(0, 2**32 - 1))
def test_second_derivatives_match_torch(torch: Any, name: str, seed: int) -> None:
    ours, theirs, shapes, domain = OPS[name]
    arrays = point(shapes, domain, seed)
    rng = np.random.default_rng(seed + 1)
    xs = [Tensor(a.copy()) for a in arrays]
    y = ours(*xs)
    u = rng.standard_normal(y.data.shape)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    first = gradients(y, xs, u, create_graph=True)
    assert all(isinstance(g, Tensor) for g in first)
    inner = ct.sum(ct.stack([(g * v).sum() for g, v in zip(first, vs)]))
    second = gradients(inner, xs)

    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = theirs(torch, *txs)
    tfirst = torch.autograd.grad(ty, txs, torch.tensor(u), create_graph=True, allow_unused=True)
    for g, tg in zip(first, tfirst):
        expected = np.zeros(g.data.shape) if tg is None else tg.detach().numpy()
        assert_close(g.data, expected, f"{name}: first derivative", RTOL, ATOL)
    tinner = sum((tg * torch.tensor(v)).sum() for tg, v in zip(tfirst, vs) if tg is not None)
    if not isinstance(tinner, torch.Tensor) or not tinner.requires_grad:
        tsecond: tuple[Any, ...] = (None,) * len(xs)  # the first derivative is constant
    else:
        tsecond = torch.autograd.grad(tinner, txs, allow_unused=True)
    for i, (h, th) in enumerate(zip(second, tsecond)):
        expected = np.zeros(h.shape) if th is None else th.numpy()
        assert_close(h, expected, f"{name}: second derivative, input {i}", RTOL, ATOL)


def _layer_norm_composed(t: Any, x: Any, w: Any, b: Any) -> Any:
    xc = x - x.mean(-1, keepdim=True)
    return xc / t.sqrt((xc * xc).mean(-1, keepdim=True) + 1e-5) * w + b


# torch's fused layer_norm is not differentiable three times over (its
# double backward's own backward is off by orders of magnitude), so the
# third derivative is checked against torch's primitives composed.
THIRD_ORDER_ORACLE = {"layer_norm": _layer_norm_composed}


@pytest.mark.parametrize(
    "name", ["tanh", "softmax", "layer_norm", "attention", "div", "log_softmax"]
)
def test_third_derivatives_match_torch(torch: Any, name: str) -> None:
    ours, theirs, shapes, domain = OPS[name]
    theirs = THIRD_ORDER_ORACLE.get(name, theirs)
    arrays = point(shapes, domain, 7)
    xs = [Tensor(a.copy()) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    w = np.random.default_rng(8).standard_normal(ours(*xs).data.shape)
    y = (ours(*xs) * w).sum()
    ty = (theirs(torch, *txs) * torch.tensor(w)).sum()
    for _ in range(2):  # gradient of the sum of the gradient, twice
        gs = gradients(y, xs, create_graph=True)
        y = ct.sum(ct.stack([(g * g).sum() for g in gs]))
        tgs = torch.autograd.grad(ty, txs, create_graph=True, allow_unused=True)
        ty = sum((tg * tg).sum() for tg in tgs if tg is not None)
    assert_close(y.data, ty.detach().numpy(), f"{name}: value")
    third = gradients(y, xs)
    tthird = torch.autograd.grad(ty, txs, allow_unused=True)
    for h, th in zip(third, tthird):
        expected = np.zeros(h.shape) if th is None else th.numpy()
        assert_close(h, expected, f"{name}: third-order gradient", 1e-8, 1e-10)


def test_backward_create_graph_fills_grad_with_tensors(torch: Any) -> None:
    x = Tensor([1.0, 2.0, 3.0])
    y = (x * x * x).sum()
    y.backward(create_graph=True)
    assert isinstance(x.grad, Tensor)
    assert_close(x.grad.data, [3.0, 12.0, 27.0], "first")
    g = x.grad
    x.grad = None
    g.sum().backward()
    assert_close(x.grad, [6.0, 12.0, 18.0], "second: d/dx sum(3 x^2) = 6 x")


def test_backward_create_graph_accumulates_on_leaves() -> None:
    x = Tensor([1.0, 2.0])
    (x * x).sum().backward(create_graph=True)
    (x * x).sum().backward(create_graph=True)
    assert isinstance(x.grad, Tensor)
    np.testing.assert_array_equal(x.grad.data, [4.0, 8.0])
    (dx,) = gradients(x.grad.sum(), [x])
    np.testing.assert_array_equal(dx, [4.0, 4.0])


def test_create_graph_records_even_under_no_grad() -> None:
    x = Tensor([0.5, -1.0])
    y = (x.tanh() * x).sum()
    with no_grad():
        (g,) = gradients(y, [x], create_graph=True)
    assert g._prev  # a graph, differentiable again
    (h,) = gradients(g.sum(), [x])
    t = np.tanh(x.data)
    expected = 2 * (1 - t**2) - 2 * x.data * t * (1 - t**2)
    np.testing.assert_allclose(h, expected, rtol=1e-12)


def test_gradient_seed_as_a_tensor_is_differentiable() -> None:
    x = Tensor([1.0, 2.0])
    v = Tensor([3.0, -1.0])
    (g,) = gradients(x * x, [x], v, create_graph=True)  # 2 x v
    dx, dv = gradients(g.sum(), [x, v])
    np.testing.assert_array_equal(dx, 2 * v.data)
    np.testing.assert_array_equal(dv, 2 * x.data)


def test_unreached_inputs_get_zeros_and_bad_calls_say_why() -> None:
    x, z = Tensor([1.0, 2.0]), Tensor([[5.0]])
    gx, gz = gradients((x * 2.0).sum(), [x, z], create_graph=True)
    assert isinstance(gz, Tensor) and gz.data.shape == (1, 1) and not gz.data.any()
    with pytest.raises(TypeError, match="gradients: input 0 must be a Tensor"):
        gradients((x * 2.0).sum(), [1.0])
    with pytest.raises(ValueError, match=r"gradients: the root has shape \(2,\)"):
        gradients(x * 2.0, [x])
    with pytest.raises(ValueError, match=r"gradients: gradient has shape \(3,\)"):
        gradients(x * 2.0, [x], np.ones(3))
    del gx
    gc.collect()
