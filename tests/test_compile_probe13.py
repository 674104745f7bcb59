"""chainrule.compile and the known gaps of round twenty-five: the identity
of a Value argument asked inside the function (``id(p)``, ``hash(p)``,
``sorted(key=id)``), and a functools cache's counters read other ways
than ``table.cache_info()``. Eager's numbers, or a warned eager call,
never another number."""

from __future__ import annotations

import builtins
import functools
import inspect
import logging
import math
import operator
import sys
import warnings
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _side_by_side(f: Any, calls: list[tuple[Any, ...]]) -> tuple[list[Any], list[Any], Any]:
    """Each call's loss and gradients of its Value arguments, eagerly and
    compiled (one compile for all calls), and the compiled function."""
    fast = chainrule.compile(f, budget=False)
    results: list[list[Any]] = [[], []]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for args in calls:
            params = [v for a in args if isinstance(a, list) for v in a]
            for k, g in enumerate((f, fast)):
                for p in params:
                    p.grad = 0.0
                out = g(*args)
                out.backward()
                results[k].append((out.data, [p.grad for p in params]))
    return results[0], results[1], fast


DECAY: set[int] = set()


def _decayed(params: list[Value], x: float) -> Value:
    out = sum((p * x for p in params), Value(0.0))
    reg = sum((p * p for p in params if id(p) in DECAY), Value(0.0))
    return out + 0.1 * reg


def test_a_mask_of_parameter_ids_follows_the_values_passed() -> None:
    """A weight-decay mask kept as ``id(p)`` decides which arguments are
    penalised: a second model's parameters (the same graph, other objects)
    get their own mask, not the first model's (a replay used the first
    model's: a loss of 9.1 for 9.4, its gradients too)."""
    first, second = [Value(1.0), Value(2.0)], [Value(1.0), Value(2.0)]
    DECAY.clear()
    DECAY.update((id(first[0]), id(second[1])))
    eager, got, fast = _side_by_side(_decayed, [(first, 3.0), (first, 3.0), (second, 3.0)])
    assert [round(y, 12) for y, _ in eager] == [3.1 + 6.0, 3.1 + 6.0, 3.0 + 6.4]
    assert got == eager
    assert fast.stats()["hits"] == 1  # (the first model's trace replays for it)


@pytest.mark.parametrize("order", ["sorted(key=id)", "hash"])
def test_an_order_or_a_choice_by_identity_follows_the_values_passed(order: str) -> None:
    """``sorted(params, key=id)[0]`` and ``hash(p) % 2`` choose by the
    objects' addresses: each new set of Value arguments is chosen afresh."""

    def f(params: list[Value], x: float) -> Value:
        if order == "hash":
            chosen = [p for p in params if hash(p) % 2 == hash(params[0]) % 2]
        else:
            chosen = sorted(params, key=id)[:1]
        return sum((p * x for p in chosen), params[0] * 0.0)

    models = [[Value(1.0), Value(2.0)] for _ in range(6)]
    calls = [(m, 3.0) for m in models for _ in range(2)]
    eager, got, fast = _side_by_side(f, calls)
    assert got == eager
    assert {y for y, _ in eager} <= {3.0, 6.0, 9.0}
    assert fast.stats()["hits"] == 6  # (each model's second call replays its own trace)


def _counted(form: str) -> Any:
    @functools.cache
    def table(k: int) -> float:
        return 2.0 * k

    reads = {
        "descriptor": lambda: type(table).cache_info(table),
        "partial": lambda: functools.partial(type(table).cache_info, table)(),
        "methodcaller": lambda: operator.methodcaller("cache_info")(table),
        "map": lambda: next(map(type(table).cache_info, [table])),
    }[form]

    def f(x: Value, k: int) -> Value:
        v = table(k)
        return x * float(reads().hits + 1) + v

    return f


@pytest.mark.parametrize("form", ["descriptor", "partial", "methodcaller", "map"])
def test_a_cache_s_counters_read_through_its_class_run_eagerly(form: str) -> None:
    """``type(table).cache_info(table)`` and its kin read the hits, which
    grow at every call: eager's 7.5, 9.0, 10.5, with a warning (a replay
    gave the trace's 7.5 at every call)."""
    eager_f, compiled = _counted(form), chainrule.compile(_counted(form), budget=False)
    eager = [eager_f(Value(1.5), 3).data for _ in range(3)]
    with pytest.warns(CompileWarning, match=r"cache's counters"):
        got = [compiled(Value(1.5), 3).data for _ in range(3)]
    assert eager == [7.5, 9.0, 10.5]
    assert got == eager
    assert compiled.stats()["hits"] == 0


SCALE = 1.0


def _over_scales(f: Any, scales: list[float], *args: Any) -> tuple[list[Any], list[Any], Any]:
    """``f(*args).data`` eagerly and compiled (one compile) with the global
    ``SCALE`` set to each of ``scales`` in turn, and the compiled function."""
    global SCALE
    fast = chainrule.compile(f, budget=False)
    eager, got = [], []
    try:
        for s in scales:
            SCALE = s
            eager.append(f(*args).data)
            got.append(fast(*args).data)
    finally:
        SCALE = 1.0
    return eager, got, fast


def _by_computed_name(x: Value, how: str) -> Value:
    if how == "globals":
        return x * globals()["SCALE"]
    return x * eval("SCALE")  # (the point: a global read by a computed name)


@pytest.mark.parametrize("how", ["globals", "eval"])
def test_a_global_read_by_a_computed_name_is_guarded(how: str) -> None:
    """``globals()["SCALE"]`` and ``eval("SCALE")`` read a global whose name
    is no name of the code: changed between calls, the replay follows it
    (it gave the first value's 3.0 at every call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        scales = [1.0, 1.0, 2.0, 2.0, 3.0]
        eager, got, fast = _over_scales(_by_computed_name, scales, Value(3.0), how)
    assert eager == [3.0, 3.0, 6.0, 6.0, 9.0]
    assert got == eager
    assert fast.stats()["hits"] == 2  # (each value's second call)


W = [Value(0.5), Value(-1.0), Value(2.0)]
data: list[float] = []  # a global named as the attribute the loss reads (.data)


def _softmax_loss(xs: list[float], target: int) -> Value:
    logits = [w * x for w, x in zip(W, xs)]
    m = max(v.data for v in logits)  # reads the attribute .data, not the global
    exps = [(v - m).exp() for v in logits]
    return -(exps[target] / sum(exps, Value(0.0))).log()


def test_a_global_named_as_an_attribute_the_code_reads_is_not_guarded() -> None:
    """A loop at module level that rebinds ``data`` (the name of the
    attribute ``v.data`` the loss reads) replays: the code never reads the
    global (it traced again at every call)."""
    global data
    fast = chainrule.compile(_softmax_loss, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for step in range(6):
            data = [math.cos(step * 0.7 + j) for j in range(3)]
            assert fast(data, step % 3).data == _softmax_loss(data, step % 3).data
    assert fast.stats()["traces"] == 1
    assert fast.stats()["hits"] == 5


class _Holder:
    def __init__(self, v: Value) -> None:
        self.v = v


@pytest.mark.parametrize("how", ["reduce", "sort", "class"])
def test_c_functions_that_never_see_the_floats_do_not_pin_them(how: str) -> None:
    """``functools.reduce(operator.add, values)``, ``order.sort()`` and a
    class of the user's made inside (``object.__new__``) are handed no float
    argument: new floats replay the trace (each call traced again, every
    float argument pinned as if read whole)."""

    def f(xs: list[float]) -> Value:
        terms = [w * x for w, x in zip(W, xs)]
        if how == "reduce":
            return functools.reduce(operator.add, terms)
        if how == "sort":
            order = list(range(len(terms)))
            order.sort()
            return sum((terms[k] for k in order), Value(0.0))
        return sum((_Holder(t).v for t in terms), Value(0.0))

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for step in range(5):
            xs = [math.sin(step + j) for j in range(3)]
            assert fast(xs).data == f(xs).data
    assert fast.stats()["traces"] == 1
    assert fast.stats()["hits"] == 4


def _uses_builtins(x: float) -> Value:
    return W[0] * abs(x) + W[1] * round(x, 1)


def test_a_builtin_shadowed_or_patched_after_the_trace_is_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A global defined after the trace with a builtin's name (``def
    abs(x)`` in a notebook cell), or the builtin patched, is what eager
    calls: the replay follows it (it replayed the builtin's 0.5 * 1.5)."""
    fast = chainrule.compile(_uses_builtins, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert fast(-1.26).data == _uses_builtins(-1.26).data == 0.5 * 1.26 + 1.3
        assert fast(-1.26).data == _uses_builtins(-1.26).data
        monkeypatch.setitem(globals(), "abs", lambda x: 10.0)
        assert fast(-1.26).data == _uses_builtins(-1.26).data == 5.0 + 1.3
        monkeypatch.delitem(globals(), "abs")
        monkeypatch.setattr(builtins, "round", lambda x, n: 2.0)
        assert fast(-1.26).data == _uses_builtins(-1.26).data == 0.5 * 1.26 - 2.0
    assert fast.stats()["hits"] == 1


def _frame_scale(x: float, how: str) -> Value:
    frame = sys._getframe() if how == "getframe" else inspect.currentframe()
    if frame is None:  # (not an assert: pytest rewrites those, and compile copies the source)
        raise RuntimeError("no frame")
    named = float(frame.f_code.co_name == "_frame_scale")
    return W[0] * x * frame.f_globals["SCALE"] * named


@pytest.mark.parametrize("how", ["getframe", "currentframe"])
def test_a_function_that_reads_its_own_frame_sees_its_own(how: str) -> None:
    """``sys._getframe()`` and ``inspect.currentframe()`` inside ``fn`` are
    its own frame while traced too (they were compile's: its globals, a
    KeyError; its name, 0.0), and the function runs eagerly after, with a
    warning (what it finds there a replay would not read again)."""
    with pytest.warns(CompileWarning, match="inspects the call stack"):
        eager, got, fast = _over_scales(_frame_scale, [1.0, 2.0, 3.0], 3.0, how)
    assert eager == [1.5, 3.0, 4.5]
    assert got == eager
    assert fast.stats()["hits"] == 0


@pytest.mark.parametrize(
    "how", ["display", "set()", "frozenset()", "comprehension", "hash", "add", "update", "set.add"]
)
def test_what_a_set_or_a_tuple_s_hash_makes_of_value_arguments_follows_them(how: str) -> None:
    """A set of Value arguments iterates in the order of their ids, and a
    tuple's hash is its members': each new set of Values is its own trace
    (a replay took the first Values' order: another loss, gradients on
    other parameters)."""

    def f(p: Value, q: Value, r: Value) -> Value:
        if how == "hash":
            return p * float(hash((p, q, r)) % 7) + q + r
        if how == "display":
            a, b, c = {p, q, r}
        elif how == "set()":
            a, b, c = set([p, q, r])  # noqa: C405 (the call, not a display)
        elif how == "frozenset()":
            a, b, c = frozenset((p, q, r))
        elif how == "comprehension":
            a, b, c = {v for v in (p, q, r)}  # noqa: C416 (a comprehension)
        else:  # a set filled in place, then iterated
            s: set[Value] = set()
            for v in (p, q, r):
                if how == "update":
                    s.update([v])
                elif how == "add":
                    s.add(v)
                else:
                    set.add(s, v)
            a, b, c = s
        return a * 1.0 + b * 2.0 + c * 3.0

    models = [[Value(float(i)), Value(float(i + 10)), Value(float(i + 20))] for i in range(8)]
    eager, got, fast = _side_by_side(lambda ps: f(*ps), [(m,) for m in models for _ in range(2)])
    assert got == eager
    assert fast.stats()["hits"] == 8  # (each model's second call replays its own trace)


CFG = {"lr": 1.0}
setting = CFG.get  # a container's C method, kept as a global


def test_a_global_that_is_a_container_s_method_follows_the_container() -> None:
    """``setting = CFG.get`` read inside: ``CFG["lr"]`` changed between
    calls is what eager reads (the method was compared by identity only:
    4.0 at every call)."""
    fast = chainrule.compile(lambda x: x * setting("lr"), budget=False)
    got, eager = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for lr in [1.0, 2.0, 2.0, 3.0]:
            CFG["lr"] = lr
            eager.append((Value(4.0) * setting("lr")).data)
            got.append(fast(Value(4.0)).data)
    CFG["lr"] = 1.0
    assert eager == [4.0, 8.0, 8.0, 12.0]
    assert got == eager
    assert fast.stats()["hits"] == 1


def test_a_cache_cleared_inside_the_function_runs_eagerly() -> None:
    """``table.cache_clear()`` inside: eagerly the cache is cleared and its
    function runs at every call (a replay neither cleared nor called it:
    hits=3 where eager's are 0)."""
    counts = []
    for compiled in (False, True):

        @functools.cache
        def table(k: int) -> float:
            return 2.0 * k

        def f(x: Value) -> Value:
            table.cache_clear()
            return x * table(3)

        g = chainrule.compile(f, budget=False) if compiled else f
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert [g(Value(2.0)).data for _ in range(4)] == [12.0] * 4
        counts.append((table.cache_info().hits, table.cache_info().misses))
        if compiled:
            assert any("cache_clear()" in str(w.message) for w in caught)
    assert counts == [(0, 1), (0, 1)]


def _namespace_by_alias(x: Value, how: str) -> Value:
    if how == "alias":
        read = globals
        return x * read()["SCALE"]
    if how == "builtins":
        return x * builtins.eval("SCALE")
    warnings.warn("scaled", UserWarning, stacklevel=1)
    return x * SCALE


@pytest.mark.parametrize("how", ["alias", "builtins"])
def test_globals_and_eval_by_another_name_read_the_function_s_own(how: str) -> None:
    """``read = globals; read()`` and ``builtins.eval("SCALE")`` read the
    function's module (they read compile's: another number, a NameError),
    and the function runs eagerly after."""
    with pytest.warns(CompileWarning, match="reads its namespace"):
        eager, got, _ = _over_scales(_namespace_by_alias, [1.0, 2.0, 3.0], Value(3.0), how)
    assert eager == [3.0, 6.0, 9.0]
    assert got == eager


def test_a_warning_from_the_function_names_its_line() -> None:
    """``warnings.warn`` inside a traced call is attributed to the user's
    line, as eagerly (it was compile's reads.py)."""
    fast = chainrule.compile(_namespace_by_alias, budget=False)
    sites = []
    for g in (_namespace_by_alias, fast):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g(Value(3.0), "warn")
        sites.append([(w.filename, w.lineno) for w in caught if w.category is UserWarning])
    assert sites[0] == sites[1]
    assert sites[0][0][0] == __file__


LOG = logging.getLogger("chainrule-tests.compile")


def _logs(x: Value, level: int) -> Value:
    LOG.info("step", stacklevel=level)
    logging.LoggerAdapter(LOG, {}).warning("adapted")
    return x * 2.0


def _calls(g: Any, level: int) -> Value:
    return g(Value(3.0), level)  # (the line a record names at stacklevel=2)


@pytest.mark.parametrize("level", [1, 2])
def test_a_log_record_from_the_function_names_its_line(level: int) -> None:
    """A logger called inside a traced call names the user's function and
    line in its record, as eagerly, also with a ``stacklevel`` (it named
    compile's ``read_whole_by``)."""
    sites: list[list[tuple[str, int]]] = []

    class Sites(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            sites[-1].append((record.funcName, record.lineno))

    handler = Sites()
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    try:
        for g in (_logs, chainrule.compile(_logs, budget=False)):
            sites.append([])
            _calls(g, level)
    finally:
        LOG.removeHandler(handler)
    assert sites[0] == sites[1]
    assert [name for name, _ in sites[0]] == ["_logs" if level == 1 else "_calls", "_logs"]
