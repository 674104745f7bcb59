"""chainrule.compile and rounds twenty-nine and thirty: a class of the user's reached as
data (an entry of a dict or a list, an attribute, a default, a partial's
argument), what code reads of a NumPy array besides its numbers (strides,
flags, where its memory lies), and a cache that fills once while the
function runs (``functools.singledispatch``); a primitive of yours with
state or that raises, a write to a new node's number. Eager's numbers,
never another."""

from __future__ import annotations

import functools
import math
import struct
import types
import warnings
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning
from chainrule.value.primitives import TANH as P_TANH

pytestmark = pytest.mark.usefixtures("trace_every_graph")

W = Value(1.5)


class Config:
    scale = 1.0

    def factor(self) -> float:
        return 1.0


REGISTRY = {"cfg": Config}
CLASSES = [Config]
HOLDER = types.SimpleNamespace(cls=Config)
SCALED = functools.partial(lambda c, x: c.scale * x, Config)


def _by_dict(x: float) -> Value:
    return W * x * REGISTRY["cfg"].scale


def _by_list(x: float) -> Value:
    return W * x * CLASSES[0].scale


def _by_attribute(x: float) -> Value:
    return W * x * HOLDER.cls().factor()


def _by_default(x: float, c: type = Config) -> Value:
    return W * x * c.scale  # type: ignore[attr-defined]


def _by_partial(x: float) -> Value:
    return W * SCALED(x)


@pytest.mark.parametrize("f", [_by_dict, _by_list, _by_attribute, _by_default, _by_partial])
def test_a_class_reached_as_data_is_guarded(f: Callable[[float], Value]) -> None:
    """A class attribute changed, a method replaced between calls, on a
    class the function reaches through a dict, a list, an attribute, a
    default or a partial: traced again (it ran the first trace's number)."""
    fast = chainrule.compile(f, budget=False)
    factors = {s: (lambda self, s=s: s) for s in (1.0, 3.0, 5.0)}
    seen = []
    try:
        for s in (1.0, 1.0, 3.0, 5.0):
            Config.scale = s
            Config.factor = factors[s]  # type: ignore[method-assign]
            seen.append((f(2.0).data, fast(2.0).data))
    finally:
        Config.scale = 1.0
        Config.factor = lambda self: 1.0  # type: ignore[method-assign]
    assert seen == [(3.0, 3.0), (3.0, 3.0), (9.0, 9.0), (15.0, 15.0)]
    assert fast.stats()["hits"] == 1


def _contiguous(x: float, a: Any) -> Value:
    return W * x * (2.0 if a.flags.c_contiguous else 3.0)


def _owns(x: float, a: Any) -> Value:
    return W * x * (2.0 if a.base is None else 3.0)


def _writeable(x: float, a: Any) -> Value:
    return W * x * (2.0 if a.flags.writeable else 3.0)


BUFFER = np.zeros(3)
_READ_ONLY = np.zeros(3)
_READ_ONLY.flags.writeable = False


@pytest.mark.parametrize(
    ("f", "arrays", "expected"),
    [
        (_contiguous, lambda: [np.eye(2), np.asfortranarray(np.eye(2)), np.eye(2).T], [6, 9, 9]),
        (_owns, lambda: [np.zeros(3), BUFFER[:], np.zeros(3)], [6, 9, 6]),
        (_writeable, lambda: [np.zeros(3), _READ_ONLY, np.zeros(3)], [6, 9, 6]),
    ],
)
def test_an_array_argument_is_keyed_by_its_strides_and_flags(
    f: Callable[[float, Any], Value], arrays: Callable[[], list[Any]], expected: list[float]
) -> None:
    """Two arrays of equal bytes but another layout, one a view, one read
    only, are other keys: eager's numbers."""
    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [(f(2.0, a).data, fast(2.0, a).data) for a in arrays()]
    assert got == [(e, e) for e in expected]


def _shares(x: float, a: Any) -> Value:
    return W * x * (2.0 if np.shares_memory(a, BUFFER) else 3.0)


def _same_object(x: float, a: Any) -> Value:
    return W * x * (2.0 if id(a) == id(BUFFER) else 3.0)


@pytest.mark.parametrize("f", [_shares, _same_object])
def test_where_an_array_argument_lies_runs_eagerly(f: Callable[[float, Any], Value]) -> None:
    """``np.shares_memory`` and ``id()`` of an array argument ask what its
    key (its bytes) does not hold: eagerly, warned."""
    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning, match="shares_memory|identity"):
        got = [(f(2.0, a).data, fast(2.0, a).data) for a in (np.zeros(3), BUFFER, np.zeros(3))]
    assert got == [(9.0, 9.0), (6.0, 6.0), (9.0, 9.0)]


GLOBAL_ARRAY = np.zeros(3)


def _reads_a_flag(x: float) -> Value:
    return W * x * (2.0 if GLOBAL_ARRAY.flags.writeable else 3.0)


def test_a_global_array_made_read_only_between_calls_traces_again() -> None:
    fast = chainrule.compile(_reads_a_flag, budget=False)
    got = []
    try:
        for writeable in (True, False, True):
            GLOBAL_ARRAY.flags.writeable = writeable
            got.append((_reads_a_flag(2.0).data, fast(2.0).data))
    finally:
        GLOBAL_ARRAY.flags.writeable = True
    assert got == [(6.0, 6.0), (9.0, 9.0), (6.0, 6.0)]


@functools.singledispatch
def _scale_of(o: object) -> float:
    return 2.0


class _Thing:
    pass


_THING = _Thing()
_WEIGHTS = [Value(0.25 * k) for k in range(8)]


def _dispatched(x: float) -> Value:
    return sum((w * x for w in _WEIGHTS), Value(0.0)) * _scale_of(_THING)


def test_a_dispatch_cache_that_fills_once_is_traced_again_not_given_up() -> None:
    """``functools.singledispatch`` fills its cache the first time it meets
    a type (and after every ``register``): the function changes what it
    reads once, not at every call (a counter). It is traced again, then
    replayed, with no warning; an implementation registered between calls
    is seen."""
    fast = chainrule.compile(_dispatched, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        # (compiled first: the trace fills the cache)
        got = [(fast(2.0).data, _dispatched(2.0).data) for _ in range(4)]
        _scale_of.register(_Thing, lambda o: 7.0)
        got += [(fast(2.0).data, _dispatched(2.0).data) for _ in range(4)]
    assert got == [(28.0, 28.0)] * 4 + [(98.0, 98.0)] * 4
    assert fast.stats()["hits"] >= 4


@runtime_checkable
class _HasScale(Protocol):
    def scale(self) -> float: ...


class _Scaled:
    def scale(self) -> float:
        return 2.0


def _checked(x: float) -> Value:
    q = _Scaled()
    return sum((w * x for w in _WEIGHTS), Value(0.0)) * (
        q.scale() if isinstance(q, _HasScale) else 3.0
    )


def test_a_protocol_checked_for_the_first_time_is_replayed() -> None:
    fast = chainrule.compile(_checked, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        got = [(fast(2.0).data, _checked(2.0).data) for _ in range(4)]
    assert got == [(28.0, 28.0)] * 4
    assert fast.stats()["hits"] >= 2


COUNT = 0


def _counts(x: float) -> Value:
    global COUNT
    COUNT += 1
    return W * x * COUNT


def test_a_counter_still_runs_eagerly_after_its_second_trace() -> None:
    """A function that changes what it reads at every call: its second trace
    changes it too, and it runs eagerly from then on, each call once."""
    global COUNT
    COUNT = 0
    fast = chainrule.compile(_counts, budget=False)
    with pytest.warns(CompileWarning, match="changes a global"):
        got = [fast(2.0).data for _ in range(4)]
    assert got == [3.0, 6.0, 9.0, 12.0]
    assert COUNT == 4
    assert fast.stats()["traces"] == 2


def _bits(xs: list[float]) -> list[str]:
    return [struct.pack("<d", x).hex() for x in xs]


def test_the_rules_on_arrays_are_the_table_s_float_functions_bit_for_bit() -> None:
    """Each function of the rules' namespace on arrays gives the eager
    rules' float function's result, bit for bit, nan's sign too: NumPy's
    ``power`` squares for an exponent of 2.0 and takes ``sqrt`` for 0.5,
    where C's ``pow`` may differ in the last bit."""
    from chainrule.compiler.rules import ARRAY
    from chainrule.value.primitives import FLOAT

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=3000) * 4, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    y = np.concatenate([rng.normal(size=3000), [2.0, -1.0, 0.5, 3.0, 2.0]])
    with np.errstate(all="ignore"):
        for name in ("pow", "exp", "log", "sin", "cos", "sigmoid"):
            args = (x, y) if name == "pow" else (x,)
            got = getattr(ARRAY, name)(*args).tolist()
            assert _bits(got) == _bits([getattr(FLOAT, name)(*a) for a in zip(*args)]), name
        for c in (2.0, 0.5, -0.5, -1.0, 1.5, 3.0):
            got = ARRAY.pow_scalar(x, c).tolist()
            assert _bits(got) == _bits([FLOAT.pow_scalar(a, c) for a in x.tolist()]), c


def _cubic(xs: list[float]) -> Value:
    return sum((CUBED[0] ** 3 * x for x in xs), Value(0.0)) - CUBED[1] * CUBED[0] * sum(xs)


CUBED: list[Any] = [Value(1.0), 0.0]


def test_a_gradient_through_a_power_is_eager_s_bit_for_bit() -> None:
    """A cubic minus its linearisation at ``w``: its gradient's terms cancel
    to the last bit of ``pow(w, 2.0)``, which NumPy's square is not."""
    w = next(
        x
        for x in np.random.default_rng(1).uniform(0.1, 3.0, 10_000).tolist()
        if math.pow(x, 2.0) != float(np.power(np.array([x]), 2.0)[0])
    )
    CUBED[1] = 3.0 * math.pow(w, 2.0)
    fast = chainrule.compile(_cubic, budget=False)
    xs = [1.0] * 8
    fast(xs)  # (the trace, at 1.0)
    CUBED[0].data = w
    grads = []
    for f in (_cubic, fast):
        CUBED[0].grad = 0.0
        f(xs).backward()
        grads.append(CUBED[0].grad)
    CUBED[0].data = 1.0
    assert _bits(grads[:1]) == _bits(grads[1:])
    assert fast.stats()["hits"] == 1


def _scaled_sum(x: float) -> Value:
    return sum((w * x for w in _WEIGHTS), Value(0.0))


def test_a_refused_trace_names_a_numpy_scalar_written_to_data() -> None:
    """A checkpoint restored from an array (``p.data = saved[i]``, a NumPy
    scalar): the replay refuses it, and where the budget then runs the
    function eagerly rather than trace it, its warning names that, not a
    guard on ``.data``."""
    fast = chainrule.compile(_scaled_sum, budget=False)
    assert fast(2.0).data == fast(2.0).data == 14.0
    assert fast.stats()["hits"] == 1
    fast.budget.refuse = lambda: "tracing refused"  # type: ignore[method-assign]
    saved = np.array([w.data for w in _WEIGHTS])
    old = [w.data for w in _WEIGHTS]
    try:
        for w, d in zip(_WEIGHTS, saved):
            w.data = d
        with pytest.warns(CompileWarning, match=r"a Value's \.data is a numpy\.float64"):
            assert fast(2.0).data == _scaled_sum(2.0).data == 14.0
    finally:
        for w, d in zip(_WEIGHTS, old):
            w.data = d


# -- round thirty (AQ) ------------------------------------------------------

_WARM = {"n": 0}


def _warm_forward(x: float) -> float:
    _WARM["n"] += 1
    return x if _WARM["n"] <= 2 else 2.0 * x


def _warm_rule(M: Any, x: Any, out: Any) -> tuple[float]:
    return (1.0 if _WARM["n"] <= 2 else 2.0,)


_WARM_UP = chainrule.Primitive("warm", _warm_forward, _warm_rule)


def _warmed(x: float) -> Value:
    return _WARM_UP(W * x)


def test_a_primitive_of_yours_runs_once_on_the_call_that_traces() -> None:
    """A primitive with state (a warm-up counter): its forward and
    derivative run once per node per call, as eagerly, the call that traces
    too (the check after the trace keeps the traced values)."""

    def run(f: Callable[[float], Value]) -> list[tuple[float, float]]:
        _WARM["n"] = 0
        out = []
        for x in (1.0, 2.0, 3.0, 4.0):
            W.grad = 0.0
            y = f(x)
            y.backward()
            out.append((y.data, W.grad))
        return out

    fast = chainrule.compile(_warmed, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert run(fast) == run(_warmed) == [(1.5, 1.0), (3.0, 2.0), (9.0, 6.0), (12.0, 8.0)]
    assert fast.stats()["hits"] == 3


def _fixed_up(x: float) -> Value:
    h = W * x
    h.data = abs(h.data)  # (the number it holds, at the call that traces)
    return h * 2.0


def test_a_write_to_data_of_a_node_made_inside_runs_eagerly_even_of_its_number() -> None:
    fast = chainrule.compile(_fixed_up, budget=False)
    with pytest.warns(CompileWarning, match="writes .data of a Value it made"):
        got = [(fast(x).data, _fixed_up(x).data) for x in (1.0, -1.0, 2.0, -2.0)]
    assert got == [(3.0, 3.0), (3.0, 3.0), (6.0, 6.0), (6.0, 6.0)]


def _raising_sqrt(x: float) -> float:
    if x < 0.0:
        raise ValueError("negative")
    return math.sqrt(x)


_SAFE_SQRT = chainrule.Primitive(
    "ssqrt", _raising_sqrt, lambda M, x, out: (0.5 / out if out > 0.0 else 0.0,)
)


def _falls_back(x: float) -> Value:
    h = W * x
    try:
        return _SAFE_SQRT(h)
    except ValueError:
        return -h


def test_a_primitive_of_yours_that_raises_inside_a_try_runs_eagerly() -> None:
    """Traced where it raises, the trace holds only the ``except`` branch:
    nothing tells a replay for which inputs it raises."""
    fast = chainrule.compile(_falls_back, budget=False)
    with pytest.warns(CompileWarning, match="'ssqrt', a Primitive of yours, raises"):
        got = [(fast(x).data, _falls_back(x).data) for x in (-2.0, -1.0, 6.0, 24.0)]
    assert got == [(3.0, 3.0), (1.5, 1.5), (3.0, 3.0), (6.0, 6.0)]


# -- round thirty (AR) ------------------------------------------------------


def _relu_code(h: Value) -> Value:
    return h.relu()


def _tanh_code(h: Value) -> Value:
    return h.tanh()


def _tanh_method(self: Any, h: Value) -> Value:
    return h.tanh()


def _activation(h: Value) -> Value:
    return h.relu()


class _Net:
    def act(self, h: Value) -> Value:
        return h.relu()


_NET = _Net()
_ACTS = {"act": _relu_code}


def _through_a_global(x: float) -> Value:
    return _activation(W * x)


def _through_a_method(x: float) -> Value:
    return _NET.act(W * x)


def _through_a_dict(x: float) -> Value:
    return _ACTS["act"](W * x)


@pytest.mark.parametrize(
    ("f", "target", "new"),
    [
        (_through_a_global, lambda: _activation, _tanh_code),
        (_through_a_method, lambda: _Net.act, _tanh_method),
        (_through_a_dict, lambda: _ACTS["act"], _tanh_code),
    ],
)
def test_a_function_whose_code_is_replaced_in_place_traces_again(
    f: Callable[[float], Value], target: Callable[[], Any], new: Any
) -> None:
    """A hot reload (jurigged, IPython's autoreload) replaces a function's
    ``__code__`` in place: the same function object, another graph."""
    fast = chainrule.compile(f, budget=False)
    before = [(fast(-1.0).data, f(-1.0).data) for _ in range(2)]
    fn = target()
    old = fn.__code__
    try:
        fn.__code__ = new.__code__
        after = [(fast(-1.0).data, f(-1.0).data) for _ in range(2)]
    finally:
        fn.__code__ = old
    assert before == [(0.0, 0.0)] * 2
    assert after == [(math.tanh(-1.5),) * 2] * 2
    assert fast.stats()["hits"] == 2


def test_a_module_edited_and_reloaded_is_read_from_its_new_source(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reloaded module's functions are copied from the file as it is
    now (the line cache checked first): traced once again, then replayed,
    not traced at every call for want of their source."""
    import importlib
    import sys

    path = tmp_path / "chainrule_reloaded_helpers.py"
    path.write_text("def act(h, x):\n    return (h * x).relu()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("chainrule_reloaded_helpers")
    try:

        def f(x: float) -> Value:
            return module.act(W, x)

        fast = chainrule.compile(f, budget=False)
        assert [fast(-1.0).data for _ in range(2)] == [0.0, 0.0]
        path.write_text(
            "# edited\n\ndef act(h, x):\n    scale = 2.0\n    return (h * x).tanh() * scale\n"
        )
        importlib.reload(module)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)
            got = [fast(x).data for x in (-1.0, -2.0, -1.0, -2.0)]
        assert got == [f(x).data for x in (-1.0, -2.0, -1.0, -2.0)]
        assert fast.stats()["traces"] == 2
    finally:
        sys.modules.pop("chainrule_reloaded_helpers", None)


def _seeded(x: float) -> Value:
    chainrule.manual_seed(0)
    return W * x


def test_a_seed_set_inside_names_the_user_s_line() -> None:
    """``chainrule.manual_seed`` inside the function: the warning names the
    line that calls it, not chainrule's call of ``random.seed``."""
    fast = chainrule.compile(_seeded, budget=False)
    with pytest.warns(CompileWarning, match=r"test_compile_probe15\.py:\d+: calls random\.seed"):
        assert fast(2.0).data == 3.0


def _leaky(slope: float) -> Value:
    leaky = chainrule.Primitive(
        "leaky", lambda z: z if z > 0 else slope * z, lambda M, z, out: (1.0 if z > 0 else slope,)
    )
    return leaky(W * -2.0)


def test_a_rule_that_computes_from_a_float_argument_is_named() -> None:
    """A primitive made inside with a float argument in its derivative rule
    (a leaky slope): it runs eagerly, and the warning names the read float,
    not the type float."""
    fast = chainrule.compile(_leaky, budget=False)
    with pytest.warns(CompileWarning, match="computes a local derivative from a float the"):
        assert [fast(s).data for s in (0.01, 0.1)] == [_leaky(s).data for s in (0.01, 0.1)]


# -- round thirty-one (AS) --------------------------------------------------


class _Stop(BaseException):
    pass


def _raises_below_one(z: float) -> float:
    if z < 1.0:
        raise ValueError("below one")
    return math.tanh(z)


def _raises_a_base_exception(z: float) -> float:
    if z < 1.0:
        raise _Stop
    return 2.0 * z


_BORROWED = chainrule.Primitive("borrowed", _raises_below_one, P_TANH.derivative)
_BASE = chainrule.Primitive("base", _raises_a_base_exception, lambda M, z, out: (2.0,))
_SHORT = chainrule.Primitive(
    "short", lambda z: 2.0 * z, lambda M, z, out: (2.0,) if z >= 1.0 else (2.0, 0.0)
)


def _tried(p: Any) -> Callable[[float], Value]:
    def f(x: float) -> Value:
        h = W * x
        try:
            return p(h)
        except (ValueError, _Stop):
            return -h

    return f


@pytest.mark.parametrize("p", [_BORROWED, _BASE, _SHORT])
def test_a_primitive_raising_any_way_inside_a_try_runs_eagerly(p: Any) -> None:
    """A forward of yours with a derivative rule of the table's, a
    ``BaseException``, a derivative of the wrong length: each raises inside
    the ``try`` on the call that traces, and a replay would not."""
    f = _tried(p)
    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning, match="a Primitive .*raises"):
        got = [fast(x).data for x in (0.5, 0.5, 2.0, 4.0)]
    assert got == [f(x).data for x in (0.5, 0.5, 2.0, 4.0)]


_LOGGED: list[float] = []


def _logging_forward(z: float) -> float:
    _LOGGED.append(z)
    return math.tanh(z)


_LOGGING = chainrule.Primitive("logged", _logging_forward, P_TANH.derivative)


def _logs(x: float) -> Value:
    return _LOGGING(W * x)


def test_a_forward_of_yours_with_a_table_s_rule_runs_once_per_call() -> None:
    _LOGGED.clear()
    fast = chainrule.compile(_logs, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x in (1.0, 2.0, 3.0):
            assert fast(x).data == math.tanh(1.5 * x)
    assert _LOGGED == [1.5, 3.0, 4.5]
    assert fast.stats()["hits"] == 2


_RESET = Value(3.0)


def _resets(x: float) -> Value:
    _RESET.__init__(3.0)  # type: ignore[misc]
    return _RESET * x


def _cut(x: float) -> Value:
    h = W * x
    h._prev = ()  # (micrograd's way to cut a node off)
    return h * 2.0


@pytest.mark.parametrize(("f", "words"), [(_resets, "calls __init__"), (_cut, "writes _prev")])
def test_a_value_reset_or_cut_off_by_hand_runs_eagerly(
    f: Callable[[float], Value], words: str
) -> None:
    def run(g: Callable[[float], Value]) -> list[tuple[float, ...]]:
        rows = []
        for x in (1.0, 2.0, 3.0):
            _RESET.data = 11.0  # (set between calls: the function resets it)
            W.grad = _RESET.grad = 0.0
            out = g(x)
            out.backward()
            rows.append((out.data, W.grad, _RESET.grad, _RESET.data))
        return rows

    with pytest.warns(CompileWarning, match=words):
        got = run(chainrule.compile(f, budget=False))
    assert got == run(f)


class _Odd(float):
    def __mul__(self, other: Any) -> float:
        return 2.0 * float.__mul__(self, other)


def test_data_of_a_float_subclass_written_between_calls_runs_eagerly() -> None:
    v = Value(1.0)
    fast = chainrule.compile(lambda x: v * x, budget=False)
    assert [fast(1.0).data for _ in range(2)] == [1.0, 1.0]
    v.data = _Odd(1.0)
    with pytest.warns(CompileWarning, match="_Odd"):
        assert fast(1.0).data == (v * 1.0).data


TOGGLED = [0]


def _sometimes_counts(i: int) -> Value:
    if i % 2 == 0:
        TOGGLED[0] += 1
    return W * float(i)


def test_a_function_that_changes_state_every_other_call_gives_up_after_a_few_traces() -> None:
    fast = chainrule.compile(_sometimes_counts, budget=False)
    with pytest.warns(CompileWarning, match="changes a global"):
        got = [fast(i).data for i in range(20)]
    assert got == [1.5 * i for i in range(20)]
    assert TOGGLED[0] == 10
    assert fast.stats()["traces"] < 10
