"""Each loss against its PyTorch float64 counterpart: value and gradients."""

from __future__ import annotations

import doctest
import math
import random
from typing import Any

import pytest

import chainrule.losses
from chainrule import Value, gradients
from chainrule.losses import (
    binary_cross_entropy_with_logits,
    cross_entropy,
    hinge_loss,
    log_softmax,
    logsumexp,
    mse_loss,
)
from conftest import close


def _values(xs: list[float]) -> list[Value]:
    return [Value(x) for x in xs]


def _check(loss: Value, inputs: list[Value], t_loss: Any, t_inputs: Any) -> None:
    loss.backward()
    t_loss.backward()
    assert close(loss.data, t_loss.item())
    for v, tg in zip(inputs, t_inputs.grad.tolist()):
        assert close(v.grad, tg, atol=1e-15)


def _randoms(n: int, seed: int, scale: float = 2.0) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(-scale, scale) for _ in range(n)]


def test_mse_matches_torch(torch: Any) -> None:
    preds, targets = _randoms(7, 1), _randoms(7, 2)
    ps = _values(preds)
    tp = torch.tensor(preds, dtype=torch.float64, requires_grad=True)
    t_loss = torch.nn.functional.mse_loss(tp, torch.tensor(targets, dtype=torch.float64))
    _check(mse_loss(ps, targets), ps, t_loss, tp)


def test_mse_of_a_single_prediction() -> None:
    p = Value(3.0)
    loss = mse_loss(p, 1.0)
    loss.backward()
    assert (loss.data, p.grad) == (4.0, 4.0)


def test_hinge_matches_torch(torch: Any) -> None:
    # Includes a point exactly on the margin (y * s = 1): no gradient, as torch.relu.
    scores = [2.0, 0.5, -0.3, 1.0, -1.7, 0.0]
    labels = [1, -1, 1, 1, -1, -1]
    ss = _values(scores)
    ts = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    ys = torch.tensor(labels, dtype=torch.float64)
    t_loss = torch.relu(1 - ys * ts).mean()
    _check(hinge_loss(ss, labels), ss, t_loss, ts)
    assert ss[3].grad == 0.0


def test_hinge_is_micrograds_demo_loss() -> None:
    scores, labels = _values([0.2, -2.0, 0.9]), [1, -1, -1]
    ours = hinge_loss(scores, labels).data
    theirs = sum((1 + -y * s).relu() for y, s in zip(labels, scores)) * (1.0 / 3)
    assert close(ours, theirs.data)


@pytest.mark.parametrize("logits", [[0.3, -1.2, 2.5, 0.0], [800.0, -800.0, 40.0, -40.0]])
def test_binary_cross_entropy_matches_torch(torch: Any, logits: list[float]) -> None:
    targets = [1.0, 0.0, 0.25, 1.0]
    zs = _values(logits)
    tz = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    t_loss = torch.nn.functional.binary_cross_entropy_with_logits(
        tz, torch.tensor(targets, dtype=torch.float64)
    )
    loss = binary_cross_entropy_with_logits(zs, targets)
    assert math.isfinite(loss.data)  # no log(0) even at |z| = 800
    _check(loss, zs, t_loss, tz)


@pytest.mark.parametrize("scale", [3.0, 1000.0])
def test_cross_entropy_matches_torch(torch: Any, scale: float) -> None:
    rows = [_randoms(5, seed, scale) for seed in range(4)]
    targets = [0, 4, 2, 2]
    zs = [_values(row) for row in rows]
    tz = torch.tensor(rows, dtype=torch.float64, requires_grad=True)
    t_loss = torch.nn.functional.cross_entropy(tz, torch.tensor(targets))
    loss = cross_entropy(zs, targets)
    loss.backward()
    t_loss.backward()
    assert close(loss.data, t_loss.item())
    for row, t_row in zip(zs, tz.grad.tolist()):
        for v, tg in zip(row, t_row):
            assert close(v.grad, tg, atol=1e-15)


def test_cross_entropy_of_one_example() -> None:
    z = _values([1.0, 2.0, 3.0])
    loss = cross_entropy(z, 2)
    loss.backward()
    softmax = [math.exp(x) / (math.exp(1) + math.exp(2) + math.exp(3)) for x in (1, 2, 3)]
    assert close(loss.data, -math.log(softmax[2]))
    assert close(z[0].grad, softmax[0]) and close(z[2].grad, softmax[2] - 1.0)


def test_log_softmax_matches_torch(torch: Any) -> None:
    logits = _randoms(6, 7, 5.0)
    weights = _randoms(6, 8)
    zs = _values(logits)
    tz = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    out = log_softmax(zs)
    t_out = torch.log_softmax(tz, dim=0)
    for v, t in zip(out, t_out.tolist()):
        assert close(v.data, t)
    # The gradient of a weighted sum exercises the full Jacobian.
    (t_out * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    g_list = gradients(sum(w * o for w, o in zip(weights, out)), zs)
    for g, tg in zip(g_list, tz.grad.tolist()):
        assert close(g, tg, atol=1e-15)


@pytest.mark.parametrize(
    "xs",
    [
        [0.5, -1.0, 2.0],
        [1000.0, 1000.0, 999.0],
        [-1000.0, -1001.0],
        [-math.inf, 0.0, 1.0],
        [-math.inf, -math.inf],
        [math.inf, 1.0],
        [math.nan, 1.0],
    ],
)
def test_logsumexp_matches_torch(torch: Any, xs: list[float]) -> None:
    vs = _values(xs)
    y = logsumexp(vs)
    theirs = torch.logsumexp(torch.tensor(xs, dtype=torch.float64), dim=0).item()
    assert close(y.data, theirs)
    if all(math.isfinite(x) for x in xs):
        tx = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
        torch.logsumexp(tx, dim=0).backward()
        y.backward()
        for v, tg in zip(vs, tx.grad.tolist()):
            assert close(v.grad, tg, atol=1e-15)


def test_logsumexp_second_derivative() -> None:
    # d2/dx2 logsumexp([x, c]) = s (1 - s) with s = sigmoid(x - c).
    x = Value(0.3)
    (g,) = gradients(logsumexp([x, 1.0]), [x], create_graph=True)
    (h,) = gradients(g, [x])
    s = 1.0 / (1.0 + math.exp(-(0.3 - 1.0)))
    assert close(g.data, s) and close(h, s * (1.0 - s))


def test_logsumexp_is_one_node() -> None:
    xs = _values([1.0, 2.0, 3.0])
    assert logsumexp(xs)._prev == tuple(xs)


@pytest.mark.parametrize(
    "call",
    [
        lambda: mse_loss([Value(1.0)], [1.0, 2.0]),
        lambda: hinge_loss([], []),
        lambda: cross_entropy([Value(1.0), Value(2.0)], 2),
        lambda: logsumexp([]),
    ],
)
def test_bad_arguments_raise_value_error(call: Any) -> None:
    with pytest.raises(ValueError):
        call()


def test_a_target_that_is_not_an_int_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cross_entropy: target must be an int, got True"):
        cross_entropy([[Value(1.0)]], [True])


def test_docstring_examples() -> None:
    result = doctest.testmod(chainrule.losses)
    assert result.attempted > 0 and result.failed == 0
