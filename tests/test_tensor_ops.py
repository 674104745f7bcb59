"""Every Tensor op's value and gradient equal PyTorch float64's, over
broadcasting shape combinations drawn by hypothesis."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import chainrule.tensor as ct
from chainrule import Tensor
from tensor_oracle import compare

EXAMPLES = settings(max_examples=20)


def floats(lo: float = -3.0, hi: float = 3.0) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def array(shape: tuple[int, ...], lo: float = -3.0, hi: float = 3.0) -> st.SearchStrategy[Any]:
    return hnp.arrays(np.float64, shape, elements=floats(lo, hi))


@st.composite
def broadcast_pair(draw: st.DrawFn, lo: float = -3.0, hi: float = 3.0) -> tuple[Any, Any]:
    """Two arrays whose shapes broadcast together: (3,1)+(1,4), (2,3,4)+(4,),
    () + (2,2), ..."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a, b = shapes.input_shapes
    return draw(array(a, lo, hi)), draw(array(b, lo, hi))


# ----------------------------------------------------------------------------
# binary arithmetic
# ----------------------------------------------------------------------------

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@EXAMPLES
@given(pair=broadcast_pair())
def test_binary_tensor_tensor(torch: Any, op: str, pair: tuple[Any, Any]) -> None:
    a, b = pair
    if op == "/":
        b = np.where(np.abs(b) < 0.1, 0.5, b)
    f = BINARY[op]
    compare(torch, f, f, [a, b])


@EXAMPLES
@given(pair=broadcast_pair())
def test_pow_tensor_tensor(torch: Any, pair: tuple[Any, Any]) -> None:
    a, b = pair
    base = np.abs(a) + 0.1
    compare(torch, operator.pow, operator.pow, [base, b])


@pytest.mark.parametrize("op", [*sorted(BINARY), "**"])
@EXAMPLES
@given(pair=broadcast_pair(0.2, 3.0), scalar=floats(0.2, 3.0), kind=st.sampled_from("fnia"))
def test_binary_with_constant(torch: Any, op: str, pair: Any, scalar: float, kind: str) -> None:
    """A Tensor with a Python float or int, a NumPy scalar, or an array, on
    either side."""
    x, arr = pair
    const: Any = {
        "f": scalar,
        "n": np.float64(scalar),
        "i": int(scalar) + 1,
        "a": arr,
    }[kind]
    f = BINARY.get(op, operator.pow)
    tconst = torch.tensor(const) if kind == "a" else const
    compare(torch, lambda t: f(t, const), lambda t: f(t, tconst), [x])
    compare(torch, lambda t: f(const, t), lambda t: f(tconst, t), [x])


def test_pow_special_cases(torch: Any) -> None:
    x = np.array([0.0, 0.0, 2.0, -1.5, 0.5])
    e = np.array([0.0, 2.0, 0.0, 2.0, -1.0])
    compare(torch, operator.pow, operator.pow, [x, e])
    for c in (0.0, 2.0, 3.0, -1.0, 0.5):
        compare(torch, lambda t, c=c: t**c, lambda t, c=c: t**c, [x])
    compare(torch, lambda t: 0.0**t, lambda t: 0.0**t, [np.array([0.0, 1.0, -1.0])])


# ----------------------------------------------------------------------------
# unary functions
# ----------------------------------------------------------------------------

UNARY = {
    "exp": (lambda t: t.exp(), lambda t: t.exp(), -3.0),
    "log": (lambda t: t.log(), lambda t: t.log(), 0.05),
    "sqrt": (lambda t: t.sqrt(), lambda t: t.sqrt(), 0.05),
    "tanh": (lambda t: t.tanh(), lambda t: t.tanh(), -3.0),
    "sigmoid": (lambda t: t.sigmoid(), lambda t: t.sigmoid(), -3.0),
    "relu": (lambda t: t.relu(), lambda t: t.relu(), -3.0),
    "abs": (lambda t: abs(t), lambda t: abs(t), -3.0),
    "neg": (lambda t: -t, lambda t: -t, -3.0),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@EXAMPLES
@given(data=st.data())
def test_unary(torch: Any, name: str, data: st.DataObject) -> None:
    ours, theirs, lo = UNARY[name]
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    x = data.draw(array(shape, lo, 3.0))
    compare(torch, ours, theirs, [x])


def test_unary_edge_values(torch: Any) -> None:
    """inf and nan where PyTorch gives them: log 0, sqrt of a negative, exp
    overflow, relu of nan."""
    x = np.array([0.0, -1.0, 1e-300, 800.0, -800.0, np.nan, np.inf])
    for name in ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs"):
        ours, theirs, _ = UNARY[name]
        with np.errstate(all="ignore"):
            compare(torch, ours, theirs, [x])


# ----------------------------------------------------------------------------
# matmul
# ----------------------------------------------------------------------------


@EXAMPLES
@given(data=st.data())
def test_matmul_batched_broadcast(torch: Any, data: st.DataObject) -> None:
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    a = data.draw(array((*batch.input_shapes[0], n, k)))
    b = data.draw(array((*batch.input_shapes[1], k, m)))
    compare(torch, operator.matmul, operator.matmul, [a, b])
    compare(torch, lambda t: t @ b, lambda t: t @ torch.tensor(b), [a])
    compare(torch, lambda t: a @ t, lambda t: torch.tensor(a) @ t, [b])


@pytest.mark.parametrize(
    "sa,sb", [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((4, 2, 3), (3,)), ((3,), (4, 3, 2))]
)
def test_matmul_vectors(torch: Any, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    compare(torch, operator.matmul, operator.matmul, [rng.normal(size=sa), rng.normal(size=sb)])


@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(torch: Any, shape: tuple[int, ...], bias: bool) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.normal(size=shape), rng.normal(size=(2, 3))]
    if bias:
        arrays.append(rng.normal(size=2))
    compare(torch, ct.linear, torch.nn.functional.linear, arrays)


# ----------------------------------------------------------------------------
# reductions
# ----------------------------------------------------------------------------


@st.composite
def array_and_axis(draw: st.DrawFn) -> tuple[Any, Any]:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    x = draw(array(shape))
    axis = draw(
        st.one_of(
            st.none(),
            st.integers(-len(shape), len(shape) - 1),
            st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True).map(tuple),
        )
    )
    return x, axis


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@pytest.mark.parametrize("keepdims", [False, True])
@EXAMPLES
@given(xa=array_and_axis())
def test_reductions(torch: Any, name: str, keepdims: bool, xa: tuple[Any, Any]) -> None:
    x, axis = xa
    dim = tuple(range(x.ndim)) if axis is None else axis
    theirs = {
        "sum": lambda t: t.sum(dim=dim, keepdim=keepdims),
        "mean": lambda t: t.mean(dim=dim, keepdim=keepdims),
        "max": lambda t: t.amax(dim=dim, keepdim=keepdims),
    }[name]
    compare(torch, lambda t: getattr(t, name)(axis=axis, keepdims=keepdims), theirs, [x])


def test_max_ties_share_the_gradient(torch: Any) -> None:
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    y = compare(torch, lambda t: t.max(axis=1), lambda t: t.amax(dim=1), [x])
    assert y.data.tolist() == [3.0, 2.0]
    compare(torch, lambda t: t.max(), lambda t: t.max(), [x])


EYE = np.eye(2, 4, dtype=bool)
NONFINITE = {
    "relu": (lambda t: t.relu(), lambda t: t.relu()),
    "abs": (lambda t: abs(t), lambda t: abs(t)),
    "max(axis=1)": (lambda t: t.max(axis=1), lambda t: t.amax(dim=1)),
    "max(axis=0)": (lambda t: t.max(axis=0), lambda t: t.amax(dim=0)),
    "max()": (lambda t: t.max(), lambda t: t.max()),
    "masked_fill": (
        lambda t: ct.masked_fill(t, EYE, 0.0),
        lambda t: t.masked_fill(t.new_tensor(EYE).bool(), 0.0),
    ),
}


@pytest.mark.parametrize("name", sorted(NONFINITE))
def test_nan_and_inf_flowing_in(torch: Any, name: str) -> None:
    """A nan or inf upstream gradient and nan or inf entries, through the
    ops that mask or route gradients: PyTorch's relu backward is a
    ``where`` (a dead unit gets 0, not nan), amax's a product (nan spreads
    over the slice), max()'s a masked fill."""
    ours, theirs = NONFINITE[name]
    x = np.array([[-1.0, 0.0, 2.0, 2.0], [np.nan, -np.inf, np.inf, 0.5]])
    t, tt = Tensor(x.copy()), torch.tensor(x, requires_grad=True)
    y, ty = ours(t), theirs(tt)
    g = np.resize([np.nan, np.inf, -np.inf, 1.0, 2.0], y.data.shape)
    with np.errstate(all="ignore"):
        y.backward(g)
    ty.backward(torch.tensor(g))
    assert t.grad is not None
    np.testing.assert_array_equal(y.data, ty.detach().numpy())
    np.testing.assert_array_equal(t.grad, tt.grad.numpy())


# ----------------------------------------------------------------------------
# shapes and indexing
# ----------------------------------------------------------------------------


def test_reshape_transpose(torch: Any) -> None:
    x = np.random.default_rng(2).normal(size=(2, 3, 4))
    compare(torch, lambda t: t.reshape(4, 6), lambda t: t.reshape(4, 6), [x])
    compare(torch, lambda t: t.reshape((-1,)), lambda t: t.reshape(-1), [x])
    compare(torch, lambda t: t.transpose(2, 0, 1), lambda t: t.permute(2, 0, 1), [x])
    compare(torch, lambda t: t.T, lambda t: t.permute(2, 1, 0), [x])
    compare(torch, lambda t: ct.swapaxes(t, 0, 2), lambda t: t.transpose(0, 2), [x])


@pytest.mark.parametrize(
    "index",
    [
        (1,),
        (slice(None), 2),
        (slice(0, 2), slice(None, None, -1)),
        (Ellipsis, 1),
        (None, 0),
        ([0, 0, 2, 0],),
        (slice(None), [3, 3, 1]),
        ([1, 0], [2, 2]),
    ],
    ids=str,
)
def test_getitem(torch: Any, index: tuple[Any, ...]) -> None:
    """Slicing and integer-array indexing; a repeated index accumulates."""
    x = np.random.default_rng(3).normal(size=(3, 4))
    if any(isinstance(i, slice) and i.step == -1 for i in index):
        # torch has no negative steps: flip instead
        compare(torch, lambda t: t[index], lambda t: t[0:2].flip(1), [x])
        return
    tindex = tuple(torch.tensor(i) if isinstance(i, list) else i for i in index)
    compare(torch, lambda t: t[index], lambda t: t[tindex], [x])


def test_getitem_boolean_mask(torch: Any) -> None:
    x = np.random.default_rng(4).normal(size=(3, 4))
    mask = x > 0
    compare(torch, lambda t: t[mask], lambda t: t[torch.tensor(mask)], [x])


def _compare_embedding(torch: Any, w: np.ndarray, idx: np.ndarray) -> None:
    compare(
        torch,
        lambda t: ct.embedding(t, idx),
        lambda t: torch.nn.functional.embedding(torch.tensor(idx), t),
        [w],
    )


def test_embedding_repeated_rows_accumulate(torch: Any) -> None:
    w = np.random.default_rng(5).normal(size=(5, 3))
    idx = np.array([[0, 2, 2], [4, 0, 2]])
    _compare_embedding(torch, w, idx)
    t = Tensor(w)
    ct.embedding(t, idx).sum().backward()
    assert t.grad is not None
    assert t.grad[:, 0].tolist() == [2.0, 0.0, 3.0, 0.0, 1.0]


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_and_stack(torch: Any, axis: int) -> None:
    rng = np.random.default_rng(6)
    arrays = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), rng.normal(size=(2, 3))]
    compare(
        torch,
        lambda *ts: ct.concatenate(ts, axis=axis),
        lambda *ts: torch.cat(ts, dim=axis),
        arrays,
    )
    compare(
        torch, lambda *ts: ct.stack(ts, axis=axis), lambda *ts: torch.stack(ts, dim=axis), arrays
    )


# ----------------------------------------------------------------------------
# softmax, log-softmax, cross-entropy, normalization, masking, attention
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@EXAMPLES
@given(data=st.data())
def test_softmax_family(torch: Any, name: str, data: st.DataObject) -> None:
    # zero-size sides included: an empty result, as PyTorch (was NumPy's raw error)
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    x = data.draw(array(shape, -10.0, 10.0))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    compare(
        torch,
        lambda t: getattr(t, name)(axis),
        lambda t: getattr(torch.nn.functional, name)(t, dim=axis),
        [x],
    )


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 4)])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_family_of_nothing_is_empty(
    torch: Any, shape: tuple[int, ...], axis: int, name: str
) -> None:
    """``Tensor(np.zeros((0, 3))).softmax(-1)`` raised NumPy's zero-size
    error; PyTorch returns an empty tensor of the same shape."""
    y = compare(
        torch,
        lambda t: getattr(t, name)(axis),
        lambda t: getattr(torch.nn.functional, name)(t, dim=axis),
        [np.zeros(shape)],
    )
    assert y.data.shape == shape


@pytest.mark.parametrize("scale", [1e3, 1e5, 1e300])
def test_softmax_family_stable_at_large_logits(torch: Any, scale: float) -> None:
    x = np.array([[1.0, -1.0, 0.5, 1.0], [-2.0, 3.0, 3.0, 0.0]]) * scale
    F = torch.nn.functional
    for ours, theirs in [
        (lambda t: t.softmax(), lambda t: F.softmax(t, dim=-1)),
        (lambda t: t.log_softmax(), lambda t: F.log_softmax(t, dim=-1)),
        (
            lambda t: ct.cross_entropy(t, np.array([0, 2])),
            lambda t: F.cross_entropy(t, torch.tensor([0, 2])),
        ),
    ]:
        y = compare(torch, ours, theirs, [x])
        assert np.isfinite(y.data).all()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@EXAMPLES
@given(data=st.data())
def test_cross_entropy(torch: Any, reduction: str, data: st.DataObject) -> None:
    """Logits (..., C) with integer targets, some of them ignored (-100)."""
    lead = data.draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=4))
    n_classes = data.draw(st.integers(1, 5))
    x = data.draw(array((*lead, n_classes), -5.0, 5.0))
    targets = data.draw(hnp.arrays(np.int64, lead, elements=st.integers(0, n_classes - 1)))
    ignored = data.draw(hnp.arrays(np.bool_, lead))
    if not ignored.all():  # all ignored: 0/0, both nan (tested below)
        targets = np.where(ignored, -100, targets)
    tt = torch.tensor(targets)

    def theirs(t: Any) -> Any:  # torch wants the classes on axis 1
        flat = torch.nn.functional.cross_entropy(
            t.reshape(-1, n_classes), tt.reshape(-1), reduction=reduction
        )
        return flat.reshape(lead) if reduction == "none" else flat

    compare(torch, lambda t: ct.cross_entropy(t, targets, reduction=reduction), theirs, [x])


def test_cross_entropy_all_ignored_is_nan_with_zero_gradient(torch: Any) -> None:
    x = Tensor(np.zeros((2, 3)))
    loss = ct.cross_entropy(x, np.array([-100, -100]))
    xt = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(xt, torch.tensor([-100, -100]))
    assert np.isnan(loss.item()) and torch.isnan(expected)
    loss.backward()
    expected.backward()
    assert np.array_equal(x.grad, xt.grad.numpy())  # zeros: a step must not turn weights nan
    assert np.array_equal(x.grad, np.zeros((2, 3)))


def test_cross_entropy_ignored_row_blocks_nan_gradient(torch: Any) -> None:
    logits = np.array([[1.0, 2.0], [3.0, 4.0]])
    g = np.array([1.0, np.nan])
    x = Tensor(logits)
    ct.cross_entropy(x, np.array([0, -100]), reduction="none").backward(g)
    xt = torch.tensor(logits, requires_grad=True)
    F = torch.nn.functional
    F.cross_entropy(xt, torch.tensor([0, -100]), reduction="none").backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    assert np.array_equal(x.grad[1], [0.0, 0.0])


@pytest.mark.parametrize("weight", [False, True])
@EXAMPLES
@given(data=st.data())
def test_rms_norm(torch: Any, weight: bool, data: st.DataObject) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))
    arrays = [data.draw(array(shape))]
    if weight:
        arrays.append(data.draw(array(shape[-1:])))
    compare(
        torch,
        lambda *t: ct.rms_norm(*t, eps=1e-5),
        lambda x, *w: torch.nn.functional.rms_norm(x, shape[-1:], *w, eps=1e-5),
        arrays,
    )


@pytest.mark.parametrize("params", [0, 1, 2])
@EXAMPLES
@given(data=st.data())
def test_layer_norm(torch: Any, params: int, data: st.DataObject) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=5))
    arrays = [data.draw(array(shape))]
    arrays += [data.draw(array(shape[-1:])) for _ in range(params)]
    compare(
        torch,
        lambda *t: ct.layer_norm(*t, eps=1e-5),
        lambda x, *wb: torch.nn.functional.layer_norm(x, shape[-1:], *wb, eps=1e-5),
        arrays,
        rtol=1e-9,
    )


def test_causal_masking(torch: Any) -> None:
    """masked_fill with causal_mask, then softmax: each row sees its past."""
    x = np.random.default_rng(7).normal(size=(2, 4, 4))
    mask = ct.causal_mask(4)
    assert mask.tolist()[1] == [False, False, True, True]
    y = compare(
        torch,
        lambda t: ct.masked_fill(t, mask, -np.inf).softmax(-1),
        lambda t: t.masked_fill(torch.tensor(mask), -torch.inf).softmax(-1),
        [x],
    )
    assert (y.data[:, 0, 1:] == 0.0).all()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "shape", [(5, 3), (2, 4, 3), (2, 2, 4, 3), (2, 2, 128, 4), (2, 2, 129, 4)]
)  # 128 and 129 queries: a causal attention in two halves (nn_ops.CAUSAL_HALVES_FROM)
def test_attention(torch: Any, causal: bool, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(8)
    arrays = [rng.normal(size=shape) for _ in range(3)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    compare(
        torch,
        lambda q, k, v: ct.attention(q, k, v, causal=causal),
        lambda q, k, v: sdpa(q, k, v, is_causal=causal),
        arrays,
    )


def test_embedding_large_table_path(torch: Any) -> None:
    """A table too large for the one-hot product takes np.add.at: same result."""
    rng = np.random.default_rng(9)
    w = rng.normal(size=(3000, 2))
    idx = rng.integers(0, 3000, size=(20, 30))
    idx[0, :5] = 7  # repeats
    _compare_embedding(torch, w, idx)


def test_embedding_rows_picked_once_get_their_gradient_as_it_is(torch: Any) -> None:
    """Positions (each row picked once at most, in any order): the gradient
    is put in place; an inf in one row stays in that row, as PyTorch's."""
    rng = np.random.default_rng(11)
    w = rng.normal(size=(6, 3))
    idx = np.array([4, 0, 2, 1])
    _compare_embedding(torch, w, idx)
    t = Tensor(w)
    g = rng.normal(size=(4, 3))
    g[1, 2] = np.inf
    ct.embedding(t, idx).backward(g)
    expected = np.zeros_like(w)
    expected[idx] = g
    np.testing.assert_array_equal(t.grad, expected)


def test_linear_with_a_constant_input(torch: Any) -> None:
    rng = np.random.default_rng(10)
    x = rng.normal(size=(4, 3))
    compare(
        torch,
        lambda w, b: ct.linear(x, w, b),
        lambda w, b: torch.nn.functional.linear(torch.tensor(x), w, b),
        [rng.normal(size=(2, 3)), rng.normal(size=2)],
    )
