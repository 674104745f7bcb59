"""``gpt-step``: one training step of a character-level GPT on scalars.

The model has microgpt's size and shape: a vocabulary of 27 (the letters
and one BOS token that starts and ends a name), embeddings of 16, one
transformer layer with 4 heads of 4, a context of 16 positions, RMSNorm
without a gain, a ReLU MLP of 64 hidden units, no biases, an LM head; 4,192
parameters. One step feeds a batch of names (``"emma"`` as ``BOS e m m a
BOS``), each a token at a time with a key/value cache, takes the mean
cross-entropy of all the next-token predictions, backpropagates once and
updates with Adam. The batch is :func:`batch_names`: 32 of the names shipped
with chainrule in the full benchmark.

The architecture is written once, in :class:`GPT`; the operations it is
built from come from one of two namespaces:

* :class:`CompatOps` — binary operators, ``exp``, ``log``, ``relu``, ``**``
  and builtin ``sum``: user code as it is written for micrograd-style
  engines (``chainrule-compat``);
* :class:`FusedOps` — chainrule's fused ops: a ``dot`` node per output of a
  linear layer, one node per RMS scale, a softmax of ``n + 1`` nodes, one
  cross-entropy node per position (``chainrule``).

Both compute the same loss and the same gradients (the tests check it).
In ``gpt-name-step`` (the one-input case: the same name every step) the
``compiled`` engine runs the CompatOps code as one compiled training step:
the loss wrapped once in ``chainrule.compile`` with ``chainrule.optim.Adam``
as its optimizer (loss, backward and update in one replay);
``gpt-names`` (:mod:`chainrule.bench.gpt_loop`) is the real loop, a new
name every step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from .. import compiler, optim
from .. import fused as F
from ..transformer import GPTConfig
from ..value.engine import Value
from ..value.sums import add_n, dot
from .harness import Engine, Sizes, Workload, built
from .microgpt import literal_value

SEED = 42
BOS = 26
Matrix = list[list[Any]]


def encode(name: str) -> list[int]:
    """``BOS`` + one token per letter (a=0 ... z=25) + ``BOS``."""
    letters = [ord(c) - ord("a") for c in name.lower()]
    if not letters or any(not 0 <= t < 26 for t in letters):
        raise ValueError(f"encode: a name of letters a-z expected, got {name!r}")
    return [BOS, *letters, BOS]


def shapes(config: GPTConfig) -> dict[str, tuple[int, int]]:
    """Every weight matrix, rows x columns (``y = W @ x``)."""
    e, h = config.n_embd, config.n_embd * config.mlp_ratio
    out = {
        "wte": (config.vocab_size, e),
        "wpe": (config.block_size, e),
        "lm_head": (config.vocab_size, e),
    }
    for i in range(config.n_layer):
        for name in ("attn_wq", "attn_wk", "attn_wv", "attn_wo"):
            out[f"layer{i}.{name}"] = (e, e)
        out[f"layer{i}.mlp_fc1"] = (h, e)
        out[f"layer{i}.mlp_fc2"] = (e, h)
    return out


def initial_weights(config: GPTConfig, seed: int = SEED) -> dict[str, list[list[float]]]:
    """Gaussian weights (std ``init_std``) from a seeded generator."""
    rng = random.Random(seed)
    return {
        name: [[rng.gauss(0.0, config.init_std) for _ in range(cols)] for _ in range(rows)]
        for name, (rows, cols) in shapes(config).items()
    }


# --------------------------------------------------------------------------
# The two op sets
# --------------------------------------------------------------------------


class CompatOps:
    """Binary operators and builtin ``sum`` only: micrograd-style user code."""

    @staticmethod
    def linear(x: Sequence[Any], w: Matrix) -> list[Any]:
        return [sum(wi * xi for wi, xi in zip(row, x)) for row in w]

    @staticmethod
    def rmsnorm(x: Sequence[Any]) -> list[Any]:
        ms = sum(xi * xi for xi in x) / len(x)
        scale = (ms + 1e-5) ** -0.5
        return [xi * scale for xi in x]

    @staticmethod
    def softmax(logits: Sequence[Any]) -> list[Any]:
        top = max(v.data for v in logits)
        exps = [(v - top).exp() for v in logits]
        total = sum(exps)
        return [e / total for e in exps]

    @staticmethod
    def score(q: Sequence[Any], k: Sequence[Any], scale: float) -> Any:
        return sum(qi * ki for qi, ki in zip(q, k)) * scale

    @staticmethod
    def mix(weights: Sequence[Any], values: Sequence[Any]) -> Any:
        return sum(w * v for w, v in zip(weights, values))

    @classmethod
    def cross_entropy(cls, logits: Sequence[Any], target: int) -> Any:
        probs = cls.softmax(logits)  # as microgpt: the target picks one probability
        return -probs[target].log()

    @staticmethod
    def mean(xs: Sequence[Any]) -> Any:
        return (1.0 / len(xs)) * sum(xs)


class FusedOps:
    """chainrule's fused ops: far fewer nodes, the same gradients."""

    linear = staticmethod(lambda x, w: F.linear(w, x))
    rmsnorm = staticmethod(F.rmsnorm)
    softmax = staticmethod(F.softmax)
    cross_entropy = staticmethod(F.cross_entropy)

    @staticmethod
    def score(q: Sequence[Any], k: Sequence[Any], scale: float) -> Any:
        return dot(q, k) * scale

    @staticmethod
    def mix(weights: Sequence[Any], values: Sequence[Any]) -> Any:
        return dot(weights, values)

    @staticmethod
    def mean(xs: Sequence[Any]) -> Any:
        return add_n(xs) * (1.0 / len(xs))


# --------------------------------------------------------------------------
# The model, written once
# --------------------------------------------------------------------------


class GPT:
    """The transformer on scalar Values, one token at a time with a KV cache."""

    def __init__(
        self,
        weights: dict[str, list[list[float]]],
        ops: Any,
        config: GPTConfig | None = None,
        value: type = Value,
    ) -> None:
        self.config = config or GPTConfig()
        self.ops = ops
        self.state: dict[str, Matrix] = {
            name: [[value(w) for w in row] for row in rows] for name, rows in weights.items()
        }

    def parameters(self) -> list[Any]:
        return [p for rows in self.state.values() for row in rows for p in row]

    def forward(
        self, token: int, pos: int, keys: list[list[Any]], values: list[list[Any]]
    ) -> list[Any]:
        """The logits of the token after ``token`` at position ``pos``;
        appends this position's keys and values to the caches."""
        cfg, ops, sd = self.config, self.ops, self.state
        x = [t + p for t, p in zip(sd["wte"][token], sd["wpe"][pos])]
        x = ops.rmsnorm(x)
        hd = cfg.head_dim
        scale = 1.0 / math.sqrt(hd)
        for li in range(cfg.n_layer):
            layer = f"layer{li}."
            residual = x
            x = ops.rmsnorm(x)
            q = ops.linear(x, sd[layer + "attn_wq"])
            keys[li].append(ops.linear(x, sd[layer + "attn_wk"]))
            values[li].append(ops.linear(x, sd[layer + "attn_wv"]))
            heads: list[Any] = []
            for h in range(cfg.n_head):
                lo, hi = h * hd, (h + 1) * hd
                att = ops.softmax([ops.score(q[lo:hi], k[lo:hi], scale) for k in keys[li]])
                for j in range(lo, hi):
                    heads.append(ops.mix(att, [v[j] for v in values[li]]))
            x = ops.linear(heads, sd[layer + "attn_wo"])
            x = [a + b for a, b in zip(x, residual)]
            residual = x
            x = ops.rmsnorm(x)
            x = [h.relu() for h in ops.linear(x, sd[layer + "mlp_fc1"])]
            x = ops.linear(x, sd[layer + "mlp_fc2"])
            x = [a + b for a, b in zip(x, residual)]
        return ops.linear(x, sd["lm_head"])

    def position_losses(self, tokens: Sequence[int]) -> list[Any]:
        """The cross-entropy of predicting ``tokens[i + 1]`` from
        ``tokens[: i + 1]``, for the first ``block_size`` positions."""
        n = min(self.config.block_size, len(tokens) - 1)
        keys: list[list[Any]] = [[] for _ in range(self.config.n_layer)]
        values: list[list[Any]] = [[] for _ in range(self.config.n_layer)]
        losses = []
        for pos in range(n):
            logits = self.forward(tokens[pos], pos, keys, values)
            losses.append(self.ops.cross_entropy(logits, tokens[pos + 1]))
        return losses

    def loss(self, tokens: Sequence[int]) -> Any:
        """The mean of :meth:`position_losses`."""
        return self.ops.mean(self.position_losses(tokens))

    def batch_loss(self, batch: Sequence[Sequence[int]]) -> Any:
        """The mean cross-entropy over every position of every name: one
        graph, as a batched model computes it."""
        return self.ops.mean([loss for tokens in batch for loss in self.position_losses(tokens)])


# --------------------------------------------------------------------------
# Adam, and the step
# --------------------------------------------------------------------------

LEARNING_RATE = 0.01
BETAS = (0.85, 0.99)
EPS = 1e-8


class CompatAdam:
    """Adam as microgpt's user code writes it: a loop over the parameters."""

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        self.m = [0.0] * len(params)
        self.v = [0.0] * len(params)
        self.t = 0

    def step(self) -> None:
        self.t += 1
        b1, b2 = BETAS
        for i, p in enumerate(self.params):
            self.m[i] = b1 * self.m[i] + (1 - b1) * p.grad
            self.v[i] = b2 * self.v[i] + (1 - b2) * p.grad**2
            m_hat = self.m[i] / (1 - b1**self.t)
            v_hat = self.v[i] / (1 - b2**self.t)
            p.data -= LEARNING_RATE * m_hat / (v_hat**0.5 + EPS)
            p.grad = 0.0


def chainrule_adam(params: list[Any]) -> Callable[[], None]:
    """``chainrule.optim.Adam`` with the same hyperparameters; the update
    and then ``zero_grad``."""
    adam = optim.Adam(params, lr=LEARNING_RATE, betas=BETAS, eps=EPS)

    def update() -> None:
        adam.step()
        adam.zero_grad()

    return update


def compat_adam(params: list[Any]) -> Callable[[], None]:
    return CompatAdam(params).step


class GPTStep:
    """Forward, backward, Adam on a batch of names (or one name)."""

    def __init__(
        self,
        ops: Any,
        optimizer: Callable[[list[Any]], Callable[[], None]],
        names: str | Sequence[str],
        config: GPTConfig | None = None,
        value: type = Value,
    ) -> None:
        self.config = config or GPTConfig()
        self.model = GPT(initial_weights(self.config), ops, self.config, value)
        self.update = optimizer(self.model.parameters())
        self.batch = [encode(n) for n in ([names] if isinstance(names, str) else names)]

    def __call__(self) -> float:
        loss = self.model.batch_loss(self.batch)
        loss.backward()
        self.update()
        return float(loss.data)


def batch_names(n: int) -> list[str]:
    """``n`` names spread evenly over the list shipped with chainrule
    (``chainrule/datasets/names.txt``): the same batch for every engine."""
    text = resources.files("chainrule").joinpath("datasets/names.txt").read_text("utf-8")
    names = text.split()
    return names[:: max(len(names) // n, 1)][:n]


def steps(
    ops: Any,
    optimizer: Callable[[list[Any]], Callable[[], None]],
    batch: bool,
    value: Callable[[], type] = lambda: Value,
) -> Callable[[Sizes], Any]:
    """Builds the step on the benchmark's batch of names (or its one name),
    on ``value()``'s Value class."""

    def make(sizes: Sizes) -> GPTStep:
        names = batch_names(sizes.gpt_batch) if batch else sizes.gpt_name
        return GPTStep(ops, optimizer, names, value=value())

    return make


class CompiledStep:
    """``chainrule-compat``'s step (CompatOps) as one compiled training step:
    the model's loss wrapped once in ``chainrule.compile`` with
    ``chainrule.optim.Adam`` as its optimizer, so a call is the loss, its
    backward pass and the update, replayed on NumPy arrays (traced on the
    first, untimed, run): the same numbers as the step with the loop."""

    def __init__(self, sizes: Sizes) -> None:
        self.config = GPTConfig()
        self.model = GPT(initial_weights(self.config), CompatOps, self.config)
        self.optimizer = optim.Adam(self.model.parameters(), lr=LEARNING_RATE, betas=BETAS, eps=EPS)
        self.train = compiler.compile(self.model.batch_loss, optimizer=self.optimizer)
        self.batch = [encode(sizes.gpt_name)]

    def __call__(self) -> float:
        return float(self.train(self.batch).data)


GPT_NAME_STEP = Workload(
    "gpt-name-step",
    "the same step on one name, the same every step (the one-input case; gpt-names is the "
    "real loop): microgpt-style user code on microgpt's own engine and on chainrule's Value, "
    "against chainrule's fused ops",
    baseline="microgpt",
    engines=(
        Engine("microgpt", built(steps(CompatOps, compat_adam, False, value=literal_value))),
        Engine("chainrule-compat", built(steps(CompatOps, compat_adam, batch=False))),
        Engine("chainrule", built(steps(FusedOps, chainrule_adam, batch=False))),
        Engine("compiled", built(CompiledStep), requires=("numpy",)),
    ),
    # the compiled step takes about 1.6 ms, microgpt's about 80 ms with runs
    # 70-95 ms apart: 35 timed runs each, whose medians move by a few percent
    more_runs=5,
)
