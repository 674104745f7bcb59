"""chainrule.compile and the tenth probe: identity of floats (``is``,
``id``) asked while tracing is eager's. A traced float stands for the
object eager code holds there (a float argument, a leaf's ``.data``), so
``f(x, x)``, two reads of ``v.data``, two ``Value(0.0)`` biases and an
argmax by identity against ``max(xs)`` answer as eagerly, with a guard
on the objects at every replay; ``id()`` of a traced float, or identity
asked of a float computed while tracing, runs the function eagerly."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _both(
    f: Callable[..., Value], calls: list[tuple[Any, ...]]
) -> tuple[list[Any], list[Any], str]:
    """Each call's ``.data`` eagerly and compiled, and the warnings' words."""
    fast = chainrule.compile(f, budget=False)
    eager, got = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            eager.append(f(*args).data)
            got.append(fast(*args).data)
    assert all(issubclass(w.category, CompileWarning) for w in caught)
    return eager, got, " ".join(str(w.message) for w in caught)


def test_one_float_passed_for_two_arguments_is_one_object() -> None:
    w = Value(2.0)

    def f(a: float, b: float) -> Value:
        return w * a if a is b else w * b * 3.0

    x, y = float("1.5"), float("1.5")  # equal, two objects
    calls = [(x, x), (x, y), (x, x), (y, x), (float("2.5"),) * 2]
    eager, got, _ = _both(f, calls)
    assert eager == [3.0, 9.0, 3.0, 9.0, 5.0]
    assert got == eager


def test_two_biases_made_from_one_constant_share_their_data_until_updated() -> None:
    b1, b2, v = Value(0.0), Value(0.0), Value(1.0)

    def f(v: Value) -> Value:
        return v * 2.0 if b1.data is b2.data else v * 3.0

    fast = chainrule.compile(f, budget=False)
    got, eager = [], []
    for _ in range(3):
        eager.append(f(v).data)
        got.append(fast(v).data)
        b1.data += 0.1
    assert eager == [2.0, 3.0, 3.0]
    assert got == eager


def test_two_reads_of_one_data_are_one_object() -> None:
    v = Value(1.0)

    def f(v: Value) -> Value:
        d = v.data
        return v * 2.0 if d is v.data else v * 5.0

    eager, got, _ = _both(f, [(v,), (v,)])
    assert eager == [2.0, 2.0]
    assert got == eager


def test_an_argmax_by_identity_counts_a_repeated_object_twice() -> None:
    w = Value(2.0)

    def winners(xs: list[float]) -> Value:
        m = max(xs)
        return w * float(len([i for i, s in enumerate(xs) if s is m]))

    a = float("0.3")
    calls = [([a, a, 0.1],), ([float("0.3"), float("0.3"), 0.1],), ([a, a, 0.1],)]
    eager, got, _ = _both(winners, calls)
    assert eager == [4.0, 2.0, 4.0]
    assert got == eager


def test_float_of_an_argument_is_the_argument() -> None:
    w = Value(2.0)

    def f(a: float) -> Value:
        return w * a if float(a) is a else w * 7.0

    eager, got, _ = _both(f, [(float("1.5"),), (float("2.5"),)])
    assert eager == [3.0, 5.0]
    assert got == eager


def test_id_of_a_traced_float_runs_eagerly_and_says_why() -> None:
    w = Value(2.0)
    x = float("1.5")

    def f(a: float) -> Value:
        return w * (1.0 if id(a) == id(x) else 2.0)

    eager, got, words = _both(f, [(x,), (float("1.5"),), (x,)])
    assert eager == [2.0, 4.0, 2.0]
    assert got == eager
    assert "asks for the identity of a float (id)" in words


def test_plus_a_float_is_that_float() -> None:
    """``+x`` is ``x`` itself eagerly (a float's ``__pos__`` hands it back)."""
    w = Value(2.0)

    def f(a: float, b: float) -> Value:
        return w * (1.0 if +a is b else 2.0)

    x = float("1.5")
    eager, got, _ = _both(f, [(x, x), (x, float("1.5")), (x, x)])
    assert eager == [2.0, 4.0, 2.0]
    assert got == eager


def test_identity_of_a_float_computed_while_tracing_runs_eagerly() -> None:
    w = Value(2.0)

    def f(a: float) -> Value:
        return w * (1.0 if a * 1.0 is a else 2.0)

    eager, got, words = _both(f, [(float("1.5"),), (float("2.5"),)])
    assert eager == [4.0, 4.0]
    assert got == eager
    assert "asks whether two objects are one" in words


def test_a_float_is_never_none() -> None:
    """``scale is None`` asks nothing of the float: the trace is kept."""
    w = Value(2.0)

    def f(a: float, scale: Any = None) -> Value:
        return w * a if scale is None else w * a * scale

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [fast(float(k)).data for k in range(1, 4)]
    assert got == [2.0, 4.0, 6.0]
    assert fast.traces == 1


def test_identity_in_a_function_without_source_is_guarded() -> None:
    """Code compile cannot copy gets the float objects themselves (read
    whole): which of them are one object is part of what a replay checks."""
    w = Value(2.0)
    space: dict[str, Any] = {"w": w}
    exec("def f(a, b):\n    return w * (1.0 if a is b else 3.0)", space)  # no source
    x, y = float("1.5"), float("1.5")
    eager, got, _ = _both(space["f"], [(x, x), (x, y), (x, x), (y, y)])
    assert eager == [2.0, 6.0, 2.0, 2.0]
    assert got == eager


def test_a_nan_is_found_in_a_list_by_identity() -> None:
    """``x in xs``, ``xs.count(x)``, ``xs.index(x)``: a list finds a nan by
    identity only, on the call that traces and at every replay (a call
    whose nan is another object, or whose numbers were not nan when
    traced)."""
    w = Value(2.0)

    def f(a: float, xs: list[float]) -> Value:
        where = xs.index(a) if a in xs else -1
        return w * (1.0 + xs.count(a)) + float(where)

    nan, other = float("nan"), float("nan")
    calls = [(nan, [0.5, nan]), (nan, [0.5, other]), (1.5, [0.5, 2.5]), (nan, [nan, 0.5])]
    eager, got, _ = _both(f, calls)
    assert eager == [5.0, 1.0, 1.0, 4.0]
    assert got == eager
    # traced with numbers, replayed with a nan that is the list's own entry
    eager, got, _ = _both(f, [(1.5, [0.5, 2.5]), (nan, [0.5, nan])])
    assert eager == [1.0, 5.0]
    assert got == eager


@pytest.mark.budget
def test_a_schedule_from_the_int_step_is_named_as_such() -> None:
    """A learning rate computed from the int step through ``math.cos`` is
    pinned (a trace per step), and the warning says where the number comes
    from: the int argument, not a Value."""
    ws = [Value(0.01 * k) for k in range(500)]

    def loss(x: float, step: int) -> Value:
        lr = 0.5 * (1 + math.cos(math.pi * step / 100))
        return sum((w * x for w in ws), Value(0.0)) * lr

    fast = chainrule.compile(loss)  # (each step traces again: the budget gives up)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(2.0, step).data for step in range(30)]
    assert got == [loss(2.0, step).data for step in range(30)]
    words = " ".join(str(w.message) for w in caught)
    assert "a number computed from an int argument is read whole by math.cos" in words
    assert "read from a Value" not in words


def test_a_max_over_maxes_keeps_every_candidate() -> None:
    """``max(max(r) for r in rows)``: the inner max runs while the outer one
    is under way; each is a reduction of its own."""
    w = Value(2.0)

    def f(rows: list[list[float]]) -> Value:
        return w * max(max(r) for r in rows)

    calls = [([[1.0, 0.5], [5.0, 0.5], [0.0, -1.0]],), ([[9.0, 0.5], [5.0, 0.5], [0.0, -1.0]],)]
    eager, got, _ = _both(f, calls)
    assert eager == [10.0, 18.0]
    assert got == eager


def test_int_arguments_asked_by_identity_run_eagerly() -> None:
    w = Value(2.0)

    def f(i: int, j: int) -> Value:
        return w * (1.0 if i is j else 3.0)

    big = 10**6 + 1
    eager, got, words = _both(f, [(3, 3), (big, big), (big, int("1000001"))])
    assert eager == [2.0, 2.0, 6.0]
    assert got == eager
    assert "asks whether an int argument is an object" in words


def test_identity_against_a_global_float_runs_eagerly() -> None:
    """A global may be rebound to an equal float between calls, which only
    its value guards: ``x is EPS`` is asked eagerly."""
    w = Value(2.0)
    space: dict[str, Any] = {"EPS": float("1.5")}

    def f(x: float) -> Value:
        return w * (1.0 if x is space["EPS"] else 3.0)

    eps = space["EPS"]
    eager, got, words = _both(f, [(eps,), (eps,)])
    space["EPS"] = float("1.5")
    e2, g2, _ = _both(f, [(eps,)])
    assert (eager, e2) == ([2.0, 2.0], [6.0])
    assert (got, g2) == (eager, e2)
    assert "globals, attributes or code" in words


def test_sum_of_nothing_from_a_float_is_a_new_float() -> None:
    w = Value(2.0)

    def f(xs: list[float], x: float) -> Value:
        return w * (1.0 if sum(xs, x) is x else 3.0)

    eager, got, _ = _both(f, [([], 0.5), ([], 1.5)])
    assert eager == [6.0, 6.0]
    assert got == eager


def test_a_picks_data_read_twice_is_one_object() -> None:
    W = [Value(0.5), Value(1.5)]

    def f(i: int) -> Value:
        d = W[i].data
        return W[i] * (1.0 if d is W[i].data else 3.0)

    eager, got, _ = _both(f, [(0,), (1,), (0,)])
    assert eager == [0.5, 1.5, 0.5]
    assert got == eager


def test_a_nan_as_a_key_of_a_set_or_dict_is_eagers_on_every_call() -> None:
    """A set or dict finds a nan by identity only: the call that traces
    hands them the objects, and the function runs eagerly after it."""
    w = Value(2.0)
    nan = float("nan")
    table = {nan: 5.0}

    def keyed(x: float) -> Value:
        return w * table.get(x, 7.0) + w * table[x] if x in table else w * 7.0

    def distinct(xs: list[float]) -> Value:
        return w * float(len(set(xs)))

    eager, got, words = _both(keyed, [(nan,), (nan,), (float("nan"),)])
    assert eager == [20.0, 20.0, 14.0]
    assert got == eager
    assert "runs eagerly" in words
    eager, got, _ = _both(distinct, [([nan, nan],), ([nan, float("nan")],)])
    assert eager == [2.0, 4.0]
    assert got == eager


@pytest.mark.budget
def test_a_slice_by_an_int_argument_is_named_once() -> None:
    """``xs[start:start + B]`` pins ``start`` (each value a trace): the
    warning names it as a slice bound, its explanation once."""
    ws = [Value(0.01 * k) for k in range(150)]
    data = [float(k) for k in range(64)]

    def loss(start: int) -> Value:
        xs, ys = data[start : start + 8], data[start + 1 : start + 9]
        return sum((w * x * y for w in ws for x, y in zip(xs, ys)), Value(0.0))

    fast = chainrule.compile(loss)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(start).data for start in range(30)]
    assert got == [loss(start).data for start in range(30)]
    words = " ".join(str(w.message) for w in caught)
    assert words.count("an index or slice bound: xs[i:i + n]") == 1, words


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgds_momentum_buffers_are_the_velocity_after_compiled_steps(nesterov: bool) -> None:
    """``opt.buffers`` after compiled training steps (the flat path keeps
    the velocity as one array) is eager's list, also when steps of both
    kinds follow each other."""
    from chainrule import optim

    def run(compiled_steps: set[int]) -> tuple[list[Any], list[float]]:
        ws = [Value(0.1 * (k + 1)) for k in range(6)]
        opt = optim.SGD(ws, lr=0.05, momentum=0.9, nesterov=nesterov)

        def loss(x: float) -> Value:
            return sum((w * x - 1.0) ** 2 for w in ws)

        fast = chainrule.compile(loss, optimizer=opt, budget=False)
        for step in range(6):
            x = 0.5 + 0.1 * step
            if step in compiled_steps:
                fast(x)
            else:
                opt.zero_grad()
                loss(x).backward()
                opt.step()
        return list(opt.buffers), [w.data for w in ws]

    eager = run(set())
    assert eager[0][0] is not None
    for compiled in ({1, 2, 3, 4, 5}, {3, 4}, {0, 1, 2}):
        assert run(compiled) == eager


def test_a_leaf_made_in_the_function_from_a_global_asks_identity_eagerly() -> None:
    """``Value(EPS).data is x``: the leaf is made anew at every call from
    whatever ``EPS`` holds then (rebound to an equal float between calls)."""
    w = Value(2.0)
    space = {"EPS": float("1.5")}

    def f(x: float) -> Value:
        return w * (1.0 if Value(space["EPS"]).data is x else 3.0)

    eps = space["EPS"]
    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        first = (f(eps).data, fast(eps).data)
        space["EPS"] = float("1.5")
        second = (f(eps).data, fast(eps).data)
    assert first == (2.0, 2.0) and second == (6.0, 6.0)


def test_index_from_a_start_finds_the_next_occurrence() -> None:
    w = Value(2.0)

    def f(x: float, xs: list[float], start: int) -> Value:
        try:
            return w * float(xs.index(x, start))
        except ValueError:
            return w * -1.0

    calls = [(2.0, [2.0, 1.0, 2.0], 1), (2.0, [2.0, 1.0, 3.0], 1), (2.0, [2.0, 2.0, 1.0], -2)]
    eager, got, _ = _both(f, calls)
    assert eager == [4.0, -2.0, 2.0]
    assert got == eager


def test_sum_of_nothing_from_a_start_keyword_is_a_new_float() -> None:
    w = Value(2.0)

    def f(xs: list[float], x: float) -> Value:
        return w * (1.0 if sum(xs, start=x) is x else 3.0)

    eager, got, _ = _both(f, [([], 0.5), ([], 1.5)])
    assert eager == [6.0, 6.0]
    assert got == eager


def test_a_max_that_raised_leaves_nothing_for_the_next_one() -> None:
    w = Value(2.0)

    def floored(floor: float, row: list[Any]) -> Any:
        yield floor
        for x in row:
            if x is None:
                raise ValueError("missing entry")
            yield x

    def f(floor: float, rows: list[list[Any]]) -> Value:
        total = w * 0.0
        for row in rows:
            try:
                m = max(floored(floor, row))
            except ValueError:
                m = floor
            total = total + w * m
        return total

    calls = [(0.0, [[-1.0, None], [2.0]]), (0.0, [[5.0, None], [2.0]])]
    eager, got, _ = _both(f, calls)
    assert eager == [4.0, 4.0]
    assert got == eager


def test_a_chain_of_is_in_a_comprehensions_iterable_is_copied() -> None:
    """``W if p.data is q.data is not None else U`` inside a comprehension's
    iterable, where Python refuses the walrus a chain is otherwise held by."""
    W, U = [Value(1.0), Value(2.0)], [Value(7.0)]
    p, q = Value(1.5), Value(1.5)

    def f() -> Value:
        return sum(v * 1.0 for v in (W if p.data is q.data is not None else U))

    got, eager = [], []
    fast = chainrule.compile(f, budget=False)
    for shared in (True, False, True):
        x = float("1.5")
        p.data, q.data = x, (x if shared else float("1.5"))
        eager.append(f().data)
        got.append(fast().data)
    assert eager == [3.0, 7.0, 3.0]
    assert got == eager


def test_a_classs_own_contains_runs_as_a_copy() -> None:
    w = Value(2.0)

    class IdBag:
        def __init__(self, items: list[float]) -> None:
            self.items = items

        def __contains__(self, x: float) -> bool:
            return any(x is y for y in self.items)

    def f(a: float, b: float) -> Value:
        return w * (1.0 if a in IdBag([b]) else 3.0)

    x = float("1.5")
    eager, got, _ = _both(f, [(x, x), (x, float("1.5")), (x, x)])
    assert eager == [2.0, 6.0, 2.0]
    assert got == eager


def test_identity_of_numbers_and_strings_of_globals_runs_eagerly() -> None:
    """``cfg.mode is MODE``: both guarded by value, either may be rebound to
    an equal object."""
    w = Value(2.0)
    space = {"MODE": "ab" + "c" * int("1"), "STEPS": int("1000")}
    cfg = {"mode": space["MODE"], "steps": space["STEPS"]}

    def f(x: float) -> Value:
        k = 1.0 if cfg["mode"] is space["MODE"] else 3.0
        return w * x * (k + (10.0 if cfg["steps"] is space["STEPS"] else 30.0))

    fast = chainrule.compile(f, budget=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = (f(1.0).data, fast(1.0).data)
        cfg["mode"], cfg["steps"] = "a" + "bc", int("1000")
        second = (f(1.0).data, fast(1.0).data)
    assert first == (22.0, 22.0) and second == (66.0, 66.0)
    assert "both are numbers or strings" in " ".join(str(w.message) for w in caught)


def test_a_nan_compared_with_itself_in_a_container_runs_eagerly_after_the_trace() -> None:
    """``[x] == [y]`` finds one nan object equal (C asks identity first):
    the call that traces says what a plain ``==`` says (a sharp bit); later
    calls run eagerly."""
    w = Value(2.0)

    def f(a: float, b: float) -> Value:
        return w * (1.0 if [a] == [b] else 3.0)

    nan = float("nan")
    eager, got, words = _both(f, [(nan, nan), (nan, float("nan")), (nan, nan)])
    assert eager == [2.0, 6.0, 2.0]
    assert got[1:] == eager[1:]
    assert "a nan is compared with the object it is" in words


@pytest.mark.budget
def test_a_float_argument_in_a_branch_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """``s * (2.0 if y == 1.0 else 3.0)`` with a label that changes: the
    trace holds for the label's value, and the warning says a float
    argument decides a branch (not a value read from ``.data``). (Replays
    never judged slower here: on a loaded machine one may time so, and its
    warning would come first.)"""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget.Budget, "replays_lose", lambda self: None)
    ws = [Value(0.01 * k) for k in range(500)]

    def loss(y: float) -> Value:
        s = sum((w * w for w in ws), Value(0.0))
        return s * (2.0 if y == 1.0 else 3.0) * y

    fast = chainrule.compile(loss)
    labels = [0.25 * k for k in range(30)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(y).data for y in labels]
    assert got == [loss(y).data for y in labels]
    words = " ".join(str(w.message) for w in caught)
    assert "a float argument decides a comparison or a branch" in words
    assert "read from .data" not in words


def test_a_float_against_an_int_beyond_2_53_is_compared_exactly() -> None:
    w = Value(2.0)
    big = 2**63 - 1

    def f(x: float) -> Value:
        return w * x * (0.5 if x > big else 1.0) * (0.5 if x < 10**400 else 1.0)

    eager, got, _ = _both(f, [(1.0,), (2.0**63,), (1.0,)])
    assert eager == [1.0, 2.0**63 / 2, 1.0]
    assert got == eager


def test_nans_of_other_signs_are_other_numbers_where_read_whole() -> None:
    w = Value(2.0)

    def f(x: float) -> Value:
        return w * math.copysign(1.0, x)

    nan = float("nan")
    calls = [(nan,), (-nan,), (nan,)]
    eager, got, _ = _both(f, calls)
    assert eager == [2.0, -2.0, 2.0]
    assert got == eager


def test_identity_of_a_tuple_argument_is_the_callers() -> None:
    w = Value(2.0)
    default = (1.0, 2.0)

    def f(a: tuple[float, ...], b: tuple[float, ...]) -> Value:
        return w * (a[0] if a is b else 3.0 * a[0]) * (5.0 if b is default else 1.0)

    other = tuple(float(k) for k in (1, 2))  # (equal, another object)
    eager, got, words = _both(f, [(other, other), (other, default), (default, default)])
    assert eager == [2.0, 30.0, 10.0]
    assert got == eager
    assert "runs on a copy of" in words


def test_a_static_contains_and_an_int_enum_by_identity() -> None:
    import enum

    w = Value(2.0)

    class Positives:
        @staticmethod
        def __contains__(x: float) -> bool:
            return x > 0.0

    class Mode(enum.IntEnum):
        TRAIN = 1
        EVAL = 2

    def f(x: float, mode: Mode) -> Value:
        return w * x * (1.0 if x in Positives() else 3.0) * (1.0 if mode is Mode.TRAIN else 0.5)

    calls = [(1.0, Mode.TRAIN), (-1.0, Mode.TRAIN), (1.0, Mode.EVAL)]
    eager, got, words = _both(f, calls)
    assert eager == [2.0, -6.0, 1.0]
    assert got == eager
    assert "runs eagerly" not in words


def test_a_decimal_on_the_right_pins_the_float() -> None:
    from decimal import Decimal

    w = Value(2.0)

    def f(x: float) -> Value:
        return w * x * (2.0 if x > Decimal("0.5") else 1.0)

    eager, got, _ = _both(f, [(1.0,), (0.25,), (1.0,)])
    assert eager == [4.0, 0.5, 4.0]
    assert got == eager


def test_a_loss_from_chainrule_losses_replays_also_after_an_import() -> None:
    """``mse_loss`` reads ``sys.modules`` (is the Tensor engine loaded?) for
    its own lazy imports, not the user's data: a module imported after the
    trace (NumPy imports some in the first backward pass) leaves it
    standing (every kept trace was stale, and the real budget then ran the
    loss eagerly for good, blaming "the global sys")."""
    import sys
    import types

    from chainrule.losses import mse_loss

    ws = [Value(0.1 * k) for k in range(4)]

    def loss(xs: list[float]) -> Value:
        return mse_loss([w * x for w, x in zip(ws, xs)], [1.0, 0.0, 1.0, 0.0])

    fast = chainrule.compile(loss, budget=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            xs = [1.0, 2.0, 3.0, k + 0.5]
            assert fast(xs).data == loss(xs).data
        assert (fast.traces, fast.hits) == (1, 2)
        sys.modules["_chainrule_probe10_module"] = types.ModuleType("_chainrule_probe10_module")
        try:
            assert fast([1.0, 2.0, 3.0, 4.0]).data == loss([1.0, 2.0, 3.0, 4.0]).data
        finally:
            del sys.modules["_chainrule_probe10_module"]
    assert (fast.traces, fast.hits) == (1, 3)
