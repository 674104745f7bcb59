"""The Tensor losses against ``torch.nn.functional`` in float64: value and
gradient (of the input, and of a target that wants one) for every
reduction, with weights, ``pos_weight``, ``ignore_index`` and label
smoothing; second derivatives; the edges (probabilities 0 and 1, extreme
logits, nothing counted); and ``chainrule.losses`` on Tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chainrule.tensor as ct
from chainrule import Tensor, Value, gradcheck, losses
from tensor_oracle import assert_close, compare

RTOL, ATOL = 1e-12, 1e-14
REDUCTIONS = ["mean", "sum", "none"]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_regression_losses(torch: Any, name: str, reduction: str) -> None:
    x, y = _rng().standard_normal((4, 3)), _rng(1).standard_normal((4, 3))
    y[0, 0] = x[0, 0]  # l1's derivative at 0 is 0, as PyTorch's
    ours, theirs = getattr(ct, name), getattr(torch.nn.functional, name)
    # both the prediction and the target get gradients
    compare(
        torch,
        lambda a, b: ours(a, b, reduction=reduction),
        lambda a, b: theirs(a, b, reduction=reduction),
        [x, y],
        rtol=RTOL,
        atol=ATOL,
    )
    # a constant target: an array
    compare(
        torch,
        lambda a: ours(a, y, reduction),
        lambda a: theirs(a, torch.tensor(y), reduction=reduction),
        [x],
        rtol=RTOL,
        atol=ATOL,
    )


def test_regression_shape_mismatch_warns_as_pytorch() -> None:
    with pytest.warns(UserWarning, match=r"mse_loss: target of shape \(4,\) .* \(4, 1\)"):
        ct.mse_loss(Tensor(np.zeros((4, 1))), np.zeros(4))
    with pytest.raises(TypeError, match="l1_loss: input or target must be a Tensor"):
        ct.l1_loss(np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none'"):
        ct.mse_loss(Tensor([1.0]), [0.0], reduction="avg")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(torch: Any, reduction: str, weighted: bool) -> None:
    rng = _rng(2)
    p = rng.uniform(0.02, 0.98, (5, 3))
    t = rng.uniform(0.0, 1.0, (5, 3))
    t[0] = [0.0, 1.0, 0.5]  # hard labels too
    w = rng.uniform(0.5, 2.0, 3) if weighted else None
    tw = None if w is None else torch.tensor(w)
    compare(
        torch,
        lambda x, y: ct.binary_cross_entropy(x, y, w, reduction),
        lambda x, y: torch.nn.functional.binary_cross_entropy(x, y, tw, reduction=reduction),
        [p, t],
        rtol=RTOL,
        atol=ATOL,
    )


def test_binary_cross_entropy_at_0_and_1_is_pytorchs(torch: Any) -> None:
    """The clamped logs (-100) and the clamped gradient (x (1 - x) >= 1e-12)."""
    p = np.array([0.0, 1.0, 0.0, 1.0, 1e-15, 1.0 - 1e-15, 0.5])
    t = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5])
    compare(
        torch,
        lambda x: ct.binary_cross_entropy(x, t, reduction="none"),
        lambda x: torch.nn.functional.binary_cross_entropy(x, torch.tensor(t), reduction="none"),
        [p],
        rtol=RTOL,
        atol=ATOL,
    )
    with pytest.raises(
        ValueError, match=r"binary_cross_entropy: every input must be a probability"
    ):
        ct.binary_cross_entropy(Tensor([1.5]), [1.0])
    with pytest.raises(ValueError, match=r"target of shape \(2,\) for an input of shape \(1,\)"):
        ct.binary_cross_entropy(Tensor([0.5]), [1.0, 0.0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights", ["none", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(torch: Any, reduction: str, weights: str) -> None:
    rng = _rng(3)
    z = rng.standard_normal((4, 3)) * 4.0
    z[0] = [40.0, -40.0, 800.0]  # far from 0: exact from the logit
    t = rng.uniform(0.0, 1.0, (4, 3))
    w = rng.uniform(0.5, 2.0, (4, 1)) if weights in ("weight", "both") else None
    pw = rng.uniform(0.5, 3.0, 3) if weights in ("pos_weight", "both") else None
    tw = None if w is None else torch.tensor(w)
    tpw = None if pw is None else torch.tensor(pw)
    compare(
        torch,
        lambda x, y: ct.binary_cross_entropy_with_logits(x, y, w, reduction, pw),
        lambda x, y: torch.nn.functional.binary_cross_entropy_with_logits(
            x, y, tw, reduction=reduction, pos_weight=tpw
        ),
        [z, t],
        rtol=RTOL,
        atol=ATOL,
    )


def test_pos_weight_gradient_by_finite_differences() -> None:
    """PyTorch does not differentiate pos_weight; a Tensor pos_weight gets
    its derivative, ``-t log_sigmoid(x)``, checked by central differences."""
    rng = _rng(4)
    z, t, pw = rng.standard_normal((3, 2)), rng.uniform(0, 1, (3, 2)), rng.uniform(1, 2, 2)

    def loss(p: Tensor) -> Tensor:
        return ct.binary_cross_entropy_with_logits(Tensor(z), t, pos_weight=p)

    assert gradcheck(loss, [Tensor(pw)]).ok


def _logits_and_targets(shape: tuple[int, ...], n_classes: int, seed: int) -> tuple[Any, Any]:
    rng = _rng(seed)
    x = rng.standard_normal((*shape, n_classes)) * 2.0
    t = rng.integers(0, n_classes, shape)
    return x, t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("ignored", [False, True])
def test_cross_entropy(
    torch: Any, reduction: str, weighted: bool, smoothing: float, ignored: bool
) -> None:
    x, t = _logits_and_targets((6,), 4, 5)
    if ignored:
        t[[1, 4]] = -100
    w = _rng(6).uniform(0.2, 3.0, 4) if weighted else None
    tw = None if w is None else torch.tensor(w)
    compare(
        torch,
        lambda a: ct.cross_entropy(a, t, w, reduction=reduction, label_smoothing=smoothing),
        lambda a: torch.nn.functional.cross_entropy(
            a, torch.tensor(t), tw, reduction=reduction, label_smoothing=smoothing
        ),
        [x],
        rtol=RTOL,
        atol=ATOL,
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(torch: Any, reduction: str, weighted: bool) -> None:
    x, t = _logits_and_targets((7,), 5, 7)
    t[3] = 2
    t[5] = -1  # a custom ignore_index
    w = _rng(8).uniform(0.2, 3.0, 5) if weighted else None
    tw = None if w is None else torch.tensor(w)
    compare(
        torch,
        lambda a: ct.nll_loss(ct.log_softmax(a), t, w, ignore_index=-1, reduction=reduction),
        lambda a: torch.nn.functional.nll_loss(
            a.log_softmax(-1), torch.tensor(t), tw, ignore_index=-1, reduction=reduction
        ),
        [x],
        rtol=RTOL,
        atol=ATOL,
    )


def test_classes_on_the_last_axis_of_a_sequence(torch: Any) -> None:
    """(batch, time, classes), as a language model's logits: PyTorch takes
    the classes on axis 1, so its side moves them there."""
    x, t = _logits_and_targets((2, 3), 4, 9)
    w = np.array([1.0, 2.0, 0.5, 1.5])
    compare(
        torch,
        lambda a: ct.cross_entropy(a, t, w, label_smoothing=0.2),
        lambda a: torch.nn.functional.cross_entropy(
            a.permute(0, 2, 1), torch.tensor(t), torch.tensor(w), label_smoothing=0.2
        ),
        [x],
        rtol=RTOL,
        atol=ATOL,
    )


def test_nothing_counted_is_nan_with_zero_gradient(torch: Any) -> None:
    x, t = _logits_and_targets((3,), 4, 10)
    t[:] = -100
    for kwargs in ({"weight": np.ones(4)}, {"label_smoothing": 0.3}):
        a = Tensor(x)
        loss = ct.cross_entropy(a, t, **kwargs)
        ta = torch.tensor(x, requires_grad=True)
        tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        tloss = torch.nn.functional.cross_entropy(ta, torch.tensor(t), **tkw)
        assert np.isnan(loss.item()) and np.isnan(tloss.item())
        loss.backward()
        tloss.backward()
        assert_close(a.grad, ta.grad.numpy(), f"gradient with {kwargs}")


def test_second_derivatives_match_torch(torch: Any) -> None:
    """Each loss differentiated twice (create_graph) equals PyTorch's."""
    rng = _rng(11)
    x = rng.standard_normal((3, 4))
    p = rng.uniform(0.1, 0.9, (3, 4))
    t_cls = rng.integers(0, 4, 3)
    t_bin = rng.uniform(0, 1, (3, 4))
    w = rng.uniform(0.5, 2.0, 4)
    F = torch.nn.functional
    cases = {
        "mse_loss": (
            x,
            lambda a: ct.mse_loss(a, t_bin),
            lambda a: F.mse_loss(a, torch.tensor(t_bin)),
        ),
        "bce": (
            p,
            lambda a: ct.binary_cross_entropy(a, t_bin),
            lambda a: F.binary_cross_entropy(a, torch.tensor(t_bin)),
        ),
        "bce_logits": (
            x,
            lambda a: ct.binary_cross_entropy_with_logits(a, t_bin, pos_weight=w),
            lambda a: F.binary_cross_entropy_with_logits(
                a, torch.tensor(t_bin), pos_weight=torch.tensor(w)
            ),
        ),
        "cross_entropy": (
            x,
            lambda a: ct.cross_entropy(a, t_cls, w, label_smoothing=0.1),
            lambda a: F.cross_entropy(a, torch.tensor(t_cls), torch.tensor(w), label_smoothing=0.1),
        ),
    }
    v = rng.standard_normal((3, 4))
    for name, (data, ours, theirs) in cases.items():
        a = Tensor(data)
        (g,) = ct.gradients(ours(a), [a], create_graph=True)
        (gg,) = ct.gradients((g * v).sum(), [a])
        ta = torch.tensor(data, requires_grad=True)
        (tg,) = torch.autograd.grad(theirs(ta), ta, create_graph=True)
        (tgg,) = torch.autograd.grad((tg * torch.tensor(v)).sum(), ta)
        assert_close(g.data, tg.detach().numpy(), f"{name}: gradient", 1e-12, 1e-14)
        assert_close(gg, tgg.numpy(), f"{name}: second derivative", 1e-10, 1e-12)


def test_float32_stays_float32(torch: Any) -> None:
    x, t = _logits_and_targets((5,), 3, 12)
    a = Tensor(x.astype(np.float32))
    for loss in (
        ct.cross_entropy(a, t, np.ones(3), label_smoothing=0.1),
        ct.nll_loss(a.log_softmax(), t),
        ct.mse_loss(a, np.zeros((5, 3))),
        ct.binary_cross_entropy_with_logits(a, np.ones((5, 3), dtype=np.float32)),
        ct.binary_cross_entropy(a.sigmoid(), np.ones((5, 3), dtype=np.float32)),
    ):
        assert loss.dtype == np.float32
        loss.backward()
        assert a.grad is not None and a.grad.dtype == np.float32


def test_class_errors_name_the_loss() -> None:
    x = Tensor(np.zeros((2, 3)))
    with pytest.raises(
        ValueError, match=r"nll_loss: an input of shape \(2, 3\) .* target of shape \(2,\)"
    ):
        ct.nll_loss(x, np.array([0, 1, 2]))
    with pytest.raises(IndexError, match="cross_entropy: target out of range for 3 classes"):
        ct.cross_entropy(x, np.array([0, 3]), np.ones(3))
    with pytest.raises(TypeError, match="cross_entropy: target must hold class indices"):
        ct.cross_entropy(x, np.array([0.5, 1.0]), label_smoothing=0.1)
    with pytest.raises(TypeError, match=r"weight gets no gradient: pass weight.detach\(\)"):
        ct.cross_entropy(x, np.array([0, 1]), Tensor(np.ones(3)))
    with pytest.raises(ValueError, match="weight needs one entry per class"):
        ct.nll_loss(x, np.array([0, 1]), np.ones(2))
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        ct.cross_entropy(x, np.array([0, 1]), label_smoothing=1.5)


# ----------------------------------------------------------------------------
# chainrule.losses (the scalar engine's) given Tensors
# ----------------------------------------------------------------------------


def test_scalar_losses_take_tensors(torch: Any) -> None:
    """What a newcomer wrote (issue 22): chainrule.losses.mse_loss(tensor,
    array) is the Tensor loss, not a TypeError from the scalar engine."""
    x, y = _rng(13).standard_normal((4, 2)), _rng(14).standard_normal((4, 2))
    a = Tensor(x)
    loss = losses.mse_loss(a, y)
    assert isinstance(loss, Tensor)
    loss.backward()
    ta = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.mse_loss(ta, torch.tensor(y))
    tl.backward()
    assert_close(loss.data, tl.detach().numpy(), "mse value", RTOL, ATOL)
    assert_close(a.grad, ta.grad.numpy(), "mse gradient", RTOL, ATOL)
    t = np.array([1, 0, 1, 1])
    assert_close(
        losses.cross_entropy(Tensor(x), t).data,
        torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(t)).numpy(),
        "cross_entropy",
    )
    b = (y > 0).astype(float)
    assert_close(
        losses.binary_cross_entropy_with_logits(Tensor(x), b).data,
        torch.nn.functional.binary_cross_entropy_with_logits(
            torch.tensor(x), torch.tensor(b)
        ).numpy(),
        "bce with logits",
    )
    # Values still give Values
    assert isinstance(losses.mse_loss([Value(1.0)], [0.0]), Value)


def test_scalar_only_losses_name_the_tensor_way() -> None:
    a = Tensor([0.5, -1.0])
    with pytest.raises(
        TypeError, match=r"hinge_loss: .*Tensors.*\(1 - y \* s\)\.relu\(\)\.mean\(\)"
    ):
        losses.hinge_loss(a, [1, -1])
    with pytest.raises(TypeError, match=r"log_softmax: .*chainrule\.tensor\.log_softmax"):
        losses.log_softmax(a)
    with pytest.raises(TypeError, match=r"logsumexp: .*x - x\.log_softmax\(\)"):
        losses.logsumexp(a)
    with pytest.raises(
        TypeError, match=r"example_cross_entropy: .*chainrule\.tensor\.cross_entropy"
    ):
        losses.example_cross_entropy(a, 0)


# ----------------------------------------------------------------------------
# every loss, every option: a 0-d array under "mean" and "sum"
# ----------------------------------------------------------------------------


@st.composite
def _loss_calls(draw: Any) -> tuple[str, dict[str, Any], np.ndarray, Any, str]:
    """A loss, its options, an input (float64 or float32) and a target."""
    name = draw(st.sampled_from(sorted(ct.losses.__all__)))
    reduction = draw(st.sampled_from(REDUCTIONS))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    rows = draw(st.integers(1, 4))
    lead = (rows,) if draw(st.booleans()) else (2, rows)
    seed = draw(st.integers(0, 2**16))
    rng = _rng(seed)
    options: dict[str, Any] = {}
    if name in ("cross_entropy", "nll_loss"):
        classes = draw(st.integers(2, 4))
        x = rng.standard_normal((*lead, classes)).astype(dtype)
        target: Any = rng.integers(0, classes, lead)
        if draw(st.booleans()):
            target.reshape(-1)[: draw(st.integers(1, target.size))] = -100
            options["ignore_index"] = -100
        if draw(st.booleans()):
            options["weight"] = rng.uniform(0.2, 3.0, classes).astype(dtype)
        if name == "cross_entropy":
            options["label_smoothing"] = draw(st.sampled_from([0.0, 0.1, 1.0]))
    else:
        x = rng.uniform(0.05, 0.95, lead).astype(dtype)
        target = rng.uniform(0.0, 1.0, lead).astype(dtype)
        if name.startswith("binary_cross_entropy") and draw(st.booleans()):
            options["weight"] = rng.uniform(0.2, 3.0, lead).astype(dtype)
        if name == "binary_cross_entropy_with_logits" and draw(st.booleans()):
            options["pos_weight"] = rng.uniform(0.2, 3.0, lead[-1:]).astype(dtype)
    return name, options, x, target, reduction


@settings(max_examples=200, deadline=None)
@given(_loss_calls())
def test_every_loss_is_an_array_under_every_option(
    torch: Any, call: tuple[str, dict[str, Any], np.ndarray, Any, str]
) -> None:
    """``np.asarray(loss)`` is the loss: a 0-d ndarray for ``"mean"`` and
    ``"sum"`` (it was a ``numpy.float64`` that NumPy refused, with
    ``ignore_index`` and ``label_smoothing``), the per-element array for
    ``"none"``, equal to PyTorch's; the input's gradient is an array too."""
    name, options, x, target, reduction = call
    a = Tensor(x)
    loss = getattr(ct, name)(a, target, reduction=reduction, **options)
    array = np.asarray(loss)
    assert type(loss.data) is np.ndarray and type(array) is np.ndarray
    assert array.dtype == x.dtype
    want = x.shape[:-1] if name in ("cross_entropy", "nll_loss") else x.shape
    assert array.shape == (want if reduction == "none" else ())
    loss.sum().backward()
    assert type(a.grad) is np.ndarray and a.grad.shape == x.shape
    if x.dtype == np.float64:
        tx = torch.tensor(x)
        if name in ("cross_entropy", "nll_loss") and x.ndim == 3:
            tx = tx.permute(0, 2, 1)  # PyTorch's classes are on dim 1
        theirs = getattr(torch.nn.functional, name)(
            tx,
            torch.tensor(target),
            reduction=reduction,
            **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in options.items()},
        )
        assert_close(array, theirs.numpy(), name, rtol=RTOL, atol=ATOL)
