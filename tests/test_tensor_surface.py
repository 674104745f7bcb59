"""The PyTorch surface of the Tensor engine: each op's value and gradient
against PyTorch float64 (and float32 within float32's precision), with
broadcasting and edge shapes (empty, 0-d); ``requires_grad``; the error
messages that name the op and the shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

import chainrule.tensor as ct
from chainrule import Tensor, no_grad
from chainrule.tensor import nn
from tensor_oracle import assert_close, compare

EXAMPLES = settings(max_examples=15)

SHAPES = [(), (0,), (3,), (2, 3), (2, 0, 3), (2, 3, 4)]


def _random(shape: tuple[int, ...], seed: int = 0, ties: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # few distinct values: max/min ties, clamp boundaries hit exactly
        return rng.integers(-2, 3, shape).astype(np.float64)
    return rng.standard_normal(shape)


def _float32(
    torch: Any, ours: Callable[..., Tensor], theirs: Callable[..., Any], arrays: list[np.ndarray]
) -> None:
    """The same computation in float32 on both sides: float32 results,
    equal within float32's precision."""
    ts = [Tensor(a.astype(np.float32)) for a in arrays]
    tts = [torch.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    y, ty = ours(*ts), theirs(*tts)
    assert y.data.dtype == np.float32
    assert_close(y.data, ty.detach().numpy(), "float32 value", rtol=1e-5, atol=1e-6)
    g = np.random.default_rng(1).standard_normal(y.data.shape).astype(np.float32)
    y.backward(g)
    ty.backward(torch.tensor(g))
    for t, tt in zip(ts, tts):
        assert t.grad is not None and t.grad.dtype == np.float32
        assert_close(t.grad, tt.grad.numpy(), "float32 gradient", rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------
# reductions: min, var, std
# ----------------------------------------------------------------------------

REDUCTIONS: dict[str, tuple[Callable[..., Tensor], Callable[..., Any]]] = {
    "min": (lambda x, a, k: x.min(a, k), lambda x, a, k: x.amin(a, k)),
    "var": (lambda x, a, k: x.var(a, keepdims=k), lambda x, a, k: x.var(a, keepdim=k)),
    "std": (lambda x, a, k: x.std(a, keepdims=k), lambda x, a, k: x.std(a, keepdim=k)),
    "var0": (
        lambda x, a, k: x.var(a, correction=0, keepdims=k),
        lambda x, a, k: x.var(a, correction=0, keepdim=k),
    ),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_each_axis(
    torch: Any, name: str, shape: tuple[int, ...], keepdims: bool
) -> None:
    ours, theirs = REDUCTIONS[name]
    x = _random(shape, ties=name == "min")
    pair = [(0, len(shape) - 1)] if len(shape) > 1 else []
    for axis in [*range(len(shape)), -1, *pair]:
        compare(
            torch,
            lambda t, a=axis: ours(t, a, keepdims),
            lambda t, a=axis: theirs(t, a, keepdims),
            [x],
        )
    _float32(torch, lambda t: ours(t, -1, keepdims), lambda t: theirs(t, -1, keepdims), [x])


def test_min_over_everything_is_torch_min(torch: Any) -> None:
    x = _random((3, 4), ties=True)
    compare(torch, lambda t: t.min(), lambda t: t.min(), [x])
    compare(torch, lambda t: t.min(), lambda t: t.min(), [np.array(2.5)])  # 0-d


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_whole_and_constant_slices(torch: Any, name: str) -> None:
    ours, theirs = REDUCTIONS[name]
    compare(
        torch, lambda t: ours(t, None, False), lambda t: theirs(t, None, False), [_random((4,))]
    )
    # a constant row: std 0 gets gradient 0 (not nan), as PyTorch
    x = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 5.0]])
    compare(torch, lambda t: ours(t, 1, False), lambda t: theirs(t, 1, False), [x])
    # one entry and Bessel's correction: nan, as PyTorch
    with pytest.warns(UserWarning):  # PyTorch warns about the degrees of freedom
        compare(torch, lambda t: ours(t, 0, False), lambda t: theirs(t, 0, False), [np.ones(1)])


def test_min_of_an_empty_axis_names_the_op() -> None:
    with pytest.raises(ValueError, match=r"min: cannot reduce \(2, 0\)"):
        Tensor(np.zeros((2, 0))).min(axis=1)
    assert Tensor(np.zeros((2, 0))).min(axis=0).shape == (0,)


# ----------------------------------------------------------------------------
# where, clamp, gelu
# ----------------------------------------------------------------------------


@EXAMPLES
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
def test_where_broadcasts(torch: Any, shapes: Any) -> None:
    cs, a_shape, b_shape = shapes.input_shapes
    cond = np.random.default_rng(0).random(cs) > 0.5
    a, b = _random(a_shape, 1), _random(b_shape, 2)
    tcond = torch.tensor(cond)
    compare(torch, lambda x, y: ct.where(cond, x, y), lambda x, y: torch.where(tcond, x, y), [a, b])


def test_where_with_a_constant_side(torch: Any) -> None:
    cond = np.array([True, False, True])
    x = _random((2, 3))
    compare(
        torch,
        lambda t: ct.where(cond, t, 0.5),
        lambda t: torch.where(torch.tensor(cond), t, 0.5),
        [x],
    )
    compare(
        torch,
        lambda t: ct.where(cond, 2.0, t),
        lambda t: torch.where(torch.tensor(cond), 2.0, t),
        [x],
    )
    with pytest.raises(TypeError, match="where: condition must be boolean"):
        ct.where(np.array([1.0]), Tensor([1.0]), 0.0)


@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (None, 0.0), (0.0, None), (1.0, 1.0), (1.0, -1.0)])
@pytest.mark.parametrize("shape", SHAPES)
def test_clamp(torch: Any, bounds: tuple[Any, Any], shape: tuple[int, ...]) -> None:
    lo, hi = bounds
    x = _random(shape, ties=True) / 2  # entries exactly at the bounds
    compare(torch, lambda t: t.clamp(lo, hi), lambda t: t.clamp(lo, hi), [x])
    compare(torch, lambda t: ct.clip(t, lo, hi), lambda t: torch.clip(t, lo, hi), [x])


def test_clamp_nan_and_float32(torch: Any) -> None:
    x = np.array([np.nan, -2.0, 0.3, np.inf])
    compare(torch, lambda t: t.clamp(-1.0, 1.0), lambda t: t.clamp(-1.0, 1.0), [x])
    _float32(torch, lambda t: t.clamp(-0.5, 0.5), lambda t: t.clamp(-0.5, 0.5), [_random((3, 4))])
    with pytest.raises(ValueError, match="clamp: give min, max or both"):
        Tensor([1.0]).clamp()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu(torch: Any, approximate: str, shape: tuple[int, ...]) -> None:
    F = torch.nn.functional
    x = _random(shape) * 3
    compare(torch, lambda t: t.gelu(approximate), lambda t: F.gelu(t, approximate=approximate), [x])
    if shape:
        _float32(
            torch,
            lambda t: ct.gelu(t, approximate),
            lambda t: F.gelu(t, approximate=approximate),
            [x],
        )


def test_gelu_extremes(torch: Any) -> None:
    F = torch.nn.functional
    x = np.array([-40.0, -8.0, -1e-300, 0.0, 1e-8, 8.0, 40.0])
    compare(torch, ct.gelu, F.gelu, [x])


# ----------------------------------------------------------------------------
# dropout
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.25, 0.9, 1.0])
def test_dropout_scales_what_it_keeps(p: float) -> None:
    """PyTorch's random draws differ, so the oracle is the definition: kept
    entries scaled by 1/(1-p), the gradient the same mask and scale."""
    x = Tensor(np.random.default_rng(0).standard_normal((50, 40)) + 3.0)
    y = ct.dropout(x, p, rng=np.random.default_rng(1))
    kept = y.data != 0.0
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    np.testing.assert_allclose(y.data[kept], x.data[kept] * scale, rtol=1e-15)
    if 0.0 < p < 1.0:
        assert abs(kept.mean() - (1.0 - p)) < 0.05
    g = np.random.default_rng(2).standard_normal(y.shape)
    y.backward(g)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad, np.where(kept, g * scale, 0.0), rtol=1e-15)


def test_dropout_module_is_the_identity_in_eval() -> None:
    layer = nn.Dropout(0.5, rng=np.random.default_rng(0))
    x = Tensor(np.ones((4, 5)))
    assert layer(x).data.min() == 0.0  # training: some dropped
    layer.eval()
    assert layer(x) is x
    assert ct.dropout(x, 0.5, training=False) is x
    with pytest.raises(ValueError, match="dropout: p must be a probability"):
        ct.dropout(x, 1.5)


# ----------------------------------------------------------------------------
# shapes: view, unsqueeze, squeeze, flatten, cat, stack
# ----------------------------------------------------------------------------

SHAPE_OPS: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], tuple[int, ...]]] = [
    ("view", lambda t: t.view(3, -1), lambda t: t.view(3, -1), (2, 3, 2)),
    ("view0", lambda t: t.view(1, 1), lambda t: t.view(1, 1), ()),
    ("view-empty", lambda t: t.view(0, 3), lambda t: t.view(0, 3), (3, 0)),
    ("unsqueeze0", lambda t: t.unsqueeze(0), lambda t: t.unsqueeze(0), (2, 3)),
    ("unsqueeze-1", lambda t: t.unsqueeze(-1), lambda t: t.unsqueeze(-1), (2, 3)),
    ("unsqueeze-0d", lambda t: t.unsqueeze(0), lambda t: t.unsqueeze(0), ()),
    ("squeeze", lambda t: t.squeeze(), lambda t: t.squeeze(), (1, 3, 1, 2)),
    ("squeeze1", lambda t: t.squeeze(2), lambda t: t.squeeze(2), (1, 3, 1, 2)),
    ("squeeze-kept", lambda t: t.squeeze(1), lambda t: t.squeeze(1), (1, 3, 1, 2)),
    ("squeeze-0d", lambda t: t.squeeze(), lambda t: t.squeeze(), ()),
    ("flatten", lambda t: t.flatten(), lambda t: t.flatten(), (2, 3, 4)),
    ("flatten12", lambda t: t.flatten(1), lambda t: t.flatten(1), (2, 3, 4)),
    ("flatten01", lambda t: t.flatten(0, 1), lambda t: t.flatten(0, 1), (2, 3, 4)),
    ("flatten-0d", lambda t: t.flatten(), lambda t: t.flatten(), ()),
]


@pytest.mark.parametrize("case", SHAPE_OPS, ids=[c[0] for c in SHAPE_OPS])
def test_shape_ops(torch: Any, case: Any) -> None:
    _, ours, theirs, shape = case
    compare(torch, ours, theirs, [_random(shape)])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cat_and_stack(torch: Any, axis: int) -> None:
    a, b = _random((2, 3), 1), _random((2, 3), 2)
    compare(torch, lambda x, y: ct.cat([x, y], axis), lambda x, y: torch.cat([x, y], axis), [a, b])
    compare(
        torch, lambda x, y: ct.stack([x, y], axis), lambda x, y: torch.stack([x, y], axis), [a, b]
    )
    empty = _random((2, 0)) if axis else _random((0, 3))
    compare(
        torch,
        lambda x, y: ct.cat([x, y], axis),
        lambda x, y: torch.cat([x, y], axis),
        [a, empty] if axis == 0 else [_random((2, 3)), _random((2, 0))],
    )


# ----------------------------------------------------------------------------
# tolist, item, requires_grad
# ----------------------------------------------------------------------------


def test_tolist_and_item(torch: Any) -> None:
    x = np.arange(6.0).reshape(2, 3)
    assert Tensor(x).tolist() == torch.tensor(x).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert Tensor(2.5).tolist() == 2.5 and Tensor(np.zeros(0)).tolist() == []
    assert Tensor([[7.0]]).item() == 7.0 and isinstance(Tensor(7.0).item(), float)
    with pytest.raises(ValueError, match="item: tensor has 6 elements, not 1"):
        Tensor(x).item()


def test_float_of_a_tensor_in_a_graph_names_item() -> None:
    """float() (and so math.*) of a Tensor that requires a gradient would
    give a number whose derivative is silently lost (the wrong gradient of
    issue 22: d/dx sin(x) * x computed as sin(x)): a TypeError naming
    item(). A constant converts; item() and formatting always work."""
    import math

    x = Tensor(2.0)
    for convert in (float, int, math.sin, math.exp, math.floor):
        with pytest.raises(TypeError, match=r"item\(\)"):
            convert(x)  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"item\(\)"):
        math.sin(x * 1.0)
    y = (x * x).sum()
    assert y.item() == 4.0 and f"{y:.3f}" == "4.000" and f"{x:+.1e}" == "+2.0e+00"
    assert f"{x}" == str(x) == "Tensor(2.)"
    assert float(x.detach()) == 2.0 and int(Tensor(3.7, requires_grad=False)) == 3
    with no_grad():
        assert math.sin(x * 1.0) == math.sin(2.0)
    with pytest.raises(TypeError):
        format(Tensor([1.0, 2.0]), ".3f")  # an array has no float format


def test_requires_grad(torch: Any) -> None:
    """A leaf made with requires_grad=False is a constant: it gets no
    gradient, and a result of constants alone has no graph; backward()
    from it raises, as in PyTorch."""
    w = Tensor([1.0, 2.0])
    c = Tensor([3.0, 4.0], requires_grad=False)
    y = (w * c).sum()
    assert y.requires_grad
    y.backward()
    assert w.grad is not None and w.grad.tolist() == [3.0, 4.0]
    assert c.grad is None
    z = (c * c).sum()
    assert not z.requires_grad and z._prev == ()
    with pytest.raises(RuntimeError, match="does not require a gradient"):
        z.backward()
    tz = (torch.tensor([3.0, 4.0]) ** 2).sum()
    with pytest.raises(RuntimeError):  # PyTorch refuses too
        tz.backward()
    c.requires_grad_()
    (c * c).sum().backward()
    assert c.grad is not None and c.grad.tolist() == [6.0, 8.0]
    with pytest.raises(RuntimeError, match="requires_grad_: only leaves"):
        (c * 2.0).requires_grad_(False)
    with no_grad():
        assert not (w * 2.0).requires_grad
    assert not w.detach().requires_grad


# ----------------------------------------------------------------------------
# errors name the op and the shapes
# ----------------------------------------------------------------------------


def _raises(error: type[Exception], call: Callable[[], Any], *fragments: str) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    # NumPy's own wording never reaches the user
    for raw in ("operands could not be broadcast", "gufunc", "core dimension", "tuple index"):
        assert raw not in message, message
    return message


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**"])
def test_broadcast_errors_name_op_and_shapes(op: str) -> None:
    a, b = Tensor(np.ones((2, 3))), Tensor(np.ones((3, 2)))
    f = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: a / b,
        "**": lambda: a**b,
    }[op]
    _raises(ValueError, f, f"{op}: shapes (2, 3), (3, 2) do not broadcast")
    _raises(ValueError, lambda: a + np.ones(4), "+: shapes (2, 3), (4,)")


def test_matmul_errors_name_the_shapes() -> None:
    a = Tensor(np.ones((2, 3)))
    _raises(ValueError, lambda: a @ a, "matmul: shapes (2, 3) @ (2, 3) do not fit", "3", "2")
    _raises(ValueError, lambda: a @ np.ones(2), "matmul: shapes (2, 3) @ (2,)")
    batch = Tensor(np.ones((2, 3, 4)))
    _raises(ValueError, lambda: batch @ np.ones((3, 4, 5)), "(2, 3, 4) @ (3, 4, 5)")


def test_embedding_rejects_negative_and_large_indices(torch: Any) -> None:
    w = Tensor(np.ones((5, 2)))
    _raises(IndexError, lambda: ct.embedding(w, [-1]), "embedding: index -1", "5 rows")
    _raises(IndexError, lambda: ct.embedding(w, [5]), "embedding: index 5", "(5, 2)")
    with pytest.raises(IndexError):  # PyTorch raises for -1 too
        torch.nn.functional.embedding(torch.tensor([-1]), torch.ones(5, 2))


def test_softmax_of_a_0d_tensor_is_pytorchs(torch: Any) -> None:
    for ours, theirs in [(ct.softmax, torch.softmax), (ct.log_softmax, torch.log_softmax)]:
        compare(torch, lambda t, f=ours: f(t, -1), lambda t, f=theirs: f(t, -1), [np.array(3.0)])
    assert Tensor(3.0).softmax().item() == 1.0
    _raises(ValueError, lambda: Tensor(np.ones((2, 3))).softmax(2), "softmax: axis 2", "2-d")
    _raises(TypeError, lambda: Tensor(np.ones(3)).log_softmax(1.0), "log_softmax: axis")  # type: ignore[arg-type]


def test_reduction_axis_errors() -> None:
    x = Tensor(np.ones((2, 3)))
    for name in ("sum", "mean", "max", "min", "var", "std"):
        reduce = getattr(x, name)
        _raises(TypeError, lambda: reduce(axis=1.0), f"{name}: axis must be an int")  # noqa: B023
        _raises(ValueError, lambda: reduce(axis=2), f"{name}: axis 2 is out of range")  # noqa: B023


def test_linear_refuses_a_bias_of_another_dtype() -> None:
    x = Tensor(np.ones((4, 3), dtype=np.float32))
    w = Tensor(np.ones((2, 3), dtype=np.float32))
    b = Tensor(np.ones(2))
    _raises(TypeError, lambda: ct.linear(x, w, b), "linear: bias is float64", "float32", "(4, 3)")
    _raises(ValueError, lambda: ct.linear(x, w, Tensor(np.ones(3, np.float32))), "bias (3,)")
    _raises(ValueError, lambda: ct.linear(x, Tensor(np.ones((2, 4))), None), "(4, 3)", "(2, 4)")


def _torch_gelu(t: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(t)


EDGE_OPS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "var": (lambda t: t.var(), lambda t: t.var()),
    "std0": (lambda t: t.std(correction=0), lambda t: t.std(correction=0)),
    "var-axis0": (lambda t: t.var(0), lambda t: t.var(0)),
    "min-last": (lambda t: t.min(-1, True), lambda t: t.amin(-1, True)),
    "where": (
        lambda t: ct.where(np.ones(t.shape, dtype=bool), t, 1.0),
        lambda t: t.where(t.new_ones(t.shape, dtype=bool), 1.0),
    ),
    "clamp": (lambda t: t.clamp(-0.1, 0.1), lambda t: t.clamp(-0.1, 0.1)),
    "gelu": (ct.gelu, _torch_gelu),
    "unsqueeze": (lambda t: t.unsqueeze(-1), lambda t: t.unsqueeze(-1)),
    "flatten": (lambda t: t.flatten(), lambda t: t.flatten()),
}


@pytest.mark.parametrize("name", sorted(EDGE_OPS))
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 3), (1,), (2, 1)])
def test_edge_shapes(torch: Any, name: str, shape: tuple[int, ...]) -> None:
    """Empty and 0-d tensors and single entries: the same values (nan where
    PyTorch gives nan) and gradients as PyTorch."""
    import warnings

    ours, theirs = EDGE_OPS[name]
    if name == "min-last" and shape and shape[-1] == 0:
        with pytest.raises(ValueError, match=r"min: cannot reduce \("):
            ours(Tensor(_random(shape)))
        with pytest.raises((IndexError, RuntimeError)):  # PyTorch refuses too
            theirs(torch.tensor(_random(shape)))
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's degrees-of-freedom warning
        compare(torch, ours, theirs, [_random(shape)])
