"""chainrule.optim against torch.optim: from the same parameters and the
same gradients, every step gives the same numbers.

Not always bit for bit: PyTorch's CPU kernels compute ``p + alpha * g`` with
a fused multiply-add (one rounding, not two), which Python before 3.13
cannot express. The results differ in the last bit at most, so they are
compared to 1e-13, far below any difference a wrong formula would make
(the first step, where no fused update applies, is compared exactly).
"""

from __future__ import annotations

import doctest
import random
from typing import Any

import numpy as np
import pytest

import chainrule.optim
from chainrule import Value
from chainrule.optim import SGD, Adam, LinearDecay


class Param:
    """A parameter of the Tensor engine's shape: .data and .grad arrays."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.grad: Any = 0.0


def _script(n_params: int, n_steps: int, seed: int) -> tuple[list[float], list[list[float]]]:
    rng = random.Random(seed)
    start = [rng.uniform(-2, 2) for _ in range(n_params)]
    grads = [[rng.gauss(0, 1) * 10 ** rng.uniform(-4, 2) for _ in range(n_params)]]
    for _ in range(n_steps - 1):
        grads.append([rng.gauss(0, 1) * 10 ** rng.uniform(-4, 2) for _ in range(n_params)])
    return start, grads


def _agree(ours: list[float], theirs: list[float]) -> bool:
    return len(ours) == len(theirs) and all(
        abs(a - b) <= 1e-13 * max(1.0, abs(b)) for a, b in zip(ours, theirs)
    )


def _torch_run(torch: Any, make: Any, start: list[float], grads: list[list[float]]) -> list[float]:
    p = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    opt = make([p])
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().tolist()


def _our_run(make: Any, start: list[float], grads: list[list[float]]) -> list[float]:
    params = [Value(x) for x in start]
    opt = make(params)
    for g in grads:
        for p, gi in zip(params, g):
            p.grad = gi
        opt.step()
    return [p.data for p in params]


SGD_CASES = [
    {"lr": 0.1},
    {"lr": 0.37, "momentum": 0.9},
    {"lr": 0.05, "weight_decay": 1e-2},
    {"lr": 0.2, "momentum": 0.5, "weight_decay": 1e-4},
    {"lr": 0.1, "momentum": 0.9, "nesterov": True},
]


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=str)
@pytest.mark.parametrize("steps", [1, 5])
def test_sgd_matches_torch_exactly(torch: Any, kwargs: dict[str, Any], steps: int) -> None:
    start, grads = _script(40, steps, seed=steps)
    theirs = _torch_run(torch, lambda ps: torch.optim.SGD(ps, **kwargs), start, grads)
    ours = _our_run(lambda ps: SGD(ps, **kwargs), start, grads)
    assert _agree(ours, theirs)


ADAM_CASES = [
    {},
    {"lr": 0.01},
    {"lr": 0.003, "betas": (0.8, 0.99), "eps": 1e-6},
    {"lr": 0.01, "weight_decay": 0.1},
]


@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=str)
@pytest.mark.parametrize("steps", [1, 7])
def test_adam_matches_torch_exactly(torch: Any, kwargs: dict[str, Any], steps: int) -> None:
    start, grads = _script(40, steps, seed=10 + steps)
    theirs = _torch_run(torch, lambda ps: torch.optim.Adam(ps, **kwargs), start, grads)
    ours = _our_run(lambda ps: Adam(ps, **kwargs), start, grads)
    if steps == 1:
        assert ours == theirs
    assert _agree(ours, theirs)


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3), "SGD"),
        (lambda ps: Adam(ps, lr=0.01, weight_decay=1e-3), "Adam"),
    ],
)
def test_array_parameters_match_torch(torch: Any, ours: Any, theirs: str) -> None:
    # The Tensor engine will hand the optimizers NumPy arrays.
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 4))
    grads = [rng.normal(size=(3, 4)) for _ in range(4)]
    p = Param(start.copy())
    opt = ours([p])
    for g in grads:
        p.grad = g.copy()
        opt.step()
    tp = torch.tensor(start, requires_grad=True)
    kwargs = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}
    if theirs == "Adam":
        kwargs = {"lr": 0.01, "weight_decay": 1e-3}
    topt = getattr(torch.optim, theirs)([tp], **kwargs)
    for g in grads:
        tp.grad = torch.tensor(g)
        topt.step()
    assert isinstance(p.data, np.ndarray) and p.data.shape == (3, 4)
    assert np.allclose(p.data, tp.detach().numpy(), rtol=1e-13, atol=1e-13)
    assert not np.allclose(p.data, start, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_on_arrays_is_the_formula_bit_for_bit(dtype: type) -> None:
    """After the first step Adam updates an array parameter's moments in
    place (optim._adam_in_place): the same numbers as the loop's formula on
    fresh arrays, step after step; the data is a new array each step."""
    rng = np.random.default_rng(4)
    start = rng.normal(size=(5, 3)).astype(dtype)
    grads = [rng.normal(size=(5, 3)).astype(dtype) for _ in range(4)]
    p = Param(start.copy())
    opt = Adam([p], lr=0.01, betas=(0.8, 0.95), eps=1e-6)
    data, m, v = start.copy(), 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        before = p.data
        p.grad = g
        opt.step()
        step_size, c2 = 0.01 / (1 - 0.8**t), (1 - 0.95**t) ** 0.5
        m = m + (1 - 0.8) * (g - m)
        v = v * 0.95 + (1 - 0.95) * g * g
        data = data - step_size * m / (v**0.5 / c2 + 1e-6)
        assert p.data is not before and p.data.dtype == dtype
        np.testing.assert_array_equal(p.data, data)
        np.testing.assert_array_equal(opt.m[0], m)
        np.testing.assert_array_equal(opt.v[0], v)


def test_momentum_buffer_is_not_the_gradient_array() -> None:
    p = Param(np.zeros(2))
    opt = SGD([p], lr=1.0, momentum=0.5)
    p.grad = np.array([1.0, 2.0])
    opt.step()
    p.grad += 100.0  # an engine accumulating into .grad in place
    assert opt.buffers[0].tolist() == [1.0, 2.0]


def test_plain_sgd_is_micrograds_update() -> None:
    w, b = Value(0.3), Value(-0.7)
    w.grad, b.grad = 0.25, -1.5
    SGD([w, b], lr=0.05).step()
    assert (w.data, b.data) == (0.3 - 0.05 * 0.25, -0.7 - 0.05 * -1.5)


def test_zero_grad_resets_every_parameter() -> None:
    params = [Value(1.0), Value(2.0)]
    (params[0] * params[1]).backward()
    opt = Adam(params)
    opt.zero_grad()
    assert [p.grad for p in params] == [0.0, 0.0]


def test_adam_first_step_moves_each_parameter_by_lr() -> None:
    # With bias correction the first step is lr * g / (|g| + eps): about lr.
    p = Value(1.0)
    p.grad = -3.0
    Adam([p], lr=0.01).step()
    assert p.data == pytest.approx(1.01, abs=1e-9)


def test_linear_decay_is_micrograds_schedule() -> None:
    opt = SGD([Value(0.0)], lr=1.0)
    schedule = LinearDecay(opt, total_steps=100, end_factor=0.1)
    seen = []
    for _ in range(100):
        seen.append(opt.lr)
        schedule.step()
    assert seen == [1.0 - 0.9 * k / 100 for k in range(100)]
    for _ in range(5):
        schedule.step()
    assert opt.lr == pytest.approx(0.1)  # holds at the end


def test_linear_decay_scales_the_base_rate() -> None:
    opt = Adam([Value(0.0)], lr=0.5)
    schedule = LinearDecay(opt, total_steps=4, end_factor=0.0)
    lrs = []
    for _ in range(4):
        schedule.step()
        lrs.append(opt.lr)
    assert lrs == [0.375, 0.25, 0.125, 0.0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: SGD([], lr=0.1),
        lambda: SGD([Value(1.0)], lr=-1.0),
        lambda: SGD([Value(1.0)], lr=float("nan")),
        lambda: SGD([Value(1.0)], momentum=-0.1),
        lambda: SGD([Value(1.0)], nesterov=True),
        lambda: Adam([Value(1.0)], betas=(1.0, 0.999)),
        lambda: Adam([Value(1.0)], eps=-1e-8),
        lambda: LinearDecay(SGD([Value(1.0)]), total_steps=0),
        lambda: LinearDecay(SGD([Value(1.0)]), total_steps=10, end_factor=2.0),
    ],
)
def test_bad_settings_raise_value_error(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_docstring_examples() -> None:
    result = doctest.testmod(chainrule.optim)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("make", [SGD, Adam])
@pytest.mark.parametrize("tensor", [False, True])
def test_a_gradient_with_a_graph_updates_by_its_value(make: Any, tensor: bool) -> None:
    """After backward(create_graph=True) .grad has a graph of its own; the
    step uses its values (PyTorch steps under no_grad): .data stays numbers."""
    runs = []
    for create_graph in (False, True):
        if tensor:
            from chainrule.tensor import Tensor

            w: Any = Tensor(np.array([2.0, -1.5]))
        else:
            w = Value(2.0)
        opt = make([w], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            loss = (w * w * w).sum() if tensor else w * w * w
            loss.backward(create_graph=create_graph)
            opt.step()
        assert type(w.data) is (np.ndarray if tensor else float)
        runs.append(np.array(w.data).tolist())
    assert runs[0] == runs[1] != ([2.0, -1.5] if tensor else 2.0)


@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: Adam(p)])
def test_params_cannot_be_rebound(make: Any) -> None:
    """Rebinding ``opt.params`` (to freeze one) would leave the state kept
    per position behind, and a compiled step and ``step()`` read different
    lists: one clear error instead."""
    w, b = Value(0.3), Value(0.1)
    opt = make([w, b])
    with pytest.raises(AttributeError, match="cannot be rebound"):
        opt.params = [w]
    assert opt.params == [w, b]
