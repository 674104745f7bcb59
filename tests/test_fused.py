"""The fused GPT primitives (chainrule.fused) against PyTorch float64:
values, gradients, and second derivatives through create_graph."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from chainrule import Value, gradients, no_grad
from chainrule.fused import cross_entropy, inv_rms, linear, logsumexp, rmsnorm, softmax
from conftest import close

VECTORS = [
    [0.3],
    [1.0, 2.0, 3.0],
    [-1.5, 0.25, 4.0, -0.75, 2.5],
    [1000.0, 1000.5, 999.0],  # overflows without the max shift
    [-800.0, 0.0, 3.0, -2.0],
]
# Fixed upstream weights, so that every output's gradient path is exercised.
UPSTREAM = [0.7, -1.3, 0.4, 2.1, -0.2]


def _ours(xs: list[float]) -> list[Value]:
    return [Value(x) for x in xs]


def _theirs(torch: Any, xs: list[float]) -> Any:
    return torch.tensor(xs, dtype=torch.float64, requires_grad=True)


def _assert_close_all(ours: list[float], theirs: list[float], rtol: float = 1e-12) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert close(a, b, rtol=rtol, atol=1e-15), (ours, theirs)


@pytest.mark.parametrize("xs", VECTORS)
def test_logsumexp(torch: Any, xs: list[float]) -> None:
    v = _ours(xs)
    y = logsumexp(v)
    y.backward()
    t = _theirs(torch, xs)
    ty = torch.logsumexp(t, 0)
    ty.backward()
    assert close(y.data, ty.item())
    _assert_close_all([x.grad for x in v], t.grad.tolist())


def test_logsumexp_with_minus_infinity(torch: Any) -> None:
    xs = [-math.inf, 0.5, 1.5]
    v = _ours(xs)
    y = logsumexp(v)
    y.backward()
    t = _theirs(torch, xs)
    ty = torch.logsumexp(t, 0)
    ty.backward()
    assert close(y.data, ty.item())
    _assert_close_all([x.grad for x in v], t.grad.tolist())
    assert v[0].grad == 0.0


@pytest.mark.parametrize("xs", VECTORS)
def test_softmax(torch: Any, xs: list[float]) -> None:
    v = _ours(xs)
    ps = softmax(v)
    out = sum(p * w for p, w in zip(ps, UPSTREAM))
    out.backward()
    t = _theirs(torch, xs)
    tp = torch.softmax(t, 0)
    (tp * torch.tensor(UPSTREAM[: len(xs)], dtype=torch.float64)).sum().backward()
    _assert_close_all([p.data for p in ps], tp.tolist())
    _assert_close_all([x.grad for x in v], t.grad.tolist(), rtol=1e-11)
    assert len({id(p._prev[1]) for p in ps}) == 1  # one shared logsumexp node


@pytest.mark.parametrize("xs", VECTORS)
def test_cross_entropy_every_target(torch: Any, xs: list[float]) -> None:
    F = torch.nn.functional
    for target in range(len(xs)):
        v = _ours(xs)
        loss = cross_entropy(v, target)
        loss.backward()
        t = _theirs(torch, xs)
        tl = F.cross_entropy(t[None, :], torch.tensor([target]))
        tl.backward()
        assert close(loss.data, tl.item(), rtol=1e-11)
        _assert_close_all([x.grad for x in v], t.grad.tolist(), rtol=1e-11)
        assert loss._prev == tuple(v)  # a single node


@pytest.mark.parametrize(
    "xs,target",
    [([-math.inf, 0.0, 1.0], 0), ([-math.inf, 0.0, 1.0], 2), ([1e308, -1e308], 1)],
)
def test_cross_entropy_with_an_infinite_loss(torch: Any, xs: list[float], target: int) -> None:
    """A -inf logit, or a loss that overflows to inf: the gradient is still
    softmax - onehot, finite, as PyTorch's."""
    v = _ours(xs)
    loss = cross_entropy(v, target)
    loss.backward()
    t = _theirs(torch, xs)
    tl = torch.nn.functional.cross_entropy(t[None, :], torch.tensor([target]))
    tl.backward()
    assert loss.data == pytest.approx(tl.item(), rel=1e-12)
    assert [x.grad for x in v] == pytest.approx(t.grad.tolist(), rel=1e-12)


def test_cross_entropy_known_value() -> None:
    loss = cross_entropy([Value(0.0), Value(0.0), Value(0.0), Value(0.0)], 1)
    loss.backward()
    assert math.isclose(loss.data, math.log(4.0), rel_tol=1e-15)
    assert loss._prev[1].grad == -0.75
    assert loss._prev[0].grad == 0.25


def test_cross_entropy_rejects_bad_targets() -> None:
    logits = [Value(1.0), Value(2.0)]
    with pytest.raises(ValueError, match="target 2 is not a class index below 2"):
        cross_entropy(logits, 2)
    with pytest.raises(TypeError, match="target"):
        cross_entropy(logits, True)
    with pytest.raises(TypeError, match="target"):
        cross_entropy(logits, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("xs", VECTORS[:3] + [[0.0, 0.0, 0.0]])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_rmsnorm(torch: Any, xs: list[float], eps: float) -> None:
    v = _ours(xs)
    ys = rmsnorm(v, eps)
    out = sum(y * w for y, w in zip(ys, UPSTREAM))
    out.backward()
    t = _theirs(torch, xs)
    ty = t * torch.rsqrt((t * t).mean() + eps)
    (ty * torch.tensor(UPSTREAM[: len(xs)], dtype=torch.float64)).sum().backward()
    _assert_close_all([y.data for y in ys], ty.tolist())
    _assert_close_all([x.grad for x in v], t.grad.tolist(), rtol=1e-11)


@pytest.mark.parametrize(
    "xs", [[1e154, 1e154], [1.5e154, 0.0], [1e155, 1.0, -2e154], [-3e154, 2e154, 1e154, 5.0]]
)
def test_rmsnorm_of_squares_beyond_float64_is_scaled(torch: Any, xs: list[float]) -> None:
    """``rmsnorm([Value(1e154), Value(1e154)])`` raised ``OverflowError``
    from fsum. Now exact: it equals PyTorch's on the inputs scaled down by
    a power of two (eps with them), the gradient scaled back up. A tested
    difference: PyTorch's own float64 sum overflows there, and gives 0."""
    eps = 1e-5
    v = _ours(xs)
    ys = rmsnorm(v, eps)
    out = sum(y * w for y, w in zip(ys, UPSTREAM))
    out.backward()
    c = 2.0 ** (math.frexp(max(abs(x) for x in xs))[1] - 1)  # a power of two: exact scaling
    t = _theirs(torch, [x / c for x in xs])
    ty = t * torch.rsqrt((t * t).mean() + eps / (c * c))
    (ty * torch.tensor(UPSTREAM[: len(xs)], dtype=torch.float64)).sum().backward()
    _assert_close_all([y.data for y in ys], ty.tolist())
    grads, expected = [x.grad * c for x in v], t.grad.tolist()
    scale = max(abs(g) for g in expected)  # a gradient that cancels to 0 is 0 to rounding
    assert all(close(a, b, rtol=1e-11, atol=1e-14 * scale) for a, b in zip(grads, expected))
    raw = _theirs(torch, xs)
    assert (raw * torch.rsqrt((raw * raw).mean() + eps)).tolist() == [0.0] * len(xs)


def test_inv_rms_value() -> None:
    r = inv_rms([Value(3.0), Value(-3.0), Value(3.0), Value(-3.0)], eps=0.0)
    assert r.data == 1.0 / 3.0
    with pytest.raises(ValueError, match="no inputs"):
        inv_rms([])


def test_linear(torch: Any) -> None:
    w = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]
    x = [0.3, -0.6, 0.9]
    vw = [[Value(a) for a in row] for row in w]
    vx = _ours(x)
    ys = linear(vw, vx)
    (ys[0] * 2.0 + ys[1] * -3.0).backward()
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tx = _theirs(torch, x)
    ty = tw @ tx
    (ty * torch.tensor([2.0, -3.0], dtype=torch.float64)).sum().backward()
    _assert_close_all([y.data for y in ys], ty.tolist())
    _assert_close_all([a.grad for row in vw for a in row], tw.grad.flatten().tolist())
    _assert_close_all([a.grad for a in vx], tx.grad.tolist())


# Second derivatives: the rules evaluated on Values (create_graph=True).
SECOND_ORDER: dict[str, tuple[Callable[[list[Value]], Value], Callable[[Any, Any], Any]]] = {
    "cross_entropy": (
        lambda v: cross_entropy(v, 1),
        lambda torch, t: torch.nn.functional.cross_entropy(t[None, :], torch.tensor([1])),
    ),
    "logsumexp": (logsumexp, lambda torch, t: torch.logsumexp(t, 0)),
    "softmax": (
        lambda v: sum(p * w for p, w in zip(softmax(v), UPSTREAM)),
        lambda torch, t: (torch.softmax(t, 0) * torch.tensor(UPSTREAM[:4], dtype=t.dtype)).sum(),
    ),
    "rmsnorm": (
        lambda v: sum(y * w for y, w in zip(rmsnorm(v, 0.1), UPSTREAM)),
        lambda torch, t: (
            t * torch.rsqrt((t * t).mean() + 0.1) * torch.tensor(UPSTREAM[:4], dtype=t.dtype)
        ).sum(),
    ),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_derivative_matches_torch_hessian(torch: Any, name: str) -> None:
    ours, theirs = SECOND_ORDER[name]
    xs = [0.4, -1.1, 2.3, 0.05]
    v = _ours(xs)
    grads = gradients(ours(v), v, create_graph=True)
    hessian = [gradients(g, v) for g in grads]
    t = torch.tensor(xs, dtype=torch.float64)
    expected = torch.autograd.functional.hessian(lambda a: theirs(torch, a), t).tolist()
    for row, trow in zip(hessian, expected):
        _assert_close_all(row, trow, rtol=1e-10)


def test_backward_create_graph_on_cross_entropy_gives_values() -> None:
    v = _ours([1.0, 2.0, 0.5])
    loss = cross_entropy(v, 0)
    loss.backward(create_graph=True)
    assert all(isinstance(x.grad, Value) for x in v)
    # The gradients sum to zero: softmax sums to one, the one-hot to one.
    assert abs(sum(x.grad.data for x in v)) < 1e-15  # type: ignore[union-attr]


def test_fused_ops_under_no_grad_record_nothing() -> None:
    v = _ours([1.0, 2.0, 3.0])
    with no_grad():
        loss = cross_entropy(v, 2)
        ys = rmsnorm(v)
        ps = softmax(v)
    assert loss._prev == () and all(y._prev == () for y in ys + ps)
    assert math.isclose(sum(p.data for p in ps), 1.0, rel_tol=1e-15)


def test_linear_builds_the_same_nodes_as_dot() -> None:
    from chainrule import dot

    w = [[Value(0.5), Value(-1.0)], [Value(2.0), Value(0.25)]]
    x = [Value(3.0), Value(-4.0)]
    fast = linear(w, x)
    slow = [dot(row, x) for row in w]
    for a, b in zip(fast, slow):
        assert (a.data, a._prev, a._op) == (b.data, b._prev, b._op)
        assert tuple(a._local_grads) == tuple(b._local_grads)
    # Second derivatives go through DOT's rule: with f = w . x,
    # d2(f * f) / dw00 dx0 = 2 (w00 x0 + f).
    y = fast[0] * fast[0]
    (g,) = gradients(y, [w[0][0]], create_graph=True)
    (h,) = gradients(g, [x[0]])
    assert h == 2 * (3.0 * 0.5 + fast[0].data)


def test_linear_with_constant_inputs_or_mixed_rows_falls_back_to_dot() -> None:
    w = [[Value(1.0), 2.0], [Value(3.0), Value(4.0)]]
    ys = linear(w, [1.0, 2.0])  # constant x: weights only
    assert [y.data for y in ys] == [5.0, 11.0]
    ys = linear(w, [Value(1.0), Value(2.0)])  # a row holding a number
    assert [y.data for y in ys] == [5.0, 11.0]
    with pytest.raises(ValueError, match="lengths differ"):
        linear([[Value(1.0)]], [Value(1.0), Value(2.0)])
