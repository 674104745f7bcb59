"""no_grad / enable_grad: thread-local, nestable, decorators; and detach."""

from __future__ import annotations

import threading

import pytest

from chainrule import Primitive, Value, add_n, dot, enable_grad, gradients, is_grad_enabled, no_grad


def test_ops_in_no_grad_record_nothing() -> None:
    x = Value(3.0)
    cube = Primitive("cube", lambda v: v**3, lambda M, v, out: (3 * v * v,))
    with no_grad():
        outs = [x * x, x + 1.0, x.exp(), x**2, 2.0**x, dot([x], [2.0], x), add_n([x, x]), cube(x)]
    assert [y.data for y in outs[:2]] == [9.0, 4.0]
    for y in outs:
        assert y._prev == () and y._op == ""
        with pytest.raises(RuntimeError, match=r"backward: .*no_grad\(\)"):
            y.backward()  # no graph to go through: PyTorch raises too
        with pytest.raises(RuntimeError, match="no_grad"):
            y.backward(create_graph=True)
    assert x.grad == 0.0  # nothing reached x
    x.backward()  # a leaf the user made is not a mistake: its own gradient
    assert x.grad == 1.0


def test_no_grad_values_are_constants_in_a_later_graph() -> None:
    x = Value(3.0)
    with no_grad():
        c = x * x
    y = c * x  # c is a leaf: d/dx = c = 9, not 3x^2 = 27
    y.backward()
    assert x.grad == 9.0 and c.grad == 3.0


def test_nesting_and_enable_grad() -> None:
    x = Value(2.0)
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled()
        with no_grad():
            assert not is_grad_enabled()
            with enable_grad():
                assert is_grad_enabled()
                y = x * x
            assert not is_grad_enabled()
        assert not is_grad_enabled()
    assert is_grad_enabled()
    y.backward()
    assert x.grad == 4.0


def test_restored_after_an_exception() -> None:
    with pytest.raises(ZeroDivisionError), no_grad():
        1 / 0  # noqa: B018
    assert is_grad_enabled()
    assert (Value(1.0) * Value(2.0))._prev != ()


def test_decorators() -> None:
    @no_grad()
    def predict(x: Value) -> Value:
        assert not is_grad_enabled()
        return x * 2.0

    @enable_grad()
    def train(x: Value) -> Value:
        return x * 2.0

    x = Value(1.5)
    assert predict(x)._prev == () and predict(x).data == 3.0
    assert is_grad_enabled()
    with no_grad():
        assert train(x)._prev[0] is x
    assert predict.__name__ == "predict"


def test_the_same_context_object_nests() -> None:
    ctx = no_grad()
    with ctx:
        with ctx:
            assert not is_grad_enabled()
        assert not is_grad_enabled()
    assert is_grad_enabled()


@pytest.mark.native  # threads: not in the WebAssembly build
def test_thread_local() -> None:
    # One thread inside no_grad, the other recording, at the same time.
    inside, recorded = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def other() -> None:
        inside.wait(5)
        seen["enabled"] = is_grad_enabled()
        a = Value(2.0)
        seen["prev"] = (a * a)._prev == (a, a)
        recorded.set()

    thread = threading.Thread(target=other)
    thread.start()
    with no_grad():
        inside.set()
        recorded.wait(5)
        mine = Value(2.0) * 3.0
    thread.join(5)
    assert seen == {"enabled": True, "prev": True}
    assert mine._prev == ()


@pytest.mark.native  # threads: not in the WebAssembly build
def test_a_new_thread_starts_with_grad_enabled() -> None:
    seen: list[bool] = []
    with no_grad():
        thread = threading.Thread(target=lambda: seen.append(is_grad_enabled()))
        thread.start()
        thread.join(5)
    assert seen == [True]


def test_backward_inside_no_grad() -> None:
    # As torch: backward works; create_graph builds no graph when recording is off.
    x = Value(3.0)
    y = x * x * x
    with no_grad():
        y.backward()
        (g,) = gradients(y, [x], create_graph=True)
    assert x.grad == 27.0
    assert g.data == 27.0 and g._prev == ()


def test_detach_is_a_new_leaf_with_the_same_data() -> None:
    x = Value(3.0)
    y = x * x
    d = y.detach()
    assert d is not y and d.data == 9.0 and d._prev == () and d.grad == 0.0
    z = d * x  # gradient stops at d
    z.backward()
    assert x.grad == 9.0 and y.grad == 0.0 and d.grad == 3.0


def test_detach_in_a_stop_gradient_pattern() -> None:
    # x * detach(x): value x^2, derivative x (not 2x)
    x = Value(1.5)
    (g,) = gradients(x * x.detach(), [x])
    assert g == 1.5


@pytest.mark.native  # threads: not in the WebAssembly build
def test_one_context_object_shared_by_two_threads() -> None:
    # A module-level ``NO_GRAD = no_grad()`` entered by two threads whose
    # states differ: each must get its own state back on exit. Interleaved
    # as: main enters (inside an enable_grad), other enters (inside a
    # no_grad), main exits, other exits.
    shared = no_grad()
    entered, main_left = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with no_grad():
            with shared:
                entered.set()
                main_left.wait(5)
            seen.append(is_grad_enabled())  # still inside its own no_grad

    thread = threading.Thread(target=other)
    with enable_grad():
        with shared:
            thread.start()
            entered.wait(5)
        main_after = is_grad_enabled()
        main_left.set()
        thread.join(5)
    assert main_after is True
    assert seen == [False]
