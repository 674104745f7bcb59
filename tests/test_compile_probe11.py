"""chainrule.compile and the eleventh probe (round seventeen): the float
an operation hands back may be an object eager code already holds
(``relu`` hands back its input's, ``max`` and ``softplus`` the shared
``math.nan``), and ``Value(x)`` holds ``x`` itself. Identity (``is``, a
nan found in a list) asked of them is eager's on the call that traces,
and later calls run eagerly; never a silent other answer."""

from __future__ import annotations

import math
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning
from test_compile_probe10 import _both

pytestmark = pytest.mark.usefixtures("trace_every_graph")


W = Value(2.0)


def test_a_leaf_made_from_a_float_argument_holds_that_very_float() -> None:
    def f(x: float) -> Value:
        return W * (1.0 if Value(x).data is x else 3.0)

    eager, got, words = _both(f, [(float("1.5"),), (float("-2.5"),)])
    assert eager == [2.0, 2.0]
    assert got == eager
    assert words == ""  # (a guard that the argument is the leaf's float: always)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_relu_hands_back_its_input_float_itself(sign: float) -> None:
    p = Value(1.5 * sign)

    def f(x: float) -> Value:
        h = p * x
        return W * (1.0 if h.relu().data is h.data else 3.0)

    eager, got, words = _both(f, [(1.0,), (2.0,), (-1.0,)])
    assert eager == ([2.0, 2.0, 6.0] if sign > 0 else [6.0, 6.0, 2.0])
    assert got == eager
    assert "asks whether two objects are one" in words


def test_a_nan_through_relu_is_found_in_a_list_by_identity() -> None:
    nan = float("nan")
    p = Value(nan)

    def found(x: float) -> Value:
        return W * float([x].count(Value(x).relu().data))

    def member(x: float) -> Value:
        return W * (1.0 if x in [Value(x).relu().data] else 3.0)

    def leaf() -> Value:
        return W * (1.0 if p.relu().data in [p.data] else 3.0)

    for f, args in [(found, (nan,)), (member, (nan,)), (leaf, ())]:
        eager, got, _ = _both(f, [args] * 3)
        assert eager == [2.0, 2.0, 2.0]
        assert got == eager


def test_max_and_softplus_of_a_nan_hand_back_one_shared_nan() -> None:
    a, b, c, d = Value(1.0), Value(math.nan), Value(3.0), Value(math.nan)

    def f() -> Value:
        return W * (1.0 if a.max(b).data in [c.max(d).data] else 3.0)

    def g() -> Value:
        return W * float([b.softplus().data].count(d.softplus().data))

    def h() -> Value:
        return W * (1.0 if a.max(b).data in (math.nan, math.inf) else 3.0)

    for fn in (f, g, h):
        eager, got, _ = _both(fn, [()] * 2)
        assert eager == [2.0, 2.0]
        assert got == eager


def test_the_isnan_idiom_on_a_leaf_replays() -> None:
    """``v.data != v.data``: two reads of one Value's ``.data`` are one
    object, as eagerly; float's own ``!=`` asks no identity."""
    v = Value(1.0)

    def f(k: float) -> Value:
        return W * k * (0.0 if v.data != v.data else 1.0)

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = []
        for k, x in [(1.0, 1.0), (2.0, math.nan), (3.0, math.nan), (4.0, 2.0), (5.0, 2.0)]:
            v.data = x
            got.append(fast(k).data)
            assert got[-1] == f(k).data
    assert got == [2.0, 0.0, 0.0, 8.0, 10.0]
    assert fast.stats()["hits"] == 3  # (the trace at 1.0 is kept: 2.0 replays it)


def test_a_module_found_by_name_is_guarded_where_it_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module the function finds in ``sys.modules`` (an ``import``
    inside it, ``importlib.import_module``, ``sys.modules[...]``) replaced
    there by another (as ``monkeypatch.setitem`` does: the number of
    modules stays the same) is a change: the next call traces again."""
    import importlib
    import sys
    import types

    real, fake = types.ModuleType("probe11_cfg"), types.ModuleType("probe11_cfg")
    real.scale, fake.scale = 2.0, 5.0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "probe11_cfg", real)

    def imported(x: float) -> Value:
        import probe11_cfg  # type: ignore[import-not-found]

        return W * x * probe11_cfg.scale

    def by_importlib(x: float) -> Value:
        return W * x * importlib.import_module("probe11_cfg").scale

    def by_entry(x: float) -> Value:
        return W * x * sys.modules["probe11_cfg"].scale

    for f in (imported, by_importlib, by_entry):
        fast = chainrule.compile(f, budget=False)
        for module, expected in [(real, 6.0), (fake, 15.0), (real, 6.0)]:
            monkeypatch.setitem(sys.modules, "probe11_cfg", module)
            assert f(1.5).data == expected
            assert fast(1.5).data == expected
        real.scale = 3.0  # type: ignore[attr-defined]
        assert fast(1.5).data == f(1.5).data == 9.0
        real.scale = 2.0  # type: ignore[attr-defined]


def test_a_module_unloaded_and_another_loaded_is_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    import types

    def f(x: float) -> Value:
        return W * x * (1.0 if "probe11_plugin_a" in sys.modules else 3.0)

    fast = chainrule.compile(f, budget=False)
    got = [fast(1.5).data]
    monkeypatch.setitem(sys.modules, "probe11_plugin_a", types.ModuleType("probe11_plugin_a"))
    got.append(fast(1.5).data)
    monkeypatch.delitem(sys.modules, "probe11_plugin_a")
    monkeypatch.setitem(sys.modules, "probe11_plugin_b", types.ModuleType("probe11_plugin_b"))
    got.append(fast(1.5).data)
    assert got == [9.0, 3.0, 9.0]


def test_a_compiled_function_called_while_another_traces_is_followed_as_a_helper() -> None:
    """Its float arguments stay inputs of the outer trace (one trace for
    every value), and identity inside it asks about the outer arguments."""
    vs = [Value(1.0), Value(2.0)]

    def lin(x: float, y: float) -> Value:
        return W * x + y

    def soft(vs: list[Value]) -> Value:
        m = max(v.data for v in vs)
        return sum((v - m).exp() for v in vs)  # type: ignore[return-value]

    def same(x: float, y: float) -> Value:
        return W * (1.0 if x is y else 3.0)

    lin_c, soft_c, same_c = (chainrule.compile(f, budget=False) for f in (lin, soft, same))
    outer = chainrule.compile(lambda x, y: lin_c(x, y) * 2.0 + soft_c(vs), budget=False)
    for k in range(6):
        vs[1].data = 2.0 + k
        x, y = 1.0 + k, 2.0 * k
        assert outer(x, y).data == (lin(x, y) * 2.0 + soft(vs)).data
    assert outer.stats()["traces"] == 1

    a, b = float("1.5"), float("1.5")
    outer_is = chainrule.compile(lambda x, y: same_c(x, y) * 2.0, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [outer_is(x, y).data for x, y in [(a, a), (a, b), (a, a), (b, a)]]
    assert got == [4.0, 12.0, 4.0, 12.0]
    assert outer_is.stats()["eager"] is None


STEP_TIMED = """
import sys
import types
import chainrule
from chainrule import Value, optim

loaded = []


class Watched(optim.SGD):
    def zero_grad(self):  # the first thing the budget times of a step
        loaded.append(set(sys.modules))
        super().zero_grad()

    def step(self):  # the last
        super().step()
        loaded.append(set(sys.modules))


ws = [Value(0.25) for _ in range(6)]  # (enough for the flat path)
step = chainrule.compile(
    lambda x: (sum(w * x for w in ws) - 1.0) ** 2, optimizer=Watched(ws, lr=0.1)
)
step(2.0)
print(sorted(loaded[1] - loaded[0]), ws[0].data)
"""


def test_the_first_step_is_timed_without_the_imports_of_the_flat_path(tmp_path: Path) -> None:
    """The budget times an eager step's backward and update (what a replay
    saves); the first step on arrays imports ``chainrule.tensor`` (0.05-0.1
    s), which timed as a step made every trace look paid for (probe T1: 59
    traces in 60 calls, 14-50x eager's time, no warning)."""
    import subprocess
    import sys

    script = tmp_path / "step_timed.py"
    script.write_text(STEP_TIMED, encoding="utf-8")
    src = str(Path(__file__).resolve().parent.parent / "src")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": src},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", repr(0.25 - 0.1 * (2 * (6 * 0.25 * 2.0 - 1.0) * 2.0))]


# -- round eighteen (probe S) --------------------------------------------------

ZERO = 0.0
EPS = 1e-8
MADE = float("0.5")
HELD = MADE  # one object


def test_a_literal_is_the_module_s_own_constant_object() -> None:
    """Eagerly, equal literals of one module are one object (``1e-8 is
    EPS``); the copy compile runs takes its constants from the function's
    code, so identity with them is eager's."""
    p = Value(-1.0)

    def leaf(x: float) -> Value:
        return W * x * (1.0 if Value(1e-8).data is EPS else 3.0)

    def local(x: float) -> Value:
        z = 0.0
        return W * x * (1.0 if z is ZERO else 3.0)

    def picked(x: float) -> Value:  # (p < 0: max hands back its 0.0 operand's object)
        return W * x * (1.0 if p.max(0.0).data is ZERO else 3.0)

    for f in (leaf, local, picked):
        eager, got, _ = _both(f, [(1.5,), (2.5,), (1.5,)])
        assert eager == [3.0, 5.0, 3.0]
        assert got == eager


def test_two_constants_are_asked_once_then_eagerly() -> None:
    """A leaf made from one global float against another: globals are
    guarded by value, so one rebound to an equal float (another object)
    would not trace again; identity between them runs eagerly."""
    global HELD
    first = HELD

    def f(x: float) -> Value:
        return W * x * (1.0 if Value(MADE).data is HELD else 3.0)

    fast = chainrule.compile(f, budget=False)
    got, eager = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for held in (first, float("0.5"), first):
            HELD = held
            eager.append(f(2.0).data)
            got.append(fast(2.0).data)
    HELD = first
    assert eager == [4.0, 12.0, 4.0]
    assert got == eager


def test_a_float_argument_as_an_operand_is_that_float() -> None:
    p = Value(1.5)
    cases = [
        lambda x: W * (1.0 if chainrule.relu(x).data is x else 3.0),
        lambda x: W * (1.0 if chainrule.maximum(x, -1e300).data is x else 3.0),
        lambda x: W * (1.0 if p.max(x).data is x else 3.0),
        lambda x: W * (1.0 if x in [chainrule.relu(x).data] else 3.0),
    ]
    for k, f in enumerate(cases):
        x = math.nan if k == 3 else 2.5
        eager, got, _ = _both(f, [(x,), (x,)])
        assert eager == [2.0, 2.0]
        assert got == eager


def test_a_module_found_by_a_computed_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    real, fake = types.ModuleType("probe11_named"), types.ModuleType("probe11_named")
    real.scale, fake.scale = 2.0, 5.0  # type: ignore[attr-defined]
    name = "probe11_" + "named"

    def f(x: float) -> Value:
        return W * x * sys.modules[name].scale

    fast = chainrule.compile(f, budget=False)
    got = []
    for module in (real, fake, real):
        monkeypatch.setitem(sys.modules, name, module)
        got.append((fast(1.5).data, f(1.5).data))
    assert got == [(6.0, 6.0), (15.0, 15.0), (6.0, 6.0)]


PACKAGE = {
    "p11pkg/__init__.py": "",
    "p11pkg/cfg.py": "scale = 2.0\n",
    "p11pkg/user.py": (
        "from chainrule import Value\n"
        "w = Value(2.0)\n"
        "def relative(x):\n"
        "    from . import cfg\n"
        "    return w * x * cfg.scale\n"
        "def import_as(x):\n"
        "    import p11pkg.cfg as c\n"
        "    return w * x * c.scale\n"
    ),
}


def test_a_package_s_module_replaced_on_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``monkeypatch.setattr(pkg, "cfg", fake)``: ``from . import cfg`` and
    ``import pkg.cfg as c`` read the package's attribute, as eagerly."""
    import importlib
    import types

    for name, text in PACKAGE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    package = importlib.import_module("p11pkg")
    importlib.import_module("p11pkg.cfg")
    user = importlib.import_module("p11pkg.user")
    real = package.cfg
    fake = types.ModuleType("p11pkg.cfg")
    fake.scale = 5.0  # type: ignore[attr-defined]
    for f in (user.relative, user.import_as):
        fast = chainrule.compile(f, budget=False)
        got = []
        for module in (real, fake, real):
            monkeypatch.setattr(package, "cfg", module)
            got.append((fast(1.5).data, f(1.5).data))
        assert got == [(6.0, 6.0), (15.0, 15.0), (6.0, 6.0)]
    for name in ("p11pkg.user", "p11pkg.cfg", "p11pkg"):
        monkeypatch.delitem(sys.modules, name)


def test_a_partial_of_a_compiled_function_is_its_function() -> None:
    """Called while another traces, through ``functools.partial``: its own
    counters (changed by calls of its own) are not what the outer reads."""
    import functools

    inner = chainrule.compile(lambda x, y: W * x + y, budget=False)
    part = functools.partial(inner, y=2.0)
    outer = chainrule.compile(lambda x: part(x) * 3.0, budget=False)
    for k in range(5):
        inner(float(k), 1.0)
        assert outer(float(k)).data == ((W * float(k) + 2.0) * 3.0).data
    assert outer.stats()["traces"] == 1 and outer.stats()["eager"] is None


# -- round nineteen (probes U and V) -------------------------------------------


def test_two_nan_constants_stay_two_objects() -> None:
    """CPython never merges two nan constants (``1e999 - 1e999`` and
    ``-(1e999 - 1e999)`` alike in repr): the copy keeps its own."""

    def sign(x: float) -> Value:
        a = 1e999 - 1e999
        b = -(1e999 - 1e999)
        return W * x * math.copysign(1.0, a) + W * math.copysign(1.0, b)

    def found(x: float) -> Value:
        a = 1e999 - 1e999
        b = 1e999 * 0.0
        return W * x * (1.0 if a in [b] else 2.0)

    def counted(x: float) -> Value:
        return W * x * float(len({1e999 - 1e999, 1e999 * 0.0}))

    for f in (sign, found, counted):
        eager, got, _ = _both(f, [(1.5,), (2.5,)])
        assert got == eager
    assert _both(found, [(1.5,)])[0] == [6.0]


CFG = types.ModuleType("probe11_cfg_names")
CFG.scale, CFG.shift = 2.0, 1.0  # type: ignore[attr-defined]


def test_a_module_s_attributes_named_in_a_tuple_or_a_default_are_guarded() -> None:
    def in_tuple(x: float) -> Value:
        return W * x * sum(getattr(CFG, n) for n in ("scale", "shift"))

    def by_default(x: float, name: str = "scale") -> Value:
        return W * x * getattr(CFG, name)

    for f in (in_tuple, by_default):
        fast = chainrule.compile(f, budget=False)
        got = []
        for scale in (2.0, 3.0, 2.0):
            CFG.scale = scale  # type: ignore[attr-defined]
            got.append((fast(1.5).data, f(1.5).data))
        assert all(a == b for a, b in got)
        assert got[1][0] != got[0][0]


def test_one_list_for_two_arguments_warns_of_that_call() -> None:
    """The call runs eagerly, not traced; the warning says so (not the
    budget's "while its replays have not paid"), and later calls trace."""

    def f(rows: list[list[float]]) -> Value:
        return W * sum(sum(r) for r in rows)

    row = [0.5, -1.0]
    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert fast([row, row]).data == f([row, row]).data == -2.0
        assert fast([[1.0], [2.0]]).data == 6.0
    words = " ".join(str(w.message) for w in caught)
    assert "runs a call eagerly, not traced" in words and "paid" not in words
    assert "twice inside one" in words  # (one argument here: probe AD1)
    assert fast.stats()["traces"] == 1


def test_a_compiled_function_s_fn_cannot_be_rebound() -> None:
    fast = chainrule.compile(lambda x: W * x, budget=False)
    with pytest.raises(AttributeError, match=r"compile the new function"):
        fast.fn = lambda x: W * x * 3.0
    assert fast(2.0).data == 4.0


def test_a_backward_pass_by_hand_inside_runs_eagerly() -> None:
    """The lecture's manual backward: ``o.grad = 1.0; n.grad = 1 - o.data**2``
    on nodes the function made; the returned nodes keep them, as eagerly."""
    w, b = Value(0.5), Value(-0.25)

    def neuron(x: float) -> tuple[Value, Value]:
        n = x * w + b
        o = n.tanh()
        o.grad = 1.0
        n.grad = 1 - o.data**2
        return o, n

    fast = chainrule.compile(neuron, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in (2.0, 2.5, 3.0):
            eo, en = neuron(x)
            co, cn = fast(x)
            assert (co.data, co.grad, cn.grad) == (eo.data, eo.grad, en.grad)
    assert "writes .grad of a Value it made" in str(caught[0].message)


def test_labels_read_or_written_inside_run_eagerly() -> None:
    """A parameter's label (weight decay skipped for "bias") named between
    calls; a label written on a returned node or a parameter."""
    w, b = Value(0.5), Value(0.25)

    def decayed(x: float) -> Value:
        return (w * x + b) ** 2 + sum(p * p for p in (w, b) if p.label != "bias") * 0.1

    def named(x: float) -> Value:
        o = w * x
        o.label = "o"
        return o

    fast, fast_named = (chainrule.compile(f, budget=False) for f in (decayed, named))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = fast(2.0).data
        b.label = "bias"
        assert fast(2.0).data == decayed(2.0).data != first
        assert fast_named(2.0).label == "o"
    words = " ".join(str(w.message) for w in caught)
    assert "reads .label" in words and "writes .label" in words


# -- round twenty (probes W and X) ---------------------------------------------


def test_inputs_made_inside_and_returned_get_their_gradients() -> None:
    """A saliency map: ``xs = [Value(v) for v in x]; return xs, loss``; a
    backward pass from the loss fills each input's ``.grad``, as eagerly."""
    ws, b = [Value(0.7), Value(-0.4)], Value(0.1)

    def loss_and_inputs(x: list[float], y: float) -> tuple[list[Value], Value]:
        xs = [Value(v, label="x") for v in x]
        pred = (sum(wi * xi for wi, xi in zip(ws, xs)) + b).tanh()
        return xs, (pred - y) ** 2

    def saliency(f: Any, x: list[float], y: float) -> tuple[list[float], list[str]]:
        xs, loss = f(x, y)
        loss.backward()
        return [xi.grad for xi in xs], [xi.label for xi in xs]

    fast = chainrule.compile(loss_and_inputs, budget=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for x, y in (([1.0, 2.0], 0.5), ([0.5, -1.0], -0.2), ([3.0, 0.25], 1.0)):
            eager = saliency(loss_and_inputs, x, y)
            assert saliency(fast, x, y) == eager
            assert all(g != 0.0 for g in eager[0])


def test_a_detached_leaf_kept_past_the_call_is_a_plain_leaf() -> None:
    """``history.append(h.detach())``: the leaf kept is a leaf (no inputs),
    with its label, as eagerly, however the call ran."""
    w = Value(0.5)
    history: list[Value] = []

    def f(x: float) -> Value:
        h = w * x
        history.append(Value(h.data, label="kept"))
        history.append(h.detach())
        return h * 2.0

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fast(2.0)
    assert [(kept._prev, kept._op) for kept in history] == [((), "")] * 2
    assert history[1]._local == ()
    assert history[0].label == "kept"
    (history[1] * math.inf).backward()
    assert w.grad == 0.0


def test_deleting_grad_or_data_of_a_node_made_inside_is_eager_s() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        n = w * x
        del n.grad
        return n * 2.0

    fast = chainrule.compile(f, budget=False)
    assert [fast(x).data for x in (1.0, 2.0)] == [f(x).data for x in (1.0, 2.0)]


def test_a_parameter_listed_twice_and_passed_as_an_argument() -> None:
    """``SGD([w, s, s], momentum=0.9)`` with ``step(x, s)``: both places of
    ``s`` get its gradient, as the eager step gives them."""
    from chainrule import optim

    def run(compiled: bool) -> list[float]:
        w, s = Value(0.5), Value(-0.25)
        opt = optim.SGD([w, s, s], lr=0.1, momentum=0.9)

        def loss(x: float, s: Value) -> Value:
            return (w * x + s) ** 2

        if compiled:
            step = chainrule.compile(loss, optimizer=opt, budget=False)
        else:

            def step(x: float, s: Value) -> Value:
                out = loss(x, s)
                opt.zero_grad()
                out.backward()
                opt.step()
                return out

        for x in (1.0, 2.0, 3.0):
            step(x, s)
        return [*opt.buffers, w.data, s.data]

    assert run(True) == run(False)


def test_gradcheck_of_second_order_on_a_compiled_function() -> None:
    from chainrule import gradcheck

    w = Value(0.5)
    f = chainrule.compile(lambda x, y: (w * x * y).tanh() * x, budget=False)
    assert gradcheck(f, [0.3, -0.7], order=2).ok


# -- round twenty-one (probe Y) ------------------------------------------------


def test_a_pick_of_a_node_made_inside_returned_beside_the_loss_runs_eagerly() -> None:
    """``return loss, h[k]`` (``k`` an int argument, ``h`` nodes made in
    ``fn``): eagerly that very node, whose ``.grad`` gathers every use."""
    ws = [Value(0.5), Value(-0.25), Value(1.5)]

    def f(x: float, k: int) -> tuple[Value, Value]:
        h = [(w * x).tanh() for w in ws]
        loss = sum(hi * hi for hi in h) + h[k] * 3.0
        return loss, h[k]  # type: ignore[return-value]

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, k in ((1.0, 0), (2.0, 2), (0.5, 1)):
            loss, hk = f(x, k)
            loss.backward()
            closs, chk = fast(x, k)
            closs.backward()
            assert (closs.data, chk.data, chk.grad) == (loss.data, hk.data, hk.grad)
            assert hk.grad != 0.0
    assert "picked by an int argument from a list of nodes it made" in str(caught[0].message)


def test_an_interrupt_while_the_trace_sets_up_leaves_value_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C between compile's swaps of Value's attributes and its trace:
    every swap is undone (Value stayed patched for the rest of the process)."""
    from chainrule.compiler import reads

    before = dict(vars(Value))
    start = reads.set_current

    def interrupted(record: Any) -> None:
        if record is not None:
            raise KeyboardInterrupt
        start(record)

    monkeypatch.setattr(reads, "set_current", interrupted)
    w = Value(0.5)
    fast = chainrule.compile(lambda x: w * x, budget=False)
    with pytest.raises(KeyboardInterrupt):
        fast(2.0)
    monkeypatch.undo()
    assert dict(vars(Value)) == before
    assert type(Value(1.5).data) is float and reads.current() is None


def test_a_tensor_module_still_importing_is_no_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's first compiled call imports chainrule.tensor: while
    its module body runs, eager ``gradients`` here sees no Tensor class
    (it raised AttributeError on the half-made module)."""
    import types

    from chainrule import functional

    half = types.ModuleType("chainrule.tensor.tensor")
    monkeypatch.setitem(sys.modules, "chainrule.tensor.tensor", half)
    w = Value(0.5)
    assert functional._loaded_tensor_class() is None
    assert chainrule.gradients(w * 3.0, [w]) == [3.0]


def test_a_label_of_a_user_s_value_subclass_is_watched_too() -> None:
    """A parameter of the user's own ``Value`` subclass (with or without
    slots of its own) named between calls: its label is read eagerly."""

    class Param(Value):
        pass

    class Slotted(Value):
        __slots__ = ("kind",)

    w, b = Param(0.5), Slotted(0.25)

    def decayed(x: float) -> Value:
        return (w * x + b) ** 2 + sum(p * p for p in (w, b) if p.label != "bias") * 0.1

    fast = chainrule.compile(decayed, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = fast(2.0).data
        b.label = "bias"
        assert fast(2.0).data == decayed(2.0).data != first
        w.label = "bias"
        assert fast(2.0).data == decayed(2.0).data == (0.5 * 2.0 + 0.25) ** 2
    assert "reads .label" in " ".join(str(w.message) for w in caught)


@pytest.mark.parametrize("statement", ["del o.label", "o._local_grads = ()", "del w.label"])
def test_errors_of_the_watched_properties_name_the_property(statement: str) -> None:
    """``del n.label`` inside the function raises eager's error, whose
    message names the property (it said "property of 'Value' object")."""
    w = Value(2.0)

    def f(x: float) -> Value:
        o = w * x
        exec(statement, {}, {"o": o, "w": w})
        return o

    messages = []
    for g in (f, chainrule.compile(f, budget=False)):
        with pytest.raises(AttributeError) as raised:
            g(1.0)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "property '" in messages[0]


@pytest.mark.parametrize("how", ["copy.copy", "copy.deepcopy", "pickle"])
def test_a_value_copied_inside_warns_of_the_copy_at_the_user_s_line(how: str) -> None:
    """The warning names the copy and the user's line (it named a line of
    ``copy.py`` writing ``.data``, or a read of ``.grad``)."""
    import copy
    import pickle

    copier = {
        "copy.copy": copy.copy,
        "copy.deepcopy": copy.deepcopy,
        "pickle": lambda v: pickle.loads(pickle.dumps(v)),
    }[how]
    w = Value(2.0)

    def f(x: float) -> Value:
        o = w * x
        c = copier(o)  # the copy
        return o + c.data

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [fast(x).data for x in (1.0, 3.0)] == [f(x).data for x in (1.0, 3.0)]
    words = " ".join(str(w.message) for w in caught if w.category is CompileWarning)
    line = f.__code__.co_firstlineno + 2  # (pickle's: the lambda's line, which pickles)
    if how == "pickle":
        line = copier.__code__.co_firstlineno  # type: ignore[attr-defined]
    assert f"{__file__}:{line}: copies or pickles a Value" in words


def test_a_module_found_by_a_computed_name_changed_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its attributes the code names, rebound or changed in place, and a
    module loaded after the trace holding them, are seen (they were stale)."""
    module = types.ModuleType("probe11_place")
    module.scale, module.cfg = 2.0, {"k": 1.0}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "probe11_place", module)
    name = "probe11_" + "place"

    def f(x: float) -> Value:
        m = sys.modules[name]
        return W * x * m.scale + m.cfg["k"] + getattr(m, "shift", 0.0)

    fast = chainrule.compile(f, budget=False)
    got = [(fast(1.5).data, f(1.5).data)]
    module.scale = 3.0  # type: ignore[attr-defined]
    got.append((fast(1.5).data, f(1.5).data))
    module.cfg["k"] = 5.0  # type: ignore[attr-defined]
    got.append((fast(1.5).data, f(1.5).data))
    module.shift = 0.5  # type: ignore[attr-defined]
    got.append((fast(1.5).data, f(1.5).data))
    assert got == [(7.0, 7.0), (10.0, 10.0), (14.0, 14.0), (14.5, 14.5)]
