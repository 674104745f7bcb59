"""Convolution, pooling and batch norm against PyTorch: values and
gradients over random shapes, strides, paddings, dilations and groups, in
float64 (to ~1e-10) and float32 (within float32's tolerance), second
derivatives at random points, and the errors for inputs that do not fit."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import chainrule.tensor as ct
from chainrule.tensor import Tensor, gradients
from chainrule.tensor.nn import BatchNorm2d
from tensor_oracle import assert_close, compare

F32 = {"rtol": 2e-4, "atol": 2e-4}


@st.composite
def conv_cases(draw: Any) -> dict[str, Any]:
    """A convolution that fits: groups dividing both channel counts, an
    input at least as large as the dilated kernel after padding."""
    groups = draw(st.integers(1, 3))
    cin = groups * draw(st.integers(1, 2))
    cout = groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    if draw(st.booleans()):
        stride: tuple[int, int] = (1, 1)
        padding: Any = draw(st.sampled_from(["same", "valid", 0, 1, (1, 2)]))
    else:
        stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        padding = draw(st.sampled_from([0, 1, 2, (0, 1), "valid"]))
    pad = (0, 0) if isinstance(padding, str) else np.broadcast_to(padding, 2)
    size = [
        d * (k - 1) + 1 - 2 * p + draw(st.integers(0, 4)) for k, d, p in zip(kernel, dilation, pad)
    ]
    return {
        "x": (draw(st.integers(1, 3)), cin, max(size[0], 1), max(size[1], 1)),
        "w": (cout, cin // groups, *kernel),
        "bias": draw(st.booleans()),
        "kw": {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups},
    }


def _fits(case: dict[str, Any]) -> bool:
    kw = case["kw"]
    pad = (0, 0) if isinstance(kw["padding"], str) else tuple(np.broadcast_to(kw["padding"], 2))
    if kw["padding"] == "same":
        return True
    return all(
        n + 2 * p >= d * (k - 1) + 1
        for n, p, d, k in zip(case["x"][2:], pad, kw["dilation"], case["w"][2:])
    )


def _torch_quiet(f: Any) -> Any:
    """``f``, silencing PyTorch's note that an even kernel with 'same'
    padding needs a padded copy (chainrule pads unevenly as it does)."""

    def run(*args: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return f(*args)

    return run


@settings(max_examples=60)
@given(case=conv_cases(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_matches_torch_float64(torch: Any, case: dict[str, Any], seed: int) -> None:
    assume(_fits(case))
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(case["x"]), rng.standard_normal(case["w"])]
    if case["bias"]:
        arrays.append(rng.standard_normal(case["w"][0]))
    kw = case["kw"]
    compare(
        torch,
        lambda *a: ct.conv2d(*a, **kw),
        _torch_quiet(lambda *a: torch.nn.functional.conv2d(*a, **kw)),
        arrays,
        seed,
    )


@settings(max_examples=25)
@given(case=conv_cases(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_matches_torch_float32(torch: Any, case: dict[str, Any], seed: int) -> None:
    assume(_fits(case))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case["x"]).astype(np.float32)
    w = rng.standard_normal(case["w"]).astype(np.float32)
    kw = case["kw"]
    X, W = Tensor(x), Tensor(w)
    y = ct.conv2d(X, W, **kw)
    assert y.dtype == np.float32
    g = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(g)
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    ty = _torch_quiet(lambda: torch.nn.functional.conv2d(tx, tw, **kw))()
    ty.backward(torch.tensor(g))
    assert_close(y.data, ty.detach().numpy(), "value", **F32)
    assert X.grad is not None and X.grad.dtype == np.float32
    assert_close(X.grad, tx.grad.numpy(), "input gradient", **F32)
    assert_close(W.grad, tw.grad.numpy(), "weight gradient", **F32)


@settings(max_examples=30)
@given(
    n=st.integers(1, 3),
    cin=st.integers(1, 3),
    length=st.integers(3, 9),
    k=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 1),
    dilation=st.integers(1, 2),
    seed=st.integers(0, 2**32 - 1),
)
def test_conv1d_matches_torch(
    torch: Any,
    n: int,
    cin: int,
    length: int,
    k: int,
    stride: int,
    padding: int,
    dilation: int,
    seed: int,
) -> None:
    assume(length + 2 * padding >= dilation * (k - 1) + 1)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((n, cin, length)), rng.standard_normal((2, cin, k))]
    arrays.append(rng.standard_normal(2))
    kw = {"stride": stride, "padding": padding, "dilation": dilation}
    compare(
        torch,
        lambda *a: ct.conv1d(*a, **kw),
        lambda *a: torch.nn.functional.conv1d(*a, **kw),
        arrays,
        seed,
    )


@st.composite
def pool_cases(draw: Any) -> dict[str, Any]:
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.sampled_from([None, 1, 2, (1, 2), (3, 1)]))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    size = [k + draw(st.integers(0, 5)) for k in kernel]
    return {
        "x": (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *size),
        "kw": {"kernel_size": kernel, "stride": stride, "padding": padding},
    }


def _distinct(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values without ties (a tie's gradient is the first pick's in both)."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.37 - 3.0


@settings(max_examples=60)
@given(case=pool_cases(), dilation=st.integers(1, 2), seed=st.integers(0, 2**32 - 1))
def test_max_pool2d_matches_torch(
    torch: Any, case: dict[str, Any], dilation: int, seed: int
) -> None:
    kw = dict(case["kw"], dilation=dilation)
    sizes = zip(case["x"][2:], kw["padding"], kw["kernel_size"])
    assume(all(n + 2 * p >= dilation * (k - 1) + 1 for n, p, k in sizes))
    x = _distinct(case["x"], np.random.default_rng(seed))
    compare(
        torch,
        lambda a: ct.max_pool2d(a, **kw),
        lambda a: torch.nn.functional.max_pool2d(a, **kw),
        [x],
        seed,
    )


def test_max_pool2d_ties_and_nan_pick_as_torch(torch: Any) -> None:
    # ties: the first largest; nan: the last nan of the window (PyTorch's scan)
    x = np.array([[[[1.0, 1.0, np.nan, 2.0], [1.0, 0.0, 5.0, np.nan]]]])
    compare(
        torch,
        lambda a: ct.max_pool2d(a, 2, stride=1),
        lambda a: torch.nn.functional.max_pool2d(a, 2, stride=1),
        [x],
    )


@settings(max_examples=40)
@given(case=pool_cases(), seed=st.integers(0, 2**32 - 1))
def test_avg_pool2d_matches_torch(torch: Any, case: dict[str, Any], seed: int) -> None:
    x = np.random.default_rng(seed).standard_normal(case["x"])
    kw = case["kw"]
    compare(
        torch,
        lambda a: ct.avg_pool2d(a, **kw),
        lambda a: torch.nn.functional.avg_pool2d(a, **kw),
        [x],
        seed,
    )


@pytest.mark.parametrize("out", [1, (1, 1), (2, 3), (3, 1)])
def test_adaptive_avg_pool2d_matches_torch(torch: Any, out: Any) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6))
    compare(
        torch,
        lambda a: ct.adaptive_avg_pool2d(a, out),
        lambda a: torch.nn.functional.adaptive_avg_pool2d(a, out),
        [x],
    )


@settings(max_examples=40)
@given(
    shape=st.sampled_from([(4, 3), (2, 3, 5), (3, 2, 4, 4), (1, 5, 2, 3), (8, 16, 2, 2)]),
    affine=st.sampled_from(["none", "weight", "both"]),
    training=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_batch_norm_matches_torch(
    torch: Any, shape: tuple[int, ...], affine: str, training: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    C = shape[1]
    arrays = [rng.standard_normal(shape) * 3.0 + 1.0]
    if affine != "none":
        arrays.append(rng.standard_normal(C))
    if affine == "both":
        arrays.append(rng.standard_normal(C))
    mean, var = rng.standard_normal(C), rng.random(C) + 0.5
    ours_stats, torch_stats = (mean.copy(), var.copy()), (torch.tensor(mean), torch.tensor(var))
    compare(
        torch,
        lambda x, *p: ct.batch_norm(x, *ours_stats, *p, training=training, momentum=0.3),
        lambda x, *p: torch.nn.functional.batch_norm(
            x, *torch_stats, *p, training=training, momentum=0.3
        ),
        arrays,
        seed,
    )
    # the running statistics moved alike (or not at all, in evaluation)
    assert_close(ours_stats[0], torch_stats[0].numpy(), "running mean")
    assert_close(ours_stats[1], torch_stats[1].numpy(), "running variance")


# ----------------------------------------------------------------------------
# second derivatives: create_graph gradients differentiated again
# ----------------------------------------------------------------------------


def _second(torch: Any, ours: Any, theirs: Any, arrays: list[np.ndarray], seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs = [Tensor(a.copy()) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = ours(*xs), _torch_quiet(theirs)(*txs)
    u = rng.standard_normal(y.shape)
    first = gradients(y, xs, u, create_graph=True)
    tfirst = torch.autograd.grad(ty, txs, torch.tensor(u), create_graph=True)
    vs = [rng.standard_normal(a.shape) for a in arrays]
    inner = ct.sum(ct.stack([((g * g).tanh() * v).sum() for g, v in zip(first, vs)]))
    tinner = sum(((g * g).tanh() * torch.tensor(v)).sum() for g, v in zip(tfirst, vs))
    second = gradients(inner, xs)
    tsecond = torch.autograd.grad(tinner, txs, allow_unused=True)
    for i, (h, th) in enumerate(zip(second, tsecond)):
        expected = np.zeros(h.shape) if th is None else th.numpy()
        assert_close(h, expected, f"second derivative, input {i}", 1e-9, 1e-11)


@settings(max_examples=12)
@given(case=conv_cases(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_second_derivatives_match_torch(torch: Any, case: dict[str, Any], seed: int) -> None:
    assume(_fits(case))
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(case["x"]), rng.standard_normal(case["w"])]
    kw = case["kw"]
    _second(
        torch,
        lambda x, w: ct.conv2d(x, w, **kw),
        lambda x, w: torch.nn.functional.conv2d(x, w, **kw),
        arrays,
        seed,
    )


@settings(max_examples=12)
@given(case=pool_cases(), seed=st.integers(0, 2**32 - 1))
def test_pooling_second_derivatives_match_torch(
    torch: Any, case: dict[str, Any], seed: int
) -> None:
    x = _distinct(case["x"], np.random.default_rng(seed))
    kw = case["kw"]
    for ours, theirs in (
        (ct.max_pool2d, torch.nn.functional.max_pool2d),
        (ct.avg_pool2d, torch.nn.functional.avg_pool2d),
    ):
        _second(
            torch,
            lambda a, f=ours: f(a, **kw) * a.sum(),
            lambda a, f=theirs: f(a, **kw) * a.sum(),
            [x],
            seed,
        )


@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 4, 4)])
def test_batch_norm_second_derivatives_match_torch(torch: Any, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    arrays = [
        rng.standard_normal(shape),
        rng.standard_normal(shape[1]),
        rng.standard_normal(shape[1]),
    ]
    _second(
        torch,
        lambda x, w, b: ct.batch_norm(x, None, None, w, b, training=True),
        lambda x, w, b: torch.nn.functional.batch_norm(x, None, None, w, b, training=True),
        arrays,
        5,
    )


def test_a_constant_input_gets_no_gradient_and_costs_none() -> None:
    w = Tensor(np.ones((2, 1, 3, 3)))
    y = ct.conv2d(np.ones((1, 1, 4, 4)), w, padding=1)
    (y * y).sum().backward()
    assert w.grad is not None and w.grad.shape == (2, 1, 3, 3)
    assert y._prev[0].grad is None and not y._prev[0].requires_grad


# ----------------------------------------------------------------------------
# errors: one line naming the op and the shapes
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: ct.conv2d(np.ones((1, 3, 5, 5)), Tensor(np.ones((2, 2, 3, 3)))),
            ValueError,
            r"conv2d: input \(1, 3, 5, 5\) has 3 channels, weight \(2, 2, 3, 3\) with groups=1 "
            r"takes 2",
        ),
        (
            lambda: ct.conv2d(np.ones((3, 5, 5)), Tensor(np.ones((2, 3, 3, 3)))),
            ValueError,
            r"conv2d: expected input \(N, C, H, W\).*got input \(3, 5, 5\)",
        ),
        (
            lambda: ct.conv2d(np.ones((1, 1, 2, 2)), Tensor(np.ones((1, 1, 3, 3)))),
            ValueError,
            r"conv2d: input \(1, 1, 2, 2\) .* smaller than the kernel \(3, 3\)",
        ),
        (
            lambda: ct.conv2d(np.ones((1, 4, 5, 5)), Tensor(np.ones((3, 2, 3, 3))), groups=2),
            ValueError,
            r"weight \(3, 2, 3, 3\) has 3 output channels, not a multiple of groups=2",
        ),
        (
            lambda: ct.conv2d(np.ones((1, 1, 5, 5)), Tensor(np.ones((1, 1, 3, 3))), stride=0),
            ValueError,
            r"conv2d: stride must be an int >= 1",
        ),
        (
            lambda: ct.conv2d(
                np.ones((1, 1, 5, 5)), Tensor(np.ones((1, 1, 3, 3))), stride=2, padding="same"
            ),
            ValueError,
            r"padding='same' needs stride 1",
        ),
        (
            lambda: ct.conv2d(Tensor(np.ones((1, 1, 5, 5))), Tensor(np.ones((1, 1, 3, 3)), "f4")),
            TypeError,
            r"conv2d: input is float64 but weight is float32",
        ),
        (
            lambda: ct.conv2d(
                np.ones((1, 1, 5, 5)), Tensor(np.ones((2, 1, 3, 3))), Tensor(np.ones(3))
            ),
            ValueError,
            r"conv2d: bias \(3,\) does not fit weight \(2, 1, 3, 3\)",
        ),
        (
            lambda: ct.conv1d(np.ones((1, 2, 5, 5)), Tensor(np.ones((1, 2, 3)))),
            ValueError,
            r"conv1d: expected input \(N, C, L\)",
        ),
        (
            lambda: ct.max_pool2d(np.ones((1, 4, 4)), 2),
            ValueError,
            r"max_pool2d: expected input \(N, C, H, W\), got shape \(1, 4, 4\)",
        ),
        (
            lambda: ct.max_pool2d(np.ones((1, 1, 4, 4)), 2, padding=2),
            ValueError,
            r"max_pool2d: padding \(2, 2\) must be at most half the kernel",
        ),
        (
            lambda: ct.avg_pool2d(np.ones((1, 1, 2, 2)), 3),
            ValueError,
            r"avg_pool2d: input \(1, 1, 2, 2\) .* smaller than the kernel \(3, 3\)",
        ),
        (
            lambda: ct.adaptive_avg_pool2d(np.ones((1, 1, 5, 5)), 2),
            ValueError,
            r"adaptive_avg_pool2d: output size \(2, 2\) does not divide the input's \(5, 5\)",
        ),
        (
            lambda: ct.batch_norm(
                np.ones((2, 3, 4)), None, None, Tensor(np.ones(4)), training=True
            ),
            ValueError,
            r"batch_norm: weight of shape \(4,\) does not fit input \(2, 3, 4\) \(3 channels\)",
        ),
        (
            lambda: ct.batch_norm(np.ones((1, 3, 1, 1)), None, None, training=True),
            ValueError,
            r"batch_norm: training needs more than one value per channel",
        ),
        (
            lambda: ct.batch_norm(np.ones((2, 3)), None, None),
            ValueError,
            r"batch_norm: evaluation needs running_mean and running_var",
        ),
    ],
)
def test_mismatches_name_the_op_and_the_shapes(call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    "name",
    ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm_train", "batch_norm_eval"],
)
def test_pooling_and_batch_norm_in_float32_match_torch(torch: Any, name: str) -> None:
    """float32 in, float32 out and float32 gradients, within float32's
    tolerance of PyTorch's float32."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 6, 6)).astype(np.float32)
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32) * 2
    F = torch.nn.functional
    ours, theirs = {
        "max_pool2d": (lambda a: ct.max_pool2d(a, 3, 2, 1), lambda a: F.max_pool2d(a, 3, 2, 1)),
        "avg_pool2d": (lambda a: ct.avg_pool2d(a, 2), lambda a: F.avg_pool2d(a, 2)),
        "adaptive_avg_pool2d": (
            lambda a: ct.adaptive_avg_pool2d(a, (2, 3)),
            lambda a: F.adaptive_avg_pool2d(a, (2, 3)),
        ),
        "batch_norm_train": (
            lambda a: ct.batch_norm(a, None, None, training=True),
            lambda a: F.batch_norm(a, None, None, training=True),
        ),
        "batch_norm_eval": (
            lambda a: ct.batch_norm(a, mean, var),
            lambda a: F.batch_norm(a, torch.tensor(mean), torch.tensor(var)),
        ),
    }[name]
    X = Tensor(x)
    y = ours(X)
    g = rng.standard_normal(y.shape).astype(np.float32)
    y.backward(g)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    ty.backward(torch.tensor(g))
    assert y.dtype == np.float32 and X.grad is not None and X.grad.dtype == np.float32
    assert_close(y.data, ty.detach().numpy(), f"{name} value", **F32)
    assert_close(X.grad, tx.grad.numpy(), f"{name} gradient", **F32)


# ----------------------------------------------------------------------------
# non-finite entries: nan and infinities where PyTorch float64 has them
# ----------------------------------------------------------------------------


def _spoil(draw: Any, a: np.ndarray) -> np.ndarray:
    """``a`` with up to three entries made nan, inf or -inf."""
    a = a.copy()
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.integers(0, a.size - 1))
        a.reshape(-1)[where] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return a


def _non_finite(
    torch: Any,
    ours: Any,
    theirs: Any,
    arrays: list[np.ndarray],
    spoil: Callable[[np.ndarray], np.ndarray],
    seed: int,
) -> None:
    """Value, first derivatives for an output gradient that may hold nan
    and infinities too, and second derivatives (of a sum of the first ones
    times random weights), ours against PyTorch float64's."""
    rng = np.random.default_rng(seed)
    xs = [Tensor(a.copy()) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = ours(*xs), _torch_quiet(theirs)(*txs)
    assert_close(y.data, ty.detach().numpy(), "value")
    u = spoil(rng.standard_normal(y.shape))
    first = gradients(y, xs, u, create_graph=True)
    tfirst = torch.autograd.grad(ty, txs, torch.tensor(u), create_graph=True)
    for i, (g, tg) in enumerate(zip(first, tfirst)):
        assert_close(g.data, tg.detach().numpy(), f"first derivative, input {i}")
    vs = [rng.standard_normal(a.shape) for a in arrays]
    inner = ct.sum(ct.stack([(g * g * v).sum() for g, v in zip(first, vs)]))
    tinner = sum((g * g * torch.tensor(v)).sum() for g, v in zip(tfirst, vs))
    second = gradients(inner, xs)
    tsecond = torch.autograd.grad(tinner, txs, allow_unused=True)
    for i, (h, th) in enumerate(zip(second, tsecond)):
        expected = np.zeros(h.shape) if th is None else th.numpy()
        assert_close(h, expected, f"second derivative, input {i}", 1e-9, 1e-11)


@settings(max_examples=100, deadline=None)
@given(case=conv_cases(), one_d=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_conv_with_non_finite_entries_is_pytorchs(
    torch: Any, case: dict[str, Any], one_d: bool, seed: int, data: Any
) -> None:
    """conv2d and conv1d with nan and infinities in the input, the weight
    or the output gradient: values, first and second derivatives with the
    nan and infinities where PyTorch float64 has them (no 0 * nan that
    PyTorch never forms: a zero-padded transposed convolution formed them)."""
    kw = dict(case["kw"])
    xs, ws = case["x"], case["w"]
    if one_d:  # the width of the 2-D case, PyTorch's conv1d arguments
        xs, ws = (xs[0], xs[1], xs[3]), (ws[0], ws[1], ws[3])
        kw = {k: v[1] if isinstance(v, tuple) else v for k, v in kw.items()}
        p = 0 if isinstance(kw["padding"], str) else kw["padding"]
        assume(kw["padding"] == "same" or xs[2] + 2 * p >= kw["dilation"] * (ws[2] - 1) + 1)
    else:
        assume(_fits(case))
    rng = np.random.default_rng(seed)
    arrays = [
        _spoil(data.draw, rng.standard_normal(xs)),
        _spoil(data.draw, rng.standard_normal(ws)),
    ]
    ours = ct.conv1d if one_d else ct.conv2d
    theirs = torch.nn.functional.conv1d if one_d else torch.nn.functional.conv2d
    _non_finite(
        torch,
        lambda *a: ours(*a, **kw),
        lambda *a: theirs(*a, **kw),
        arrays,
        lambda a: _spoil(data.draw, a),
        seed,
    )


def test_conv1d_nan_tap_at_stride_1_is_pytorchs(torch: Any) -> None:
    """The probe's case, one nan kernel tap at stride 1: PyTorch's input
    gradient is finite where that tap reads nothing; and d/dx of
    ``sum(dw ** 2)`` with a nan input is finite where PyTorch's is."""
    x, w = np.array([[[1.0, 2.0, -1.0, 0.5]]]), np.array([[[0.5, np.nan]]])
    X, W = Tensor(x), Tensor(w)
    ct.conv1d(X, W).sum().backward()
    assert_close(X.grad, np.array([[[0.5, np.nan, np.nan, np.nan]]]), "input gradient")
    _non_finite(torch, ct.conv1d, torch.nn.functional.conv1d, [x, w], lambda a: a, 0)
    x[0, 0, 3] = np.nan
    _non_finite(torch, ct.conv1d, torch.nn.functional.conv1d, [x, w], lambda a: a, 1)


def _inside(n: int, k: int, s: int, p: int, d: int) -> bool:
    """Every window along an axis has an entry inside the input (PyTorch
    reads and writes past the input where one has none)."""
    outs = (n + 2 * p - d * (k - 1) - 1) // s + 1
    return outs >= 1 and all(any(0 <= o * s - p + j * d < n for j in range(k)) for o in range(outs))


@settings(max_examples=100, deadline=None)
@given(
    case=pool_cases(),
    dilation=st.integers(1, 2),
    mostly=st.sampled_from([None, -np.inf]),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_pooling_with_non_finite_entries_is_pytorchs(
    torch: Any, case: dict[str, Any], dilation: int, mostly: Any, seed: int, data: Any
) -> None:
    """max_pool2d (dilated too) and avg_pool2d with nan and infinities in
    the input (or mostly -inf: windows of nothing but -inf and padding) and
    in the output gradient: values, first and second derivatives as PyTorch
    float64's."""
    kw = case["kw"]
    stride = kw["stride"] if kw["stride"] is not None else kw["kernel_size"]
    stride = np.broadcast_to(stride, 2)
    for n, k, s, p in zip(case["x"][2:], kw["kernel_size"], stride, kw["padding"]):
        assume(_inside(n, k, int(s), p, dilation))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case["x"])
    if mostly is not None:
        x[rng.random(x.shape) < 0.7] = mostly
    x = _spoil(data.draw, x)
    for ours, theirs, extra in (
        (ct.max_pool2d, torch.nn.functional.max_pool2d, {"dilation": dilation}),
        (ct.avg_pool2d, torch.nn.functional.avg_pool2d, {}),
    ):
        _non_finite(
            torch,
            lambda a, f=ours, e=extra: f(a, **kw, **e),
            lambda a, f=theirs, e=extra: f(a, **kw, **e),
            [x],
            lambda a: _spoil(data.draw, a),
            seed,
        )


def test_max_pool2d_window_of_only_minus_inf_and_padding_is_pytorchs(torch: Any) -> None:
    """Windows of a padding row and a -inf entry pick that entry (PyTorch's
    scan starts at the first entry inside the input), not whatever lies
    before the padding in memory."""
    x = np.array([-np.inf, 0.5, -np.inf, -np.inf, -np.inf]).reshape(1, 1, 1, 5)
    kw = {"kernel_size": (2, 1), "stride": 2, "padding": (1, 0)}
    X = Tensor(x)
    ct.max_pool2d(X, **kw).sum().backward()
    assert X.grad is not None
    assert X.grad.ravel().tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    compare(
        torch,
        lambda a: ct.max_pool2d(a, **kw),
        lambda a: torch.nn.functional.max_pool2d(a, **kw),
        [x],
    )


# ----------------------------------------------------------------------------
# momentum=None, empty batches, running statistics of the wrong kind
# ----------------------------------------------------------------------------


def test_batch_norm2d_momentum_none_is_pytorchs_cumulative_average(torch: Any) -> None:
    """``BatchNorm2d(momentum=None)``: the running statistics are the plain
    average of every training batch's so far, as PyTorch's (it raised a
    TypeError on the first training forward)."""
    ours, theirs = BatchNorm2d(3, momentum=None), torch.nn.BatchNorm2d(3, momentum=None)
    theirs.double()
    rng = np.random.default_rng(3)
    for _ in range(4):
        x = rng.standard_normal((4, 3, 2, 2)) * 2.0 + 1.0
        y, ty = ours(Tensor(x)), theirs(torch.tensor(x))
        assert_close(y.data, ty.detach().numpy(), "value")
    assert_close(ours.running_mean, theirs.running_mean.numpy(), "running mean")
    assert_close(ours.running_var, theirs.running_var.numpy(), "running variance")
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 4
    ours.eval()
    theirs.eval()
    x = rng.standard_normal((2, 3, 2, 2))
    assert_close(ours(Tensor(x)).data, theirs(torch.tensor(x)).detach().numpy(), "evaluation")
    assert "momentum=None" in repr(ours)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: ct.batch_norm(np.ones((4, 3)), np.zeros(3), np.ones(3), training=True,
                                  momentum=None),
            TypeError,
            "batch_norm: momentum must be a float in [0, 1], got None (the cumulative average is "
            "BatchNorm2d(momentum=None)'s, which counts the batches)",
        ),
        (
            lambda: ct.batch_norm(np.ones((4, 3)), None, None, training=True, momentum=1.5),
            ValueError,
            "batch_norm: momentum must be a float in [0, 1], got 1.5",
        ),
        (
            lambda: ct.batch_norm(np.ones((4, 3)), np.zeros(3, dtype=int), np.ones(3),
                                  training=True),
            TypeError,
            "batch_norm: running_mean must be a float array, got int64: give it the input's "
            "dtype (e.g. np.zeros(C))",
        ),
        (
            lambda: ct.batch_norm(np.ones((4, 3)), np.zeros(3), [1.0, 1.0, 1.0], training=True),
            TypeError,
            "batch_norm: running_var must be a NumPy float array (it is updated in place), "
            "got list",
        ),
        (
            lambda: ct.batch_norm(np.ones((4, 3)), [0.0, 0.0, 0.0], np.ones(3)),
            TypeError,
            "batch_norm: running_mean must be a NumPy float array (it is updated in place), "
            "got list",
        ),
        (
            lambda: BatchNorm2d(3, momentum=-0.1),
            ValueError,
            "BatchNorm2d: momentum must be a float in [0, 1] or None (the cumulative average), "
            "got -0.1",
        ),
    ],
)  # fmt: skip
def test_batch_norm_arguments_are_refused_in_one_line(call: Any, error: type, message: str) -> None:
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "kw",
    [{}, {"stride": 2, "padding": 1}, {"groups": 3, "padding": "same"}, {"dilation": 2}],
)
def test_an_empty_batch_gives_an_empty_output_as_pytorch(torch: Any, kw: dict[str, Any]) -> None:
    """conv2d, conv1d and the poolings of a batch of 0 images: an empty
    output of PyTorch's shape, and empty (or zero) gradients."""
    w = np.random.default_rng(0).standard_normal((3, 3 // kw.get("groups", 1), 3, 3))
    y = compare(
        torch,
        lambda a, b: ct.conv2d(a, b, **kw),
        lambda a, b: torch.nn.functional.conv2d(a, b, **kw),
        [np.zeros((0, 3, 7, 7)), w],
    )
    assert y.shape[0] == 0
    compare(
        torch,
        lambda a, b: ct.conv1d(a, b, **kw),
        lambda a, b: torch.nn.functional.conv1d(a, b, **kw),
        [np.zeros((0, 3, 7)), w[..., 0]],
    )
    for ours, theirs in (
        (ct.max_pool2d, torch.nn.functional.max_pool2d),
        (ct.avg_pool2d, torch.nn.functional.avg_pool2d),
    ):
        compare(
            torch, lambda a, f=ours: f(a, 2), lambda a, f=theirs: f(a, 2), [np.zeros((0, 2, 4, 4))]
        )
