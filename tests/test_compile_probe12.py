"""chainrule.compile and the twelfth probe (round twenty-two): picks of
picks on a call that runs eagerly, picks returned beside a loss that uses
their node through another pick, leaves made inside and returned through
a pick, and what code compile follows (class-based decorators, modules by
a relative name, functools caches cleared). Eager's numbers, or a warned
eager call, never another number."""

from __future__ import annotations

import math
import os
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _runs(f: Any, calls: list[tuple[Any, ...]], after: Any) -> list[Any]:
    """``after(f(*args))`` for each call, eagerly and compiled (a fresh
    compile), warnings of compile's only."""
    results = []
    for g in (f, chainrule.compile(f, budget=False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append([after(g(*args)) for args in calls])
        assert all(issubclass(w.category, CompileWarning) for w in caught)
    return results


def test_a_pick_of_a_pick_on_a_call_that_runs_eagerly_has_its_gradient() -> None:
    """``R[i][j]`` in a function that runs eagerly from the call that
    traces (``random.random()`` inside): that call's result reaches the
    picked entry (its backward pass stopped at a stand-in: every .grad 0)."""
    R = [[Value(0.5), Value(-1.0)], [Value(2.0), Value(3.0)]]
    flat = [v for row in R for v in row]

    def f(x: float, i: int, j: int) -> Value:
        return R[i][j] * x + random.random() * 0.0

    def grads(out: Value) -> list[float]:
        for p in flat:
            p.grad = 0.0
        out.backward()
        return [p.grad for p in flat]

    eager, got = _runs(f, [(3.0, 1, 0), (3.0, 0, 1)], grads)
    assert eager == [[0.0, 0.0, 3.0, 0.0], [0.0, 3.0, 0.0, 0.0]]
    assert got == eager


def test_a_step_with_backward_inside_and_a_pick_of_a_pick() -> None:
    R = [[Value(0.5), Value(-1.0)], [Value(2.0), Value(3.0)]]
    flat = [v for row in R for v in row]

    def step(x: float, i: int, j: int) -> Value:
        loss = (R[i][j] * x - 1.0) ** 2
        loss.backward()
        for p in flat:
            p.data -= 0.1 * p.grad
            p.grad = 0.0
        return loss

    rows = []
    for g in (step, chainrule.compile(step, budget=False)):
        for p, v in zip(flat, (0.5, -1.0, 2.0, 3.0)):
            p.data = v
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            rows.append([(g(3.0, 1, 0).data, [p.data for p in flat]) for _ in range(2)])
    assert rows[0][0][1][2] == 2.0 - 0.1 * 2 * 5.0 * 3.0
    assert rows[1] == rows[0]


def test_an_optimizer_step_that_reads_a_label_through_a_pick_of_a_pick() -> None:
    rows = []
    for compiled in (False, True):
        E = [[Value(0.5), Value(-1.0)], [Value(2.0), Value(3.0)]]
        opt = optim.SGD([v for r in E for v in r], lr=0.1)

        def loss(tok: int, d: int, y: float) -> Value:
            if E[tok][d].label == "frozen":  # noqa: B023
                return Value(0.0)
            return (E[tok][d] * 2.0 - y) ** 2  # noqa: B023

        step = chainrule.compile(loss, optimizer=opt, budget=False)
        got = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            for _ in range(3):
                if compiled:
                    out = step(1, 0, 1.0)
                else:
                    out = loss(1, 0, 1.0)
                    opt.zero_grad()
                    out.backward()
                    opt.step()
                got.append((out.data, E[1][0].data))
        rows.append(got)
    assert rows[0][0] == (9.0, 2.0 - 0.1 * 2 * 3.0 * 2.0)
    assert rows[1] == rows[0]


def test_a_pick_returned_beside_a_loss_that_uses_its_node_through_another_pick() -> None:
    """microgpt's ``-probs[t].log()`` returned with ``probs[p]``, and
    ``h[k], h[j]``: eagerly one node (its .grad gathers both uses)."""
    W = [Value(0.5), Value(-1.0), Value(2.0)]

    def f(x: float, t: int, p: int) -> tuple[Value, Value]:
        e = [(w * x).tanh().exp() for w in W]
        s = sum(e)
        probs = [ei / s for ei in e]
        return -probs[t].log(), probs[p]

    def g(x: float, k: int, j: int) -> tuple[Value, Value]:
        h = [(w * x).tanh() for w in W]
        return h[k], h[j]

    def after_f(out: tuple[Value, Value]) -> tuple[float, float]:
        out[0].backward()
        return out[1].data, out[1].grad

    def after_g(out: tuple[Value, Value]) -> tuple[float, bool]:
        (out[0] + out[1]).backward()
        return out[0].grad, out[0] is out[1]

    calls = [(x, 1, p) for x in (0.5, 0.7) for p in (1, 2)]
    eager, got = _runs(f, calls, after_f)
    assert eager[0][1] != 0.0 and eager[1][1] == 0.0
    assert got == eager
    eager, got = _runs(g, calls, after_g)
    assert eager[0] == (2.0, True) and eager[1] == (1.0, False)
    assert got == eager


def test_a_parameter_picked_and_returned_beside_the_loss_replays() -> None:
    """A pick of a parameter is the parameter itself, with eager's .grad:
    it replays (it ran eagerly, warning of "a list of nodes it made")."""
    W = [Value(0.5), Value(-1.0), Value(2.0)]

    def f(x: float, k: int) -> tuple[Value, Value]:
        return sum((w * x).tanh() for w in W) + W[k] * 2.0, W[k]

    def after(out: tuple[Value, Value]) -> tuple[float, float, bool]:
        for w in W:
            w.grad = 0.0
        out[0].backward()
        return out[0].data, out[1].grad, out[1] is W[1]

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [after(fast(x, 1)) for x in (0.5, 0.7, 0.9)]
    assert got == [after(f(x, 1)) for x in (0.5, 0.7, 0.9)]
    assert fast.stats()["hits"] == 2


def test_a_leaf_made_inside_and_returned_through_a_pick() -> None:
    w = Value(0.5)

    def named(x: list[float], k: int) -> Value:
        xs = [Value(v, label=f"x{n}") for n, v in enumerate(x)]
        return xs[k]

    def saliency(x: list[float], k: int, j: int) -> tuple[Value, Value]:
        xs = [Value(v) for v in x]
        return (w * xs[k]) ** 2, xs[j]

    def after(out: tuple[Value, Value]) -> float:
        out[0].backward()
        return out[1].grad

    calls: list[tuple[Any, ...]] = [([1.0, 2.0], 1), ([3.0, 4.0], 0)]
    eager, got = _runs(named, calls, lambda leaf: (leaf.data, leaf.label))
    assert eager == [(2.0, "x1"), (3.0, "x0")]
    assert got == eager
    calls = [([1.0, 2.0], 1, 1), ([3.0, 4.0], 0, 0), ([3.0, 4.0], 0, 1)]
    eager, got = _runs(saliency, calls, after)
    assert eager == [1.0, 1.5, 0.0]  # (2 w**2 x)
    assert got == eager


FLAG = True


def test_a_flag_toggled_between_calls_keeps_a_trace_per_value() -> None:
    """A global flag (train/eval) and a branch on a float argument toggled
    at every call: one trace per side, replayed (each call traced again)."""
    global FLAG
    w = Value(0.5)

    def f(x: float) -> Value:
        h = w * x * (0.5 if FLAG else 1.0)
        return h.relu() if x > 0 else h.tanh()

    fast = chainrule.compile(f, budget=False)
    got, eager = [], []
    try:
        for k in range(12):
            FLAG = k % 2 == 0
            x = 2.0 if k % 4 < 2 else -2.0
            got.append(fast(x).data)
            eager.append(f(x).data)
    finally:
        FLAG = True
    assert eager[:4] == [0.5, 1.0, math.tanh(-0.5), math.tanh(-1.0)]
    assert got == eager
    assert fast.stats()["traces"] == 4 and fast.stats()["hits"] == 8


def test_a_global_that_changes_at_every_call_keeps_few_traces() -> None:
    from chainrule import compiler

    w = Value(0.5)
    box = [0.0]

    def f(x: float) -> Value:
        return w * x + box[0]

    fast = chainrule.compile(f, budget=False)
    for k in range(3 * compiler.PER_GRAPH):
        box[0] = float(k)
        assert fast(2.0).data == 1.0 + k
    assert len(fast.keys()) == compiler.PER_GRAPH


K1, K2 = 2.0, 3.0


def _h1(x: Value) -> Value:
    return x * K1


def _h2(x: Value) -> Value:
    return x * K2


HELPER = _h1


def test_a_helper_rebound_is_followed_by_the_next_trace() -> None:
    """``HELPER = _h2`` traces again, and that trace guards what ``_h2``
    reads (``K2`` changed later was stale: the guards were made once, at
    the first trace). Also a method patched on the class."""
    global HELPER, K2

    class Layer:
        def act(self, x: Value) -> Value:
            return x * K1

    layer = Layer()

    def f(x: Value) -> Value:
        return HELPER(x) + 1.0

    def m(x: Value) -> Value:
        return layer.act(x) + 1.0

    def act2(self: Any, x: Value) -> Value:
        return x * K2

    def run(fn: Any) -> tuple[float, float]:
        x = Value(1.5)
        out = fn(x)
        out.backward()
        return out.data, x.grad

    fast = [chainrule.compile(fn, budget=False) for fn in (f, m)]
    try:
        rows = []
        for step in range(3):
            if step == 1:
                HELPER, Layer.act = _h2, act2  # type: ignore[method-assign]
            if step == 2:
                K2 = 5.0
            rows.append([(run(fn), run(c)) for fn, c in zip((f, m), fast)])
    finally:
        HELPER, K2 = _h1, 3.0
    assert [e for row in rows for e, _ in row] == [(4.0, 2.0)] * 2 + [(5.5, 3.0)] * 2 + [
        (8.5, 5.0)
    ] * 2
    assert all(e == c for row in rows for e, c in row)


def test_a_pick_among_a_node_and_parameters_returned_beside_the_loss() -> None:
    """``L = [W[0] * x, W[1]]; p = L[i]; return p * 3.0, p``: where ``i``
    picks the node, its .grad is filled by the loss's backward (it was 0.0)."""
    W = [Value(1.0), Value(1.5)]

    def f(x: float, i: int) -> tuple[Value, Value]:
        p = [W[0] * x, W[1]][i]
        return p * 3.0, p

    def after(out: tuple[Value, Value]) -> tuple[float, float, float, float]:
        for w in W:
            w.grad = 0.0
        out[0].backward()
        return out[0].data, out[1].grad, W[0].grad, W[1].grad

    calls = [(2.0, 0), (2.0, 1), (4.0, 0)]
    eager, got = _runs(f, calls, after)
    assert eager == [(6.0, 3.0, 6.0, 0.0), (4.5, 3.0, 0.0, 3.0), (12.0, 3.0, 12.0, 0.0)]
    assert got == eager


@pytest.mark.parametrize("zero", [0, -0.0, None])
def test_a_replay_leaves_the_grad_of_leaves_the_walk_does_not_reach(zero: Any) -> None:
    """A table's entries this call does not pick, and a Value read only
    through ``.data`` (a target network): eagerly untouched (micrograd's
    ``p.grad = 0`` stays an int, -0.0 stays, None stays); a replay wrote
    ``0.0`` there, or raised TypeError for None."""
    E = [[Value(0.1 * i + 0.01 * j) for j in range(3)] for i in range(4)]
    w, target = Value(0.5), Value(2.0)

    def f(i: int, x: float) -> Value:
        return sum((e * e for e in E[i]), w * x - target.data * 0.9)

    def after(out: Value) -> str:
        for row in E:
            for e in row:
                e.grad = zero
        for e in (*E[1], *E[2]):  # (the rows the calls pick)
            e.grad = 0.0
        target.grad, w.grad = zero, 0.0
        out.backward()
        return repr([e.grad for e in E[0]] + [e.grad for e in E[2]] + [target.grad, w.grad])

    eager, got = _runs(f, [(2, 1.5), (2, 2.5), (1, 1.5)], after)
    assert eager[0] == repr([zero] * 3 + [0.4, 0.42000000000000004, 0.44, zero, 1.5])
    assert got == eager


def test_an_optimizer_step_leaves_the_grad_of_leaves_it_does_not_reach() -> None:
    w, target = Value(0.5), Value(2.0)
    opt = optim.SGD([w], lr=0.1)

    def loss(x: float) -> Value:
        return (w * x - target.data) ** 2

    step = chainrule.compile(loss, optimizer=opt, budget=False)
    target.grad = 0
    for x in (1.0, 2.0, 3.0):
        step(x)
        assert repr(target.grad) == "0"


def _module_with_code(name: str) -> Any:
    """A module of the user's with data, a function reading its global and
    a ``__getattr__`` serving an attribute from its state."""
    import types

    module = types.ModuleType(name)
    exec(
        "K = 1.0\nscale = 2.0\n_state = {'dyn': 5.0}\n"
        "def helper(v):\n    return v * K\n"
        "def __getattr__(name):\n"
        "    if name == 'dyn':\n        return _state['dyn']\n"
        "    raise AttributeError(name)\n",
        module.__dict__,
    )
    return module


def test_a_module_found_by_a_computed_name_is_followed_into_its_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``sys.modules[name].helper(x)`` (the helper's global changed),
    ``.dyn`` served by the module's ``__getattr__``, a module found by a
    helper and read by the caller, and ``getattr(sys, "modules")``: every
    change is eager's (each replayed the first number)."""
    import sys

    module = _module_with_code("probe12_cfg")
    monkeypatch.setitem(sys.modules, "probe12_cfg", module)
    name = "probe12_" + "cfg"

    def found(n: str) -> Any:
        return sys.modules[n]

    fns = [
        lambda x: sys.modules[name].helper(x),
        lambda x: x * sys.modules[name].dyn,
        lambda x: x * found(name).scale,
        lambda x: x * getattr(sys, "modules")[name].scale,  # noqa: B009 (probe AC1)
    ]

    def run(fn: Any) -> tuple[float, float]:
        x = Value(1.5)
        out = fn(x)
        out.backward()
        return out.data, x.grad

    fast = [chainrule.compile(fn, budget=False) for fn in fns]
    rows = []
    for step in range(3):
        if step == 1:
            module.K, module.scale = 4.0, 3.0
            module._state["dyn"] = 7.0
        rows.append([(run(fn), run(c)) for fn, c in zip(fns, fast)])
    assert [e for e, _ in rows[2]] == [(6.0, 4.0), (10.5, 7.0), (4.5, 3.0), (4.5, 3.0)]
    assert all(e == c for row in rows for e, c in row)


def test_a_function_kept_in_a_dict_is_followed() -> None:
    """``TABLE["act"](x)``: the globals the stored function reads are
    guarded (it was compared by identity only), also once rebound."""
    global K2
    table = {"act": _h1}

    def f(x: Value) -> Value:
        return table["act"](x) + 1.0

    fast = chainrule.compile(f, budget=False)
    rows = []
    try:
        for step in range(4):
            if step == 1:
                table["act"] = _h2
            if step == 2:
                K2 = 5.0
            x, y = Value(1.5), Value(1.5)
            e, c = f(x), fast(y)
            e.backward()
            c.backward()
            rows.append(((e.data, x.grad), (c.data, y.grad)))
    finally:
        K2 = 3.0
    assert [e for e, _ in rows] == [(4.0, 2.0), (5.5, 3.0), (8.5, 5.0), (8.5, 5.0)]
    assert all(e == c for e, c in rows)


def test_an_optimizer_kept_on_the_model_does_not_retrace_the_step() -> None:
    """``self.opt = Adam(...)`` and ``compile(self.loss, optimizer=self.opt)``:
    the step's own optimizer state (moments, step count) is not a guard
    (every step traced again: probe AD2); the losses are eager's."""

    class Model:
        def __init__(self) -> None:
            self.w, self.b = Value(0.5), Value(-0.25)
            self.opt = optim.Adam([self.w, self.b], lr=0.05)

        def loss(self, x: float, y: float) -> Value:
            return (self.w * x + self.b - y) ** 2

    losses = []
    for compiled in (False, True):
        m = Model()
        step = chainrule.compile(m.loss, optimizer=m.opt, budget=False)
        got = []
        for k in range(6):
            x, y = 0.5 * k, 1.0 - 0.25 * k
            if compiled:
                got.append(step(x, y).data)
            else:
                out = m.loss(x, y)
                m.opt.zero_grad()
                out.backward()
                m.opt.step()
                got.append(out.data)
        losses.append((got, m.w.data, m.b.data))
    assert losses[0][0][0] == (0.5 * 0.0 - 0.25 - 1.0) ** 2
    assert losses[1] == losses[0]
    assert step.stats()["traces"] == 1 and step.stats()["hits"] == 5


def test_a_cached_list_changed_in_place_and_the_cache_s_counters() -> None:
    """``lru_cache`` handing back a list the user changes in place between
    calls (the same object: its contents were not guarded), and
    ``cache_info()`` read inside the function: eager's numbers."""
    import functools

    @functools.cache
    def table(k: int) -> list[float]:
        return [float(k), 2.0]

    def f(x: Value) -> Value:
        t = table(3)
        return x * t[0] + t[1]

    def g(x: Value) -> Value:
        return x * table(3)[1] + table.cache_info().hits

    def run(fn: Any) -> tuple[float, float]:
        x = Value(1.5)
        out = fn(x)
        out.backward()
        return out.data, x.grad

    fast_f, fast_g = (chainrule.compile(h, budget=False) for h in (f, g))
    rows = []
    for k in range(3):
        table(3)[0] = 10.0 + k
        rows.append((run(f), run(fast_f)))
    assert [e for e, _ in rows] == [(17.0, 10.0), (18.5, 11.0), (20.0, 12.0)]
    assert all(e == c for e, c in rows)
    counted = []
    for h in (g, fast_g):
        table.cache_clear()
        counted.append([run(h)[0] for _ in range(3)])
    assert counted[0] == [3.0, 4.0, 5.0]  # (hits: 0, 1, 2)
    assert counted[1] == counted[0]


def test_a_cache_is_called_again_only_where_eager_code_calls_it(tmp_path: Path) -> None:
    """A kept trace whose other guard fails does not call the cache (it
    recomputed a cleared entry eager code never asked for). The calls are
    counted in a file: state compile does not guard."""
    import functools

    log = str(tmp_path / "log")

    @functools.cache
    def table(k: int) -> float:
        with open(log, "a") as out:
            out.write(f"{k}\n")
        return 2.0 * k

    def f(x: Value, use: float) -> Value:
        return x * table(3) if use > 0 else x * use

    fast = chainrule.compile(f, budget=False)
    for g in (f, fast):
        open(log, "w").close()
        got = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            for use in (1.0, -1.0, -2.0, 2.0):
                table.cache_clear()
                got.append(g(Value(1.5), use).data)
        assert got == [9.0, -1.5, -3.0, 9.0]
        with open(log) as read:
            assert read.read().split() == ["3", "3"]
    assert fast.stats()["hits"] == 2


class _Gain:
    """A decorator written as a class (``__wrapped__`` set)."""

    def __init__(self, fn: Any) -> None:
        import functools

        functools.update_wrapper(self, fn)

    def __call__(self, x: Value) -> Value:
        return self.__wrapped__(x) * GAIN  # type: ignore[attr-defined]


GAIN = 1.0


def _double(x: Value) -> Value:
    return x * 2.0


def _act(x: Value) -> Value:
    return x * K1


def test_code_kept_as_data_is_followed_whatever_its_kind() -> None:
    """A decorator object in a list and a ``staticmethod`` in a dict,
    called from there: the globals they read are guarded (stale before)."""
    global GAIN, K1
    acts = [_Gain(_double)]
    table = {"act": staticmethod(_act)}

    def f(x: Value) -> Value:
        return acts[0](x) + table["act"](x)

    fast = chainrule.compile(f, budget=False)
    rows = []
    try:
        for gain, k1 in ((1.0, 2.0), (2.0, 2.0), (2.0, 3.0)):
            GAIN, K1 = gain, k1
            rows.append((f(Value(1.5)).data, fast(Value(1.5)).data))
    finally:
        GAIN, K1 = 1.0, 2.0
    assert rows == [(6.0, 6.0), (9.0, 9.0), (10.5, 10.5)]


STEP = 0.5


def test_what_changed_between_calls_is_named() -> None:
    """The warning of a function whose guards fail at every call names the
    binding that changed (``self.step_count`` a Trainer bumps: the warning
    said only "a global, a closure's or self's value")."""
    from chainrule.compiler.sources import Sources

    class Trainer:
        def __init__(self) -> None:
            self.w, self.step_count = Value(0.5), 0

        def loss(self, x: float) -> Value:
            return self.w * x * STEP

    t = Trainer()
    sources = Sources(t.loss)
    before = sources.take()
    assert sources.hold(before)
    t.step_count += 1
    assert not sources.hold(before)
    assert sources.changed(before) == "the attribute step_count"
    t.step_count -= 1
    globals()["STEP"] = 0.25
    try:
        assert sources.changed(before) == "the global STEP"
    finally:
        globals()["STEP"] = 0.5


def test_float_of_a_class_of_yours_reads_its_value_at_every_call() -> None:
    """``float(temp)`` where ``temp.__float__`` returns a Value's ``.data``:
    the number read at each call (the trace's was replayed), no warning;
    and ``functools.cmp_to_key`` (unhashable) inside the function works."""
    import functools

    class Scalar:
        def __init__(self, v: Value) -> None:
            self.v = v

        def __float__(self) -> float:
            return self.v.data

    w = Value(0.5)
    temp = Scalar(Value(2.0))
    key = functools.cmp_to_key(lambda a, b: (a.data > b.data) - (a.data < b.data))

    def f(x: float) -> Value:
        vs = sorted([w * x, w + x], key=key)
        return vs[0] / float(temp)

    fast = chainrule.compile(f, budget=False)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(4):
            temp.v.data = 2.0 + step
            rows.append((f(3.0).data, fast(3.0).data))
    assert rows == [(1.5 * (2.0 + k) ** -1, 1.5 * (2.0 + k) ** -1) for k in range(4)]


def test_a_cache_raising_before_a_replay_raises_once(tmp_path: Path) -> None:
    """The cache's function raising when a replay calls it again (an entry
    cleared, its file gone) raises that error once, as eagerly (it was
    swallowed, then the function traced and raised again: two loads). The
    loads are counted in a file: state compile does not guard."""
    import functools

    scale, log = tmp_path / "scale", tmp_path / "log"
    scale.write_text("2.0")
    folder = str(tmp_path)  # (a str: a Path caches its parts on first use, a change)

    @functools.cache
    def load(name: str) -> float:
        with open(os.path.join(folder, "log"), "a") as out:
            out.write(name + "\n")
        with open(os.path.join(folder, name)) as read:
            return float(read.read())

    def f(x: Value) -> Value:
        return x * load("scale")

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert [fast(Value(v)).data for v in (1.5, 2.5)] == [3.0, 5.0]
    assert fast.stats()["hits"] == 1
    load.cache_clear()
    scale.unlink()
    with pytest.raises(FileNotFoundError):
        fast(Value(1.5))
    assert log.read_text().split() == ["scale", "scale"]


def test_a_cache_called_with_a_value_runs_eagerly() -> None:
    """A Value argument of a functools cache is a key by identity: eagerly
    each new Value misses (its function runs); a replay called it with the
    traced one."""
    import functools

    seen = []

    @functools.cache
    def feature(v: Value) -> float:
        seen.append(v.data)
        return v.data * 2.0

    def f(x: Value) -> Value:
        return x * feature(x)

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(Value(v)).data for v in (1.0, 2.0, 3.0)]
    assert got == [2.0, 8.0, 18.0] and seen == [1.0, 2.0, 3.0]
    assert "calls a functools cache with a Value" in " ".join(str(w.message) for w in caught)


WEIGHTS = {"a": Value(0.5), "b": Value(1.5)}
PARAMS = WEIGHTS.values()
SCALES = [1.0, 2.0, 3.0]


def test_a_dict_view_it_reads_holds_and_a_shrunk_list_is_named() -> None:
    """A dict view held as a global replays (``.mapping`` is a new object
    at each access: it ran eagerly, "changes a global while it runs"); a
    global list that shrinks is named."""
    from chainrule.compiler.sources import Sources

    def f(x: float) -> Value:
        return sum((p * x for p in PARAMS), Value(0.0)) * SCALES[0]

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert [fast(x).data for x in (1.0, 2.0)] == [f(x).data for x in (1.0, 2.0)]
    assert fast.stats()["hits"] == 1
    sources = Sources(f)
    before = sources.take()
    SCALES.pop()
    try:
        assert sources.changed(before) == "the global SCALES"
    finally:
        SCALES.append(3.0)
