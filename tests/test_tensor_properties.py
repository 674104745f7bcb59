"""The backward pass's guarantees, on Tensors: accumulation, repeated
passes, no_grad and detach, dtypes, errors, depth; and random expression
graphs against PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import chainrule
import chainrule.tensor as ct
from chainrule import Tensor, no_grad
from tensor_oracle import assert_close

# ----------------------------------------------------------------------------
# accumulation and repeated passes
# ----------------------------------------------------------------------------


def test_node_used_twice_gets_both_contributions() -> None:
    x = Tensor([1.0, -2.0, 3.0])
    y = x * x + x  # x reaches y by three edges
    y.sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [3.0, -3.0, 7.0]


def test_two_backward_passes_double_leaves_only() -> None:
    a = Tensor([[1.0, 2.0]])
    b = Tensor([[3.0], [4.0]])
    c = a * b  # (2, 2), broadcast
    loss = (c * c).sum()
    loss.backward()
    once_a, once_b, once_c = a.grad.copy(), b.grad.copy(), c.grad.copy()  # type: ignore[union-attr]
    loss.backward()
    assert np.array_equal(a.grad, 2 * once_a)
    assert np.array_equal(b.grad, 2 * once_b)
    assert np.array_equal(c.grad, once_c)  # interior: recomputed, not doubled
    assert once_a.shape == (1, 2) and once_b.shape == (2, 1)


def test_every_node_has_its_gradient() -> None:
    x = Tensor([0.5, 1.5])
    h = x.exp()
    y = (h * 2.0).sum()
    y.backward()
    assert y.grad is not None and y.grad.tolist() == 1.0
    assert h.grad is not None and h.grad.tolist() == [2.0, 2.0]
    assert np.allclose(x.grad, 2.0 * np.exp([0.5, 1.5]))  # type: ignore[arg-type]


def test_leaf_gradients_are_writable_arrays() -> None:
    x = Tensor(np.ones((2, 3)))
    x.sum().backward()  # the VJP of sum is a broadcast view
    assert x.grad is not None
    x.grad *= 0.5  # what gradient clipping does
    assert x.grad.tolist() == [[0.5] * 3] * 2


def test_leaf_gradients_do_not_share_memory() -> None:
    """Both inputs of an add get the same array from its VJP, and the seed
    is the caller's: an in-place update of one gradient (clipping) must
    reach neither the other leaf nor the caller's array."""
    a, b, c = Tensor([1.0, 2.0]), Tensor([3.0, 4.0]), Tensor([5.0, 6.0])
    ((a + b) * c).sum().backward()
    assert a.grad is not None and b.grad is not None
    a.grad *= 0.5
    assert b.grad.tolist() == [5.0, 6.0]
    a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    seed = np.array([1.0, 1.0])
    (a + b).backward(seed)
    assert a.grad is not None and b.grad is not None
    a.grad *= 2.0
    assert b.grad.tolist() == [1.0, 1.0] and seed.tolist() == [1.0, 1.0]


def test_zero_grad_and_leaf_backward() -> None:
    x = Tensor(3.0)
    x.backward()
    x.backward()
    assert x.grad is not None and x.grad.tolist() == 2.0
    x.zero_grad()
    assert x.grad is None


def test_non_scalar_root_needs_a_gradient() -> None:
    y = Tensor([1.0, 2.0]) * 2.0
    with pytest.raises(ValueError, match="gradient"):
        y.backward()
    y.backward(np.array([1.0, 10.0]))
    assert y._prev[0].grad.tolist() == [2.0, 20.0]  # type: ignore[union-attr]


def test_deep_graph_without_recursion() -> None:
    x = Tensor(np.ones(3))
    y = x
    for _ in range(50_000):
        y = y * 1.0001 + 0.0
    y.sum().backward()
    assert np.allclose(x.grad, 1.0001**50_000)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------
# no_grad and detach
# ----------------------------------------------------------------------------


def test_no_grad_records_nothing() -> None:
    x = Tensor([1.0, 2.0])
    with no_grad():
        y = (x * x).sum()
    assert y._prev == () and y.data.tolist() == 5.0 and not y.requires_grad
    with pytest.raises(RuntimeError, match=r"backward: .*no_grad"):
        y.backward()  # no graph: PyTorch raises too
    assert x.grad is None


def test_detach_cuts_the_graph_and_shares_data() -> None:
    x = Tensor([1.0, 2.0])
    d = (x * 3.0).detach()
    assert d._prev == ()
    z = (d * x).sum()
    z.backward()
    assert x.grad is not None and x.grad.tolist() == [3.0, 6.0]  # d is a constant
    assert not d.requires_grad and d.grad is None  # as PyTorch's detach()
    e = x.detach()
    assert e.data is x.data


# ----------------------------------------------------------------------------
# dtypes
# ----------------------------------------------------------------------------

F32_OPS = {
    "+ float": lambda t: t + 2.5,
    "* numpy scalar": lambda t: t * np.float64(1.5),
    "rdiv int": lambda t: 3 / (t + 4.0),
    "** 2": lambda t: t**2,
    "** 0.5": lambda t: (t * t + 1.0) ** 0.5,
    "2 **": lambda t: 2.0**t,
    "exp/log": lambda t: (t.exp() + 1.0).log(),
    "tanh/sigmoid/relu/abs/sqrt": lambda t: abs(t.tanh()).sqrt() + t.sigmoid() - t.relu(),
    "matmul": lambda t: t @ t.T,
    "sum/mean/max": lambda t: t.sum(axis=0) + t.mean(axis=1, keepdims=True) + t.max(),
    "reshape/transpose/index": lambda t: t.reshape(3, 2).transpose()[1:, [0, 0]],
    "softmax/log_softmax": lambda t: t.softmax() + t.log_softmax(0),
    "cross_entropy": lambda t: ct.cross_entropy(t, np.array([0, 2])),
    "norms": lambda t: ct.rms_norm(t) + ct.layer_norm(t),
    "attention": lambda t: ct.attention(t[None], t[None], t[None]),
    "concatenate/stack": lambda t: ct.concatenate([t, t]).sum(axis=0) + ct.stack([t, t])[0],
    "embedding": lambda t: ct.embedding(t, np.array([1, 1, 0])),
    "masked_fill": lambda t: ct.masked_fill(t, np.array([True, False, True]), -1e4),
}


@pytest.mark.parametrize("name", sorted(F32_OPS))
def test_float32_stays_float32(name: str) -> None:
    x = Tensor(np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32))
    y = F32_OPS[name](x)
    assert y.dtype == np.float32, f"{name}: {y.dtype}"
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == np.float32


def test_float64_default_and_mixed_dtypes() -> None:
    assert Tensor([1, 2]).dtype == np.float64
    assert Tensor(np.arange(3, dtype=np.int32)).dtype == np.float64
    assert Tensor([1.0], dtype="float32").dtype == np.float32
    a = Tensor(np.ones(2, dtype=np.float32))
    b = Tensor(np.ones(2))
    y = a * b  # promotes, as PyTorch
    assert y.dtype == np.float64
    y.sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64  # type: ignore[union-attr]


# ----------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["2", None, 1j, [1, "a"], np.array(["x"])], ids=repr)
def test_bad_operands_raise_type_error(bad: Any) -> None:
    x = Tensor([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\*|Tensor"):
        x * bad
    with pytest.raises(TypeError, match="Tensor"):
        Tensor(bad)


def test_bad_shapes_and_dtypes_raise() -> None:
    with pytest.raises(ValueError, match="reshape"):
        Tensor(np.ones(6)).reshape(4, 2)
    with pytest.raises(ValueError, match="linear"):
        ct.linear(Tensor(np.ones((2, 3))), Tensor(np.ones((2, 4))))
    with pytest.raises(TypeError, match="dtype"):
        Tensor([1.0], dtype=np.int64)
    with pytest.raises(TypeError, match="cross_entropy"):
        ct.cross_entropy(Tensor(np.ones((2, 3))), np.array([0.5, 1.0]))
    with pytest.raises(IndexError, match="cross_entropy"):
        ct.cross_entropy(Tensor(np.ones((2, 3))), np.array([0, 3]))
    with pytest.raises(IndexError, match="embedding"):
        ct.embedding(Tensor(np.ones((2, 3))), np.array([2]))


def test_chainrule_imports_without_numpy() -> None:
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import chainrule\n"
        "from chainrule import *\n"
        "assert chainrule.Value(2.0).data == 2.0\n"
        "try:\n"
        "    chainrule.Tensor\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    src = str(Path(chainrule.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert "needs NumPy" in out.stdout


# ----------------------------------------------------------------------------
# random expression graphs, against PyTorch
# ----------------------------------------------------------------------------

OPS = {
    "add": (lambda a, b: a + b, 2),
    "sub": (lambda a, b: a - b, 2),
    "mul": (lambda a, b: a * b, 2),
    "div": (lambda a, b: a / (b * b + 1.0), 2),
    "tanh": (lambda a: a.tanh(), 1),
    "sigmoid": (lambda a: a.sigmoid(), 1),
    "exp": (lambda a: (a * 0.1).exp(), 1),
    "relu": (lambda a: a.relu(), 1),
    "scale": (lambda a: 0.5 * a - 1.0, 1),
    "square": (lambda a: a**2, 1),
}

instruction = st.tuples(st.sampled_from(sorted(OPS)), st.integers(0, 100), st.integers(0, 100))


@settings(max_examples=30)
@given(
    program=st.lists(instruction, min_size=1, max_size=20),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3),
    seed=st.integers(0, 2**16),
)
def test_random_graphs_match_torch(torch: Any, program: Any, shapes: Any, seed: int) -> None:
    """Programs over three broadcastable inputs, each step reusing earlier
    results (shared subexpressions, fan-out), in both engines."""
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-2, 2, size=s) for s in shapes.input_shapes]
    ours = [Tensor(a.copy()) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ov, tv = list(ours), list(theirs)
    for name, i, j in program:
        f, arity = OPS[name]
        args = (i % len(ov), j % len(ov))[:arity]
        ov.append(f(*(ov[k] for k in args)))
        tv.append(f(*(tv[k] for k in args)))
    out = sum((v * float(k + 1) for k, v in enumerate(ov)), start=Tensor(0.0)).sum()
    tout = sum(v * float(k + 1) for k, v in enumerate(tv)).sum()
    assert_close(out.data, tout.detach().numpy(), "value")
    out.backward()
    tout.backward()
    for a, b in zip(ours, theirs):
        assert_close(a.grad, b.grad.numpy(), "gradient")
