"""``gpt-names``: microgpt's training loop, a different name every step.

microgpt trains on one name per step, a new one each time: the tokens
change, and so does the length. This workload is that loop on
``loop_names`` consecutive names of the list shipped with chainrule
(``chainrule/datasets/names.txt``), from the same initial weights for
every engine: per step, the tokens of the name, the model's mean
cross-entropy over its positions (:meth:`~chainrule.bench.gpt.GPT.loss`,
the model of ``gpt-step`` in microgpt-style user code), ``backward()``
and an Adam update. One run is the whole loop, built fresh: a compiled
engine's time includes every trace it makes.

* ``microgpt`` — microgpt's own engine, its Adam loop over the parameters;
* ``chainrule-compat`` — the same user code on chainrule's ``Value``;
* ``compiled`` — that code with the loss function wrapped once in
  ``chainrule.compile``, the user's Adam loop unchanged;
* ``compiled-optim`` — the compiled loss with ``chainrule.optim.Adam``
  (one NumPy update of all parameters) instead of the Python loop;
* ``compiled-step`` — the loss, its backward and ``chainrule.optim.Adam``
  as one compiled training step, ``chainrule.compile(loss, optimizer=adam)``;
* ``compiled-step-nogc`` — that step with ``gc_while_tracing=False``: the
  cyclic garbage collector off while each trace runs (an explicit,
  process-wide opt-in).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from .. import compiler, optim
from ..transformer import GPTConfig
from ..value.engine import Value
from .gpt import BETAS, EPS, GPT, LEARNING_RATE, CompatOps, compat_adam, encode, initial_weights
from .harness import Arm, Engine, Sizes, Workload
from .microgpt import literal_value


def loop_names(sizes: Sizes) -> list[str]:
    """``sizes.loop_names`` consecutive names of the shipped list."""
    text = resources.files("chainrule").joinpath("datasets/names.txt").read_text("utf-8")
    names = text.split()
    return names[sizes.loop_start : sizes.loop_start + sizes.loop_names]


def optim_adam(params: list[Any]) -> Callable[[], None]:
    """``chainrule.optim.Adam`` with microgpt's hyperparameters, then
    ``zero_grad``."""
    adam = optim.Adam(params, lr=LEARNING_RATE, betas=BETAS, eps=EPS)

    def update() -> None:
        adam.step()
        adam.zero_grad()

    return update


class NamesLoop:
    """The loop: for each name, loss, backward, update. Returns the losses."""

    def __init__(
        self,
        names: list[str],
        value: type = Value,
        compiled: bool = False,
        optimizer: Callable[[list[Any]], Callable[[], None]] = compat_adam,
    ) -> None:
        self.model = GPT(initial_weights(GPTConfig()), CompatOps, value=value)
        self.loss: Any = self.model.loss
        if compiled:
            self.loss = compiler.compile(self.model.loss)
        self.update = optimizer(self.model.parameters())
        self.docs = [encode(name) for name in names]

    def __call__(self) -> list[float]:
        losses = []
        for tokens in self.docs:
            loss = self.loss(tokens)
            loss.backward()
            self.update()
            losses.append(loss.data)
        return losses


class CompiledStepLoop(NamesLoop):
    """The loop with one compiled training step per name:
    ``chainrule.compile(model.loss, optimizer=adam)`` (``chainrule.optim.Adam``),
    so loss, backward and update are one replay. The same numbers as
    ``compiled-optim`` (its ``zero_grad`` comes first, not last)."""

    def __init__(self, names: list[str], gc_while_tracing: bool = True) -> None:
        super().__init__(names)
        self.adam = optim.Adam(self.model.parameters(), lr=LEARNING_RATE, betas=BETAS, eps=EPS)
        self.train = compiler.compile(
            self.model.loss, optimizer=self.adam, gc_while_tracing=gc_while_tracing
        )

    def __call__(self) -> list[float]:
        return [self.train(tokens).data for tokens in self.docs]


def _arm(value: Callable[[], type] = lambda: Value, **options: Any) -> Callable[[Sizes], Arm]:
    """Each run: a fresh model (and compiled function) on ``value()``'s
    Value class, untimed; the loop, timed."""

    def make(sizes: Sizes) -> Arm:
        names = loop_names(sizes)
        return lambda: NamesLoop(names, value(), **options)

    return make


def _step_arm(gc_while_tracing: bool) -> Callable[[Sizes], Arm]:
    def make(sizes: Sizes) -> Arm:
        names = loop_names(sizes)
        return lambda: CompiledStepLoop(names, gc_while_tracing)

    return make


GPT_NAMES = Workload(
    "gpt-names",
    "microgpt's loop: one Adam step per name on consecutive names (a new name, a new length), "
    "the whole loop timed, traces included",
    baseline="microgpt",
    engines=(
        Engine("microgpt", _arm(value=literal_value)),
        Engine("chainrule-compat", _arm()),
        Engine("compiled", _arm(compiled=True), requires=("numpy",)),
        Engine("compiled-optim", _arm(compiled=True, optimizer=optim_adam), requires=("numpy",)),
        Engine("compiled-step", _step_arm(True), requires=("numpy",)),
        Engine("compiled-step-nogc", _step_arm(False), requires=("numpy",)),
    ),
    runs=1,
)
