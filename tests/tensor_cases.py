"""Every Tensor op as a small function of Tensors, beside the same function
in PyTorch: the table the higher-order and gradcheck tests run over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import chainrule.tensor as ct

TARGETS = np.array([1, 0, 3])
IGNORED = np.array([1, -100, 3])
MASK = np.array([[True, False, False, True], [False, True, False, False], [True] * 4])
PICK = np.array([[0, 2], [2, 1]])
# dropout's kept entries (scaled by 2) for the generator seeded 0, as an array
DROP_SCALE = (np.random.default_rng(0).random((3, 4)) >= 0.5) * 2.0
# batch norm's running statistics in evaluation
RUNNING_MEAN = np.array([0.3, -0.2])
RUNNING_VAR = np.array([0.5, 1.7])


# name -> (ours, torch's, input shapes, domain): "any", "pos" (> 0.5) or
# "apart" (distinct magnitudes, so max has no ties)
OPS: dict[str, tuple[Callable[..., Any], Callable[..., Any], tuple[tuple[int, ...], ...], str]] = {
    "add": (lambda a, b: (a + b) ** 3, lambda t, a, b: (a + b) ** 3, ((3, 1), (4,)), "any"),
    "sub": (lambda a, b: (a - b) ** 3, lambda t, a, b: (a - b) ** 3, ((3, 4), (1, 4)), "any"),
    "mul": (lambda a, b: a * b, lambda t, a, b: a * b, ((3, 1), (4,)), "any"),
    "mul_const": (lambda a: (a * 3.0) * a, lambda t, a: (a * 3.0) * a, ((3, 4),), "any"),
    "div": (lambda a, b: a / b, lambda t, a, b: a / b, ((3, 4), (4,)), "pos"),
    "div_const": (lambda a: (a / 3.0) * a, lambda t, a: (a / 3.0) * a, ((3, 4),), "any"),
    "rdiv_const": (lambda a: 2.0 / a, lambda t, a: 2.0 / a, ((3, 4),), "pos"),
    "rsub_const": (lambda a: (2.0 - a) ** 3, lambda t, a: (2.0 - a) ** 3, ((3, 4),), "any"),
    "pow": (lambda a, b: a**b, lambda t, a, b: a**b, ((3, 4), (4,)), "pos"),
    "pow_const": (lambda a: a**3.0, lambda t, a: a**3.0, ((3, 4),), "any"),
    "pow_square": (lambda a: a**2.0 * a, lambda t, a: a**2.0 * a, ((3, 4),), "any"),
    "pow_zero": (lambda a: a**0.0 * a, lambda t, a: a**0.0 * a, ((3, 4),), "any"),
    "pow_array": (
        lambda a: a ** np.array([1.0, 2.0, 0.5, 3.0]),
        lambda t, a: a ** t.tensor([1.0, 2.0, 0.5, 3.0], dtype=t.float64),
        ((3, 4),),
        "pos",
    ),
    "rpow": (lambda a: 2.0**a, lambda t, a: 2.0**a, ((3, 4),), "any"),
    "neg": (lambda a: (-a) ** 3, lambda t, a: (-a) ** 3, ((3, 4),), "any"),
    "exp": (lambda a: a.exp(), lambda t, a: a.exp(), ((3, 4),), "any"),
    "log": (lambda a: a.log(), lambda t, a: a.log(), ((3, 4),), "pos"),
    "sqrt": (lambda a: a.sqrt(), lambda t, a: a.sqrt(), ((3, 4),), "pos"),
    "tanh": (lambda a: a.tanh(), lambda t, a: a.tanh(), ((3, 4),), "any"),
    "sigmoid": (lambda a: a.sigmoid(), lambda t, a: a.sigmoid(), ((3, 4),), "any"),
    "relu": (lambda a: a.relu() * a, lambda t, a: a.relu() * a, ((3, 4),), "any"),
    "abs": (lambda a: abs(a) * a, lambda t, a: a.abs() * a, ((3, 4),), "any"),
    "sum": (lambda a: (a * a).sum(axis=1), lambda t, a: (a * a).sum(dim=1), ((3, 4),), "any"),
    "sum_all": (lambda a: (a * a).sum() * a, lambda t, a: (a * a).sum() * a, ((3, 4),), "any"),
    "mean": (
        lambda a: (a * a).mean(axis=0, keepdims=True),
        lambda t, a: (a * a).mean(dim=0, keepdim=True),
        ((3, 4),),
        "any",
    ),
    "max": (lambda a: (a * a).max(axis=1), lambda t, a: (a * a).amax(dim=1), ((3, 4),), "apart"),
    "max_all": (lambda a: (a * a).max() * a, lambda t, a: (a * a).max() * a, ((3, 4),), "apart"),
    "matmul": (
        lambda a, b: (a @ b) * (a @ b),
        lambda t, a, b: (a @ b) * (a @ b),
        ((2, 3, 4), (4, 5)),
        "any",
    ),
    "matmul_batched": (
        lambda a, b: (a @ b) ** 2,
        lambda t, a, b: (a @ b) ** 2,
        ((2, 3, 4), (2, 4, 2)),
        "any",
    ),
    "matmul_vector": (
        lambda a, b: (a @ b) ** 2,
        lambda t, a, b: (a @ b) ** 2,
        ((4,), (3, 4, 2)),
        "any",
    ),
    "matmul_matvec": (
        lambda a, b: (a @ b) ** 2,
        lambda t, a, b: (a @ b) ** 2,
        ((3, 4), (4,)),
        "any",
    ),
    "matmul_const": (
        lambda a: (a @ np.ones((4, 2))) ** 2,
        lambda t, a: (a @ t.ones((4, 2), dtype=t.float64)) ** 2,
        ((3, 4),),
        "any",
    ),
    "rmatmul_const": (
        lambda a: (np.ones((2, 3)) @ a) ** 2,
        lambda t, a: (t.ones((2, 3), dtype=t.float64) @ a) ** 2,
        ((3, 4),),
        "any",
    ),
    "linear": (
        lambda x, w, b: ct.linear(x, w, b).tanh(),
        lambda t, x, w, b: t.nn.functional.linear(x, w, b).tanh(),
        ((2, 3, 4), (5, 4), (5,)),
        "any",
    ),
    "linear_const_input": (
        lambda w: ct.linear(np.ones((3, 4)), w).tanh(),
        lambda t, w: t.nn.functional.linear(t.ones((3, 4), dtype=t.float64), w).tanh(),
        ((5, 4),),
        "any",
    ),
    "softmax": (lambda a: a.softmax(), lambda t, a: a.softmax(-1), ((3, 4),), "any"),
    "softmax_axis0": (lambda a: a.softmax(0), lambda t, a: a.softmax(0), ((3, 4),), "any"),
    "log_softmax": (lambda a: a.log_softmax(), lambda t, a: a.log_softmax(-1), ((3, 4),), "any"),
    "log_softmax_axis0": (
        lambda a: a.log_softmax(0),
        lambda t, a: a.log_softmax(0),
        ((3, 4),),
        "any",
    ),
    "cross_entropy": (
        lambda a: ct.cross_entropy(a, TARGETS) * a,
        lambda t, a: t.nn.functional.cross_entropy(a, t.tensor(TARGETS)) * a,
        ((3, 4),),
        "any",
    ),
    "cross_entropy_ignored": (
        lambda a: ct.cross_entropy(a, IGNORED, reduction="sum") * a,
        lambda t, a: t.nn.functional.cross_entropy(a, t.tensor(IGNORED), reduction="sum") * a,
        ((3, 4),),
        "any",
    ),
    "cross_entropy_none": (
        lambda a: ct.cross_entropy(a, TARGETS, reduction="none"),
        lambda t, a: t.nn.functional.cross_entropy(a, t.tensor(TARGETS), reduction="none"),
        ((3, 4),),
        "any",
    ),
    "rms_norm": (
        lambda a, w: ct.rms_norm(a, w),
        lambda t, a, w: t.nn.functional.rms_norm(a, (4,), w, 1e-5),
        ((3, 4), (4,)),
        "any",
    ),
    "rms_norm_plain": (
        lambda a: ct.rms_norm(a),
        lambda t, a: t.nn.functional.rms_norm(a, (4,), None, 1e-5),
        ((3, 4),),
        "any",
    ),
    "layer_norm": (
        lambda a, w, b: ct.layer_norm(a, w, b),
        lambda t, a, w, b: t.nn.functional.layer_norm(a, (4,), w, b, 1e-5),
        ((3, 4), (4,), (4,)),
        "any",
    ),
    "layer_norm_plain": (
        lambda a: ct.layer_norm(a),
        lambda t, a: t.nn.functional.layer_norm(a, (4,), None, None, 1e-5),
        ((3, 4),),
        "any",
    ),
    "attention": (
        lambda q, k, v: ct.attention(q, k, v),
        lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
        "any",
    ),
    "attention_full": (
        lambda q, k, v: ct.attention(q, k, v, causal=False),
        lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(q, k, v),
        ((3, 4), (5, 4), (5, 2)),
        "any",
    ),
    "getitem": (
        lambda a: a[[0, 0, 2]] * a[:3] * a[0],
        lambda t, a: a[[0, 0, 2]] * a[:3] * a[0],
        ((3, 4),),
        "any",
    ),
    "getitem_mask": (
        lambda a: a[MASK] ** 3,
        lambda t, a: a[t.tensor(MASK)] ** 3,
        ((3, 4),),
        "any",
    ),
    "embedding": (
        lambda w: ct.embedding(w, PICK) ** 3,
        lambda t, w: t.nn.functional.embedding(t.tensor(PICK), w) ** 3,
        ((3, 4),),
        "any",
    ),
    "concatenate": (
        lambda a, b: ct.concatenate([a * a, b], 1) ** 2,
        lambda t, a, b: t.cat([a * a, b], 1) ** 2,
        ((3, 4), (3, 2)),
        "any",
    ),
    "stack": (
        lambda a, b: ct.stack([a * a, b], 1) ** 2,
        lambda t, a, b: t.stack([a * a, b], 1) ** 2,
        ((3, 4), (3, 4)),
        "any",
    ),
    "transpose": (
        lambda a: a.transpose(1, 0, 2) ** 3,
        lambda t, a: a.permute(1, 0, 2) ** 3,
        ((2, 3, 4),),
        "any",
    ),
    "reshape": (
        lambda a: a.reshape(6, 2) ** 3,
        lambda t, a: a.reshape(6, 2) ** 3,
        ((3, 4),),
        "any",
    ),
    "masked_fill": (
        lambda a: ct.masked_fill(a, MASK, 0.0) ** 3,
        lambda t, a: a.masked_fill(t.tensor(MASK), 0.0) ** 3,
        ((3, 4),),
        "any",
    ),
    "where": (
        lambda a, b: ct.where(MASK, a * a, b) ** 3,
        lambda t, a, b: t.where(t.tensor(MASK), a * a, b) ** 3,
        ((3, 4), (4,)),
        "any",
    ),
    "where_const": (
        lambda a: ct.where(MASK, 2.0, a) ** 3,
        lambda t, a: t.where(t.tensor(MASK), 2.0, a) ** 3,
        ((3, 4),),
        "any",
    ),
    "broadcast_to": (
        lambda a: ct.broadcast_to(a, (2, 3, 4)) ** 3,
        lambda t, a: a.broadcast_to((2, 3, 4)) ** 3,
        ((3, 1),),
        "any",
    ),
    "astype": (
        lambda a: ct.astype(ct.astype(a, np.float32), np.float64) ** 3,
        lambda t, a: a.float().double() ** 3,
        ((3, 4),),
        "any",
    ),
    # the ops of the Tensor speed issue
    "min": (lambda a: (a * a).min(axis=1), lambda t, a: (a * a).amin(dim=1), ((3, 4),), "apart"),
    "var": (
        lambda a: (a * a).var(axis=1) * a[:, 0],
        lambda t, a: (a * a).var(dim=1) * a[:, 0],
        ((3, 4),),
        "any",
    ),
    "std": (
        lambda a: a.std(axis=0, correction=0) ** 3,
        lambda t, a: a.std(dim=0, correction=0) ** 3,
        ((3, 4),),
        "any",
    ),
    "clamp": (
        lambda a: a.clamp(-0.5, 0.7) * a,
        lambda t, a: a.clamp(-0.5, 0.7) * a,
        ((3, 4),),
        "any",
    ),
    "gelu": (lambda a: a.gelu(), lambda t, a: t.nn.functional.gelu(a), ((3, 4),), "any"),
    "gelu_tanh": (
        lambda a: a.gelu("tanh"),
        lambda t, a: t.nn.functional.gelu(a, approximate="tanh"),
        ((3, 4),),
        "any",
    ),
    "dropout": (
        lambda a: ct.dropout(a, 0.5, rng=np.random.default_rng(0)) ** 3,
        lambda t, a: (a * t.tensor(DROP_SCALE)) ** 3,
        ((3, 4),),
        "any",
    ),
    "squeeze_unsqueeze_flatten": (
        lambda a: a.unsqueeze(0).flatten(1, 2).squeeze(0) ** 3,
        lambda t, a: a.unsqueeze(0).flatten(1, 2).squeeze(0) ** 3,
        ((3, 4),),
        "any",
    ),
    # the image ops: convolution, pooling, batch norm
    "conv2d": (
        lambda x, w, b: ct.conv2d(x, w, b, (2, 1), 1, (1, 2), groups=2).tanh(),
        lambda t, x, w, b: t.nn.functional.conv2d(x, w, b, (2, 1), 1, (1, 2), groups=2).tanh(),
        ((1, 4, 4, 3), (4, 2, 2, 2), (4,)),
        "any",
    ),
    "conv2d_same": (
        lambda x, w: ct.conv2d(x, w, padding="same", dilation=(2, 1)) ** 2,
        lambda t, x, w: t.nn.functional.conv2d(x, w, padding="same", dilation=(2, 1)) ** 2,
        ((1, 2, 3, 4), (2, 2, 2, 3)),
        "any",
    ),
    "conv1d": (
        lambda x, w, b: ct.conv1d(x, w, b, stride=2, padding=1).tanh(),
        lambda t, x, w, b: t.nn.functional.conv1d(x, w, b, stride=2, padding=1).tanh(),
        ((2, 2, 5), (3, 2, 2), (3,)),
        "any",
    ),
    "max_pool2d": (
        lambda a: ct.max_pool2d(a, 3, stride=2, padding=1) ** 2,
        lambda t, a: t.nn.functional.max_pool2d(a, 3, stride=2, padding=1) ** 2,
        ((1, 2, 5, 5),),
        "apart",
    ),
    "max_pool2d_disjoint": (
        lambda a: ct.max_pool2d(a, 2) ** 3,
        lambda t, a: t.nn.functional.max_pool2d(a, 2) ** 3,
        ((2, 1, 4, 4),),
        "apart",
    ),
    "avg_pool2d": (
        lambda a: ct.avg_pool2d(a, 2, stride=1, padding=1) ** 2,
        lambda t, a: t.nn.functional.avg_pool2d(a, 2, stride=1, padding=1) ** 2,
        ((1, 2, 3, 3),),
        "any",
    ),
    "adaptive_avg_pool2d": (
        lambda a: ct.adaptive_avg_pool2d(a, 1) ** 3,
        lambda t, a: t.nn.functional.adaptive_avg_pool2d(a, 1) ** 3,
        ((2, 2, 3, 3),),
        "any",
    ),
    "batch_norm": (
        lambda x, w, b: ct.batch_norm(x, None, None, w, b, training=True).tanh(),
        lambda t, x, w, b: t.nn.functional.batch_norm(x, None, None, w, b, training=True).tanh(),
        ((3, 2, 2, 2), (2,), (2,)),
        "any",
    ),
    "batch_norm_plain": (
        lambda x: ct.batch_norm(x, None, None, training=True) ** 3,
        lambda t, x: t.nn.functional.batch_norm(x, None, None, training=True) ** 3,
        ((4, 3),),
        "any",
    ),
    "batch_norm_eval": (
        lambda x, w, b: ct.batch_norm(x, RUNNING_MEAN, RUNNING_VAR, w, b) ** 2,
        lambda t, x, w, b: (
            t.nn.functional.batch_norm(x, t.tensor(RUNNING_MEAN), t.tensor(RUNNING_VAR), w, b) ** 2
        ),
        ((3, 2, 2, 2), (2,), (2,)),
        "any",
    ),
}


def point(shapes: tuple[tuple[int, ...], ...], domain: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    if domain == "pos":
        arrays = [np.abs(a) + 0.5 for a in arrays]
    elif domain == "apart":
        arrays = [
            (rng.permutation(a.size).reshape(a.shape) + 1.0) * rng.choice([-1.0, 1.0], a.shape)
            for a in arrays
        ]
    return arrays
