"""chainrule.compile and the ninth probe: random numbers drawn where
compile does not copy the code (a ``@dataclass``'s generated ``__init__``,
a function without source) are seen by their generator's state, and the
function runs eagerly."""

from __future__ import annotations

import dataclasses
import math
import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _calls(f: Callable[[float], Value], seed: Callable[[], None]) -> tuple[list[float], str]:
    """Six calls after ``seed()``: their values and the warnings' words."""
    seed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [f(2.0).data for _ in range(6)]
    assert all(issubclass(w.category, CompileWarning) for w in caught)
    return got, " ".join(str(w.message) for w in caught)


def test_a_draw_in_a_dataclass_default_factory_runs_eagerly() -> None:
    w = Value(0.5)

    @dataclasses.dataclass
    class Drop:
        keep: float = dataclasses.field(default_factory=random.random)

    def step(x: float) -> Value:
        return w * x * (1.0 if Drop().keep > 0.5 else 0.0)

    def seed() -> None:
        random.seed(3)

    eager, _ = _calls(step, seed)
    assert 0.0 in eager and 1.0 in eager  # the draw changes the result
    got, words = _calls(chainrule.compile(step, budget=False), seed)
    assert got == eager
    assert "draws random numbers from code compile does not copy" in words


def test_a_draw_from_numpys_global_generator_without_source_runs_eagerly() -> None:
    w = Value(0.5)
    space: dict[str, Any] = {"np": np}
    exec("def noise():\n    return float(np.random.rand())", space)  # no source to copy
    noise = space["noise"]

    def step(x: float) -> Value:
        return w * x * noise()

    def seed() -> None:
        np.random.seed(1)

    eager, _ = _calls(step, seed)
    assert len(set(eager)) == len(eager)
    got, words = _calls(chainrule.compile(step, budget=False), seed)
    assert got == eager
    assert "draws random numbers from code compile does not copy" in words


def test_a_backward_pass_from_a_graph_on_the_loss_warns_that_h_grad_is_not_set() -> None:
    """``h, loss = fast(x)`` then ``(loss * 2.0).backward()``: eagerly ``h``
    gets its gradient through ``loss``; the compiled call is one node of
    the caller's graph, which the pass may also reach through ``h``, so
    ``h.grad`` is not set: said once, and the parameters' gradients are
    eager's."""
    w, b = Value(0.5), Value(-0.2)

    def f(x: float) -> tuple[Value, Value]:
        h = (w * x + b).tanh()
        return h, (h - 1.0) ** 2

    def grads(fn: Callable[[float], tuple[Value, Value]], scale: float) -> list[float]:
        w.grad = b.grad = 0.0
        outs = [fn(x) for x in (1.0, 2.0, 3.0)]
        (sum(loss for _, loss in outs) * scale).backward()
        return [w.grad, b.grad]

    fast = chainrule.compile(f, budget=False)
    eager = grads(f, 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert grads(fast, 0.5) == pytest.approx(eager, rel=1e-12, abs=0.0)
        assert grads(fast, 0.5) == pytest.approx(eager, rel=1e-12, abs=0.0)
    words = [str(c.message) for c in caught]
    assert len(words) == 1 and "does not set .grad of the nodes returned beside" in words[0]
    assert caught[0].filename == __file__
    with warnings.catch_warnings():  # gradients() leaves every .grad: nothing to say
        warnings.simplefilter("error", CompileWarning)
        h, loss = chainrule.compile(f, budget=False)(1.0)
        eh, eloss = f(1.0)
        assert chainrule.gradients(loss * 2.0, [w]) == chainrule.gradients(eloss * 2.0, [w])
    h, loss = fast(1.0)  # backward() on the output itself: h.grad as eagerly
    eh, eloss = f(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss.backward()
    eloss.backward()
    assert h.grad == eh.grad != 0.0


def _model() -> tuple[Any, list[Value], list[list[float]], list[float]]:
    from chainrule.nn import MLP

    r = random.Random(0)
    xs = [[r.uniform(-1, 1), r.uniform(-1, 1)] for _ in range(12)]
    ys = [r.choice([-1.0, 1.0]) for _ in range(12)]
    model = MLP(2, [4, 1], rng=random.Random(1))
    return model, model.parameters(), xs, ys


@pytest.mark.parametrize("patch", ["clipped step", "accumulating zero_grad"])
def test_a_compiled_step_calls_the_optimizers_methods_set_on_the_object(patch: str) -> None:
    """``opt.step = clipped`` or ``opt.zero_grad = lambda: None`` (a
    notebook's patch, not a subclass): the compiled step calls them, as
    eagerly, instead of its update on arrays."""
    from chainrule.optim import SGD

    def run(compiled: bool) -> list[float]:
        model, params, xs, ys = _model()
        opt = SGD(params, lr=0.1)
        if patch == "clipped step":
            plain = opt.step

            def clipped() -> None:
                for p in params:
                    p.grad = max(-0.05, min(0.05, p.grad))
                plain()

            opt.step = clipped  # type: ignore[method-assign]
        else:
            opt.zero_grad = lambda: None  # type: ignore[method-assign]

        def loss_fn(xs: list[list[float]], ys: list[float]) -> Value:
            return sum(((model(x) - y) ** 2 for x, y in zip(xs, ys)), Value(0.0)) / len(xs)

        def step(xs: list[list[float]], ys: list[float]) -> Value:
            loss = loss_fn(xs, ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        train = chainrule.compile(loss_fn, optimizer=opt, budget=False) if compiled else step
        got = []
        for _ in range(5):
            train(xs, ys)
            got += [p.grad for p in params[:3]] + [p.data for p in params[:3]]
        return got

    assert run(True) == pytest.approx(run(False), rel=1e-12, abs=1e-15)


def test_a_compiled_step_around_a_compiled_step_makes_both_updates() -> None:
    """``compile(compile(loss_fn, optimizer=opt), optimizer=opt)`` (a
    notebook cell run twice): each call is the inner step, then the outer
    one on the loss it returned, as eagerly (the inner's replayed loss is
    not trained again on arrays from before its update)."""
    from chainrule.optim import SGD

    def run(compiled: bool) -> list[float]:
        model, params, xs, ys = _model()
        opt = SGD(params, lr=0.1)

        def loss_fn(xs: list[list[float]], ys: list[float]) -> Value:
            return sum(((model(x) - y) ** 2 for x, y in zip(xs, ys)), Value(0.0)) / len(xs)

        got = []
        if compiled:
            inner = chainrule.compile(loss_fn, optimizer=opt, budget=False)
            train = chainrule.compile(inner, optimizer=opt, budget=False)
        for _ in range(4):
            if compiled:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CompileWarning)
                    train(xs, ys)
            else:
                loss = loss_fn(xs, ys)
                for _ in range(2):
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            got += [p.data for p in params]
        return got

    assert run(True) == pytest.approx(run(False), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("zero", [np.float32(0.0), np.float64(0.0)])
def test_a_numpy_zero_held_in_grad_is_replaced_by_the_float_gradient(zero: Any) -> None:
    """``p.grad = np.float32(0.0)`` between steps: as ``Value.backward``, a
    zero held is not added to, so the gradient is a full-precision float."""
    model, params, _, _ = _model()

    def f(x: list[float]) -> Value:
        return (model(x) - 1.0) ** 2

    fast = chainrule.compile(f, budget=False)
    got = []
    for fn in (f, fast, fast):
        for p in params:
            p.grad = zero
        fn([0.3, 0.2]).backward()
        got.append([(type(p.grad), p.grad) for p in params])
    assert got[1] == got[0] and got[2] == got[0]
    assert {t for t, _ in got[0]} == {float}


def test_max_or_min_where_a_plain_number_wins_is_guarded_not_eager() -> None:
    """``min(1.0, step / 3)`` or ``max(0.0, v.data, x)`` where the plain
    number wins at the trace: the comparisons are guarded (another outcome
    traces again), each call eager's number, no warning."""
    w, v = Value(0.5), Value(-0.2)

    def warmup(x: float, step: int) -> Value:
        return (1.0 - x * w).relu() + min(1.0, step / 3) * v * v

    def clamp(x: float) -> Value:
        h = w * x
        return h * max(0.0, h.data, x - 2.0)

    def calls(f: Callable[..., Value], args: list[tuple[Any, ...]]) -> list[tuple[float, float]]:
        got = []
        for a in args:
            w.grad = v.grad = 0.0
            out = f(*a)
            out.backward()
            got.append((out.data, w.grad))
        return got

    for f, args in [
        (warmup, [(0.8, 4), (2.0, 0), (1.1, 3), (1.4, 2), (0.2, 9)]),
        (clamp, [(-1.0,), (3.0,), (-2.0,), (2.5,), (1.0,)]),
    ]:
        fast = chainrule.compile(f, budget=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            assert calls(fast, args) == calls(f, args)
        assert fast.stats()["eager"] is None and fast.stats()["hits"] >= 1


@pytest.mark.parametrize("kind", [np.float32, np.float64])
def test_a_numpy_scalar_written_to_data_between_replays_runs_eagerly(kind: Any) -> None:
    """``p.data = arr[i]`` between replays: eagerly NumPy's arithmetic (a
    float32's precision, its type); the replay's read of the leaves sees it
    and the function runs eagerly, named."""
    w, b = Value(0.1), Value(0.2)

    def f(x: float) -> Value:
        return w * x + b * b

    fast = chainrule.compile(f, budget=False)
    assert [fast(3.0).data, fast(3.0).data] == [f(3.0).data] * 2
    w.data = kind(0.1)
    eager = f(3.0).data
    with pytest.warns(CompileWarning, match="a Value's .data is a numpy"):
        got = [fast(3.0).data, fast(3.0).data]
    assert [(type(x), x) for x in got] == [(type(eager), eager)] * 2


def test_the_float_that_wins_max_or_min_keeps_its_own_number_elsewhere() -> None:
    """``g = min(max(x, -c), c)`` and then ``x`` itself; ``m = max(ws)`` and
    ``w / m`` for every ``w``; ``m = max(ds)`` and ``ds[t]``: the winner is
    the caller's own float, whose other uses replay as its own number, not
    as the max (the max is a new float with the reduction's recipe)."""
    r = random.Random(0)
    W = [Value(r.uniform(-1, 1)) for _ in range(6)]

    def clip(x: float, c: float) -> Value:
        g = min(max(x, -c), c)
        return sum(((w * g).tanh() for w in W), Value(0.0)) + W[0] * x * x

    def weighted(ws: list[float]) -> Value:
        m = max(ws)
        return sum((p * (w / m) for p, w in zip(W, ws)), Value(0.0))

    def softmax(x: float, t: int) -> Value:
        logits = [p * x for p in W[:3]]
        ds = [v.data for v in logits]
        m = max(ds)
        ex = [(v - m).exp() for v in logits]
        return -(ex[t] / sum(ex)).log() + W[0] * ds[t]

    def run(f: Callable[..., Value], calls: list[tuple[Any, ...]]) -> list[Any]:
        got = []
        for args in calls:
            for p in W:
                p.grad = 0.0
            out = f(*args)
            out.backward()
            got.append((out.data, [p.grad for p in W]))
        return got

    for f, calls in [
        (clip, [(0.5, 1.0), (0.25, 1.0), (2.0, 1.0), (-3.0, 1.0)]),
        (weighted, [([3.0, 1.0, 2.0, 1.5, 0.5, 1.0],), ([1.0, 3.0, 2.0, 0.5, 2.5, 1.0],)]),
        (softmax, [(2.0, 1), (-2.0, 1), (0.5, 2)]),
    ]:
        fast = chainrule.compile(f, budget=False)
        eager = run(f, calls)
        got = run(fast, calls)
        assert [v for v, _ in got] == [v for v, _ in eager]
        for (_, g), (_, e) in zip(got, eager):
            assert g == pytest.approx(e, rel=1e-12, abs=1e-15)
        assert fast.stats()["hits"] >= 1


def test_a_number_compile_cannot_follow_is_named_at_the_users_line() -> None:
    """``max(w, x) * 2.0`` where the float argument wins: eager's number,
    and the warning names the user's line and a traced number, not a read
    from ``.data`` in compile's own file."""
    w = Value(0.5)

    def f(x: float) -> Any:
        return max(w, x) * 2.0  # (the line the warning names)

    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning) as caught:
        assert fast(3.0) == f(3.0) == 6.0
    words = str(caught[0].message)
    line = f.__code__.co_firstlineno + 1
    assert f"{__file__}:{line}: a traced number (a float argument" in words


def test_explain_on_a_compiled_output_says_it_is_one() -> None:
    """``explain`` of a compiled call's output refuses in one line that
    names compile and what to do instead."""
    w = Value(0.5)
    fast = chainrule.compile(lambda x: (w * x).tanh() * 2.0, budget=False)
    out = fast(1.0)
    with pytest.raises(TypeError, match=r"a chainrule\.compile output is one node") as caught:
        chainrule.explain(out)
    assert "without chainrule.compile" in str(caught.value)


def test_chainrule_grad_inside_a_compiled_function_names_the_walk() -> None:
    """``chainrule.grad(g)`` called inside ``fn``: eager's numbers, and the
    warning names the graph walk, not chainrule's own wrapper naming itself
    as a function attribute written."""
    w = Value(0.5)

    def f(x: float) -> Value:
        g = chainrule.grad(lambda v: (v * x).tanh())
        return w * g(w.data)

    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning) as caught:
        got = [fast(2.0).data, fast(3.0).data]
    assert got == [f(2.0).data, f(3.0).data]
    words = " ".join(str(c.message) for c in caught)
    assert "walks the graph inside the function" in words
    assert "attribute of a function" not in words


def test_a_max_result_is_the_winner_by_identity_and_a_nan_is_found_in_its_list() -> None:
    """``m = max(x, y); m is x`` and ``ds.index(max(ds))`` with a nan among
    the reads: eager's answers on the call that traces and on replays (the
    result stands for the winner; which one wins is guarded)."""
    w = Value(1.0)
    ps = [Value(math.nan), Value(0.2), Value(-0.4)]

    def pick(x: float, y: float) -> Value:
        m = max(x, y)
        return w * (x if m is x else -y)

    def argmax() -> Value:
        ds = [p.data for p in ps]
        return ps[1] * (ds.index(max(ds)) + ds.count(max(ds)) + 1.0)

    fast = chainrule.compile(pick, budget=False)
    calls = [(1.5, 1.0), (0.5, 1.0), (2.0, 1.0), (0.25, 3.0)]
    assert [fast(x, y).data for x, y in calls] == [pick(x, y).data for x, y in calls]
    fast_argmax = chainrule.compile(argmax, budget=False)
    eager = argmax().data
    assert [fast_argmax().data, fast_argmax().data] == [eager, eager] == [0.4, 0.4]


def test_a_max_that_raises_and_is_caught_leaves_its_candidates_as_they_are() -> None:
    """``try: max(a, b, cap) except TypeError: max(a, b)``: the float that
    was winning when the first call raised keeps its own number."""
    w, u = Value(1.0), Value(1.0)

    def loss(a: float, b: float, cap: Any = None) -> Value:
        try:
            hi = max(a, b, cap)
        except TypeError:
            hi = max(a, b)
        return w * hi + u * a

    def run(f: Callable[..., Value]) -> list[tuple[float, float]]:
        got = []
        for a, b in [(2.0, 1.0), (0.5, 1.0), (-3.0, 2.5)]:
            u.grad = 0.0
            out = f(a, b)
            out.backward()
            got.append((out.data, u.grad))
        return got

    assert run(chainrule.compile(loss, budget=False)) == run(loss)


def test_a_private_slot_is_guarded_under_its_mangled_name() -> None:
    """``__slots__ = ("__scale",)`` stores ``_Param__scale``: guarded as any
    slot, on a Value of your subclass and on a plain object."""

    class Param(Value):
        __slots__ = ("__scale",)

        def scaled(self) -> Value:
            return self * self.__scale

        def rescale(self, s: float) -> None:
            self.__scale = s

    class Cfg:
        __slots__ = ("__t",)

        def __init__(self, t: float) -> None:
            self.__t = t

        def temperature(self) -> float:
            return self.__t

        def set(self, t: float) -> None:
            self.__t = t

    p = Param(2.0)
    p.rescale(2.0)
    cfg = Cfg(2.0)

    def f(x: float) -> Value:
        return p.scaled() * x / cfg.temperature()

    fast = chainrule.compile(f, budget=False)
    got, eager = [], []
    for s in (2.0, 5.0, 8.0):
        p.rescale(s)
        cfg.set(s / 2.0)
        eager.append(f(3.0).data)
        got.append(fast(3.0).data)
    assert got == eager


def test_a_numpy_random_import_while_tracing_is_not_a_draw(tmp_path: Any) -> None:
    """A module the function imports lazily that loads ``numpy.random``
    (no draw): the function replays, no warning (the generators' states
    before and after a trace are compared only where both are known)."""
    script = """
import sys, warnings
import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning
warnings.simplefilter("error", CompileWarning)
assert "numpy.random" not in sys.modules
w = Value(0.5)
def loss(x):
    import numpy.random  # noqa: F401 (loaded here, nothing drawn)
    return w * x + 0.2
fast = chainrule.compile(loss, budget=False)
print([fast(x).data == loss(x).data for x in (1.0, 2.0, 3.0)], fast.traces, fast.hits)
"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(chainrule.__file__).parent.parent)  # (this tree's chainrule)
    env = {**os.environ, "PYTHONPATH": src}
    path = tmp_path / "lazy_import.py"  # (a file: compile copies code from its source)
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.stdout.split() == ["[True,", "True,", "True]", "1", "2"], done.stderr[-800:]


def test_an_output_beside_the_loss_that_it_does_not_use_is_not_warned_about() -> None:
    """``return loss, metric`` where the loss does not depend on the metric:
    a backward from a graph built on the loss leaves ``metric.grad`` 0.0, as
    eagerly, and says nothing."""
    w = Value(0.5)

    def f(x: float) -> tuple[Value, Value]:
        out = w * x
        return (out - 1.0) ** 2, out * 3.0

    fast = chainrule.compile(f, budget=False)
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for fn in (f, fast, fast):
            w.grad = 0.0
            outs = [fn(x) for x in (1.0, 3.0)]
            (sum(loss for loss, _ in outs) * 0.5).backward()
            got.append((w.grad, outs[0][1].grad))
    assert got == [(1.0, 0.0)] * 3  # 0.5 * (2 * (0.5 - 1) * 1 + 2 * (1.5 - 1) * 3)


def test_a_function_defined_inside_fn_replays_its_reads() -> None:
    """A helper made inside ``fn`` (a nested ``def``, a ``lambda``: microgpt's
    stable softmax kept local) runs as part of the copy: its ``.data`` reads
    are followed, not guards, so parameter updates do not trace again."""
    W = [Value(0.3), Value(-0.2), Value(0.9)]

    def loss(t: int) -> Value:
        def softmax(logits: list[Value]) -> list[Value]:
            m = max(v.data for v in logits)
            ex = [(v - m).exp() for v in logits]
            s = sum(ex, Value(0.0))
            return [e / s for e in ex]

        logits = [w * 2.0 for w in W]
        return -softmax(logits)[t].log()

    fast = chainrule.compile(loss, budget=False)
    for step in range(5):
        for fn in (loss, fast):
            for w in W:
                w.grad = 0.0
            fn(step % 3).backward()
            if fn is loss:
                eager = [w.grad for w in W]
        assert [w.grad for w in W] == pytest.approx(eager, rel=1e-12, abs=0.0)
        for w in W:
            w.data -= 0.1 * w.grad
    assert fast.stats()["retraces"] == 0 and fast.stats()["hits"] >= 2


def test_the_warning_about_nodes_beside_follows_the_calls_picks() -> None:
    """Which returned nodes a loss picked by an int argument depends on
    changes with the pick: a call whose loss uses ``h`` says so, whatever
    calls came before."""
    W = [Value(0.5), Value(-0.3), Value(0.8)]

    def f(x: float, task: int) -> tuple[Value, Value]:
        h = (W[0] * x).tanh()
        g = (W[1] * x).tanh()
        heads = [h, g, W[2]]
        return h, heads[task] ** 2 + W[2]

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for task in (1, 2):
            _, loss = fast(0.7, task)
            (loss * 2.0).backward()
        assert not caught
        _, loss = fast(0.7, 0)
        (loss * 2.0).backward()
    assert ["returned beside" in str(c.message) for c in caught] == [True]


def test_a_running_max_stands_for_the_first_winner_by_identity() -> None:
    """``best = max(best, x)`` over a list, then ``best is xs[0]``; and
    ``n = max(max(a, b), c); n is m``: eager's answers, on the call that
    traces and on replays."""
    u = Value(1.0)

    def running(xs: list[float]) -> Value:
        best = xs[0]
        for x in xs[1:]:
            best = max(best, x)
        return u * (best + (1.0 if best is xs[0] else 0.0))

    def nested(a: float, b: float, c: float) -> Value:
        m = max(a, b)
        n = max(m, c)
        return u * (2.0 if n is m else 1.0)

    fast_running = chainrule.compile(running, budget=False)
    fast_nested = chainrule.compile(nested, budget=False)
    lists = [[3.0, 1.0, 2.0], [1.0, 3.0, 2.0], [4.0, 0.5, 1.0], [0.5, 0.2, 0.9]]
    assert [fast_running(xs).data for xs in lists] == [running(xs).data for xs in lists]
    triples = [(3.0, 1.0, 2.0), (1.0, 2.0, 5.0), (4.0, 0.5, 1.0)]
    assert [fast_nested(*t).data for t in triples] == [nested(*t).data for t in triples]


def test_repeated_int_labels_handed_to_c_code_leave_the_argument_as_it_was() -> None:
    """``Counter(ys)`` (class weights) with a label repeated in the batch:
    the argument list is not taken for changed (its two 1s are one int
    object), so the function replays."""
    import collections

    w = Value(0.5)

    def loss(x: float, ys: list[int], table: dict[int, int]) -> Value:
        counts = collections.Counter(ys)
        weight = sum(1.0 / counts[y] for y in ys) + sum(dict.fromkeys(table, 1.0).values())
        return w * x * weight

    fast = chainrule.compile(loss, budget=False)
    calls = [(1.0, [1, 2, 1], {3: 3, 4: 3}), (2.0, [1, 2, 1], {3: 3, 4: 3})]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert [fast(*c).data for c in calls] == [loss(*c).data for c in calls]
    assert fast.stats()["hits"] == 1
