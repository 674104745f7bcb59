"""Run one computation in chainrule's Tensor engine and in PyTorch float64,
and compare the values and the gradients of every input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chainrule.tensor import Tensor

RTOL = 1e-10
ATOL = 1e-12


def assert_close(ours: Any, theirs: Any, what: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    ours = np.asarray(ours)
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != torch {theirs.shape}"
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def compare(
    torch: Any,
    ours: Callable[..., Tensor],
    theirs: Callable[..., Any],
    arrays: Sequence[np.ndarray],
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Tensor:
    """Apply ``ours`` to Tensors and ``theirs`` to torch tensors made from
    the same float64 arrays; backpropagate the same random output gradient
    through both and compare the output and every input's gradient."""
    ts = [Tensor(np.array(a, dtype=np.float64)) for a in arrays]
    tts = [torch.tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    y = ours(*ts)
    ty = theirs(*tts)
    assert y.data.dtype == np.float64
    assert_close(y.data, ty.detach().numpy(), "value", rtol, atol)
    g = np.random.default_rng(seed).standard_normal(y.data.shape)
    y.backward(g)
    ty.backward(torch.tensor(g))
    for i, (t, tt) in enumerate(zip(ts, tts)):
        expected = tt.grad.numpy() if tt.grad is not None else np.zeros(t.data.shape)
        got = t.grad if t.grad is not None else np.zeros(t.data.shape)
        assert_close(got, expected, f"gradient of input {i}", rtol, atol)
    return y
