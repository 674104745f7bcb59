"""A compiled training step, ``chainrule.compile(loss, optimizer=opt)``
(``chainrule.compiler.step``): a call is the loss, ``opt.zero_grad()``,
``loss.backward()`` and ``opt.step()``; against those four calls run
eagerly, step after step."""

from __future__ import annotations

import random
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.bench.gpt import CompiledStep
from chainrule.bench.harness import Sizes
from chainrule.compiler import CompileWarning
from test_compile_training import OPTIMIZERS  # the optimizers the flat update is tested with

pytestmark = pytest.mark.usefixtures("trace_every_graph")  # traces are counted here too


class Model:
    """Twelve weights in three rows (an int argument picks one: a gather), a
    parameter the loss never reads, a leaf that is read but is not a
    parameter (its gradient accumulates, as backward() adds it), and a
    parameter that comes in as an argument."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.rows = [[Value(rng.uniform(-1, 1)) for _ in range(4)] for _ in range(3)]
        self.unread = Value(0.7)
        self.frozen = Value(1.3)
        self.passed = Value(-0.4)

    def params(self) -> list[Value]:
        return [p for row in self.rows for p in row] + [self.unread, self.passed]

    def loss(self, x: list[float], i: int, passed: Value) -> Value:
        row = self.rows[i]
        s = sum(w * xi for w, xi in zip(row, x)) * self.frozen + passed
        return s.relu() + (row[0] - 0.5) ** 2 + (passed * row[1]).exp()


def _state(m: Model) -> list[float]:
    vs = [*m.params(), m.frozen]
    return [v.data for v in vs] + [v.grad for v in vs]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_compiled_step_is_zero_grad_backward_step(name: str) -> None:
    eager, fast = Model(1), Model(1)
    opt_e, opt_f = OPTIMIZERS[name](eager.params()), OPTIMIZERS[name](fast.params())
    train = chainrule.compile(fast.loss, optimizer=opt_f)
    rng = random.Random(2)
    for _ in range(30):
        x, i = [rng.uniform(-2, 2) for _ in range(4)], rng.randrange(3)
        expected = eager.loss(x, i, eager.passed)
        opt_e.zero_grad()
        expected.backward()
        opt_e.step()
        got = train(x, i, fast.passed)
        assert got.data == expected.data
        # gradients through a gather are added in another order (1e-16)
        assert _state(fast) == pytest.approx(_state(eager), rel=1e-12, abs=1e-15)
    assert train.traces == 1 and train.hits == 29
    assert eager.frozen.grad != 0.0  # accumulated over the steps, not zeroed


def test_the_gpt_step_compiled_whole_is_the_four_calls_bit_for_bit() -> None:
    """``gpt-name-step``'s compiled engine (loss, backward and Adam in one
    replay) against the same compiled loss followed by ``zero_grad()``,
    ``backward()`` and ``step()`` one by one: every loss, gradient and
    parameter the same float, 12 steps."""
    fast = CompiledStep(Sizes())
    slow = CompiledStep(Sizes())
    loss = chainrule.compile(slow.model.batch_loss)
    for _ in range(12):
        expected = loss(slow.batch)
        slow.optimizer.zero_grad()
        expected.backward()
        slow.optimizer.step()
        assert fast() == expected.data
        assert [(p.data, p.grad) for p in fast.model.parameters()] == [
            (p.data, p.grad) for p in slow.model.parameters()
        ]
    assert fast.train.traces == 1 and loss.traces == 1


def test_data_written_between_steps_is_used() -> None:
    w = Value(2.0)
    opt = optim.SGD([w], lr=0.1)
    train = chainrule.compile(lambda: w * w, optimizer=opt)
    assert train().data == 4.0 and w.data == 2.0 - 0.1 * 4.0 and w.grad == 4.0
    w.data = 3.0
    assert train().data == 9.0 and w.data == 3.0 - 0.1 * 6.0 and w.grad == 6.0
    opt.lr = 0.0  # a schedule's change, outside the function
    train()
    assert w.data == 2.4
    assert train.hits == 2


def test_parameters_of_another_class_take_the_eager_calls() -> None:
    """Only Values step on arrays; a subclass's parameters get the four
    calls themselves, with the same numbers."""

    class Param(Value):
        __slots__ = ()

    ws, vs = [Param(0.5), Param(-1.5)], [Value(0.5), Value(-1.5)]
    a, b = optim.Adam(ws, lr=0.1), optim.Adam(vs, lr=0.1)
    assert not a.on_arrays() and b.on_arrays()
    fa = chainrule.compile(lambda: (ws[0] * ws[1]).exp(), optimizer=a)
    fb = chainrule.compile(lambda: (vs[0] * vs[1]).exp(), optimizer=b)
    for _ in range(5):
        assert fa().data == fb().data
    assert [w.data for w in ws] == [v.data for v in vs]
    assert [w.grad for w in ws] == [v.grad for v in vs]


def test_a_step_must_return_the_loss() -> None:
    w = Value(1.0)
    train = chainrule.compile(lambda: (w * 2.0, w * 3.0), optimizer=optim.SGD([w]))
    with pytest.raises(TypeError, match="must return the loss, one Value; it returned tuple"):
        train()


def test_the_optimizer_must_be_chainrules() -> None:
    class MyAdam:
        def step(self) -> None: ...

    with pytest.raises(TypeError, match=r"chainrule.optim optimizer \(SGD, Adam\), got MyAdam"):
        chainrule.compile(lambda: Value(1.0), optimizer=MyAdam())  # type: ignore[arg-type]


def test_a_step_that_runs_eagerly_still_steps() -> None:
    """A function compile cannot replay (a write to .data) warns, then each
    call is the four eager calls."""
    w = Value(1.0)

    def loss() -> Value:
        w.data = w.data  # a write: not replayable
        return w * w

    opt = optim.SGD([w], lr=0.25)
    train = chainrule.compile(loss, optimizer=opt)
    with pytest.warns(CompileWarning, match="writes .data"):
        train()
    assert w.data == 0.5 and w.grad == 2.0
    train()
    assert w.data == 0.25 and w.grad == 1.0


def test_the_decorator_takes_the_optimizer() -> None:
    w = Value(3.0)
    opt = optim.SGD([w], lr=0.5)

    @chainrule.compile(optimizer=opt)
    def train(x: float) -> Any:
        return (w - x) ** 2

    for _ in range(3):
        train(1.0)
    assert w.data == 1.0 and w.grad == 0.0 and train.hits == 2


def test_the_real_loop_as_compiled_steps_is_the_loop_with_optim() -> None:
    """``gpt-names``'s ``compiled-step`` (a compiled training step per name)
    against ``compiled-optim`` (the compiled loss, backward, ``optim.Adam``):
    the same losses and parameters, 12 names of different lengths."""
    from chainrule.bench.gpt_loop import CompiledStepLoop, NamesLoop, loop_names, optim_adam
    from chainrule.bench.harness import FULL

    names = loop_names(FULL)[:12]
    steps, loop = CompiledStepLoop(names), NamesLoop(names, compiled=True, optimizer=optim_adam)
    assert steps() == loop()
    assert [p.data for p in steps.model.parameters()] == [p.data for p in loop.model.parameters()]
    assert steps.train.traces == loop.loss.traces == len({len(n) for n in names})


def test_an_optimizer_with_its_own_step_runs_it() -> None:
    """A subclass's ``step`` is what a compiled step calls (not the array
    update it would bypass)."""

    class Clipped(optim.SGD):
        def step(self) -> None:
            for p in self.params:
                p.grad = max(-1.0, min(1.0, p.grad))
            super().step()

    w = Value(3.0)
    opt = Clipped([w], lr=0.5)
    assert not opt.on_arrays() and optim.SGD([w]).on_arrays()
    train = chainrule.compile(lambda: w * w, optimizer=opt)
    for expected in (2.5, 2.0, 1.5):
        train()
        assert w.data == expected  # the gradient 2w clipped to 1.0


def test_the_collector_can_be_paused_while_tracing() -> None:
    """``gc_while_tracing=False``: the cyclic collector is off while a trace
    runs (the function sees it off), on during replays and after, and left
    off if it was off before; the numbers are the same either way."""
    import gc
    import queue

    # a queue: not one of the values compile guards (a list the function
    # appends to would make it run eagerly, a threading.local's too)
    log: queue.Queue[bool] = queue.Queue()
    seen = log.queue
    w = Value(1.5)
    # (gc.isenabled() called by the function itself makes it run eagerly: it
    # reads the interpreter's state; code without source runs as it is)
    collecting = eval("lambda: gc.isenabled()", {"gc": gc})

    def loss(x: float) -> Value:
        log.put(collecting())
        return (w * x).exp()

    paused = chainrule.compile(loss, gc_while_tracing=False)
    usual = chainrule.compile(loss)
    assert paused(2.0).data == usual(2.0).data == (w * 2.0).exp().data
    assert list(seen) == [False, True] and gc.isenabled()  # the two traces
    assert paused(3.0).data == usual(3.0).data  # replays: fn does not run
    assert len(seen) == 2
    gc.disable()
    try:
        chainrule.compile(loss, gc_while_tracing=False)(2.0)
        assert not gc.isenabled()  # as the user left it
    finally:
        gc.enable()
    with pytest.raises(TypeError, match="gc_while_tracing must be True or False"):
        chainrule.compile(loss, gc_while_tracing="no")  # type: ignore[arg-type]
