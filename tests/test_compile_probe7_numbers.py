"""chainrule.compile and the seventh probe: a comparison of a node with a
number takes the number in as the engine does (``np.float32`` widened, a
``Fraction`` as a float, a ``Decimal`` refused); a dict keyed by Values
that a pick subscripts finds the entry; ``pow(node, 2, 3)`` and a pick's
``__getstate__`` are eager's."""

from __future__ import annotations

import warnings
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def outcome(f: Any, *args: Any) -> Any:
    try:
        out = f(*args)
    except Exception as e:
        return (type(e).__name__, str(e))
    return out.data if isinstance(out, Value) else out


@pytest.mark.parametrize(
    ("threshold", "x", "expected"),
    [
        (np.float32(0.1), 0.1, 1.1),  # 0.1 < 0.10000000149...: True, as eagerly
        (Fraction(1, 3), 1 / 3, 1 / 3),  # compared as the float 1/3: False
        (Decimal("0.5"), 0.25, "TypeError"),
        ("x", 0.25, "TypeError"),
    ],
)
def test_a_comparison_takes_the_number_in_as_eagerly(
    threshold: Any, x: float, expected: Any
) -> None:
    w = Value(1.0)

    def f(x: float) -> Value:
        y = w * x
        return y + (1.0 if y < threshold else 0.0)

    fast = chainrule.compile(f)
    for _ in range(2):
        eager, compiled = outcome(f, x), outcome(fast, x)
        assert compiled == eager
        assert eager == expected or eager[0] == expected


def test_a_dict_keyed_by_values_subscripted_with_a_pick() -> None:
    W = [Value(1.0), Value(2.0)]
    rates = {W[0]: 0.1, W[1]: 0.4}
    counts: defaultdict[Value, float] = defaultdict(float, {W[0]: 5.0, W[1]: 6.0})

    def f(i: int, x: float) -> Value:
        return W[i] * x * rates[W[i]] + counts[W[i]]

    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for i in (0, 1, 0):
            assert fast(i, 2.0).data == f(i, 2.0).data == [5.2, 7.6][i]
    assert len(counts) == 2  # no stand-in left as a new key


def test_pow_with_a_modulus_and_a_picks_state_are_eagers() -> None:
    W = [Value(1.5), Value(2.0)]

    def modulus(i: int, x: float) -> Value:
        return pow(W[i] * x, 2, 3)  # type: ignore[call-overload]

    def state(i: int, x: float) -> Value:
        _, slots = W[i].__getstate__()  # type: ignore[misc]
        return W[i] * x * slots["data"]

    for f in (modulus, state):
        fast = chainrule.compile(f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            got = [outcome(fast, i, 2.0) for i in (0, 1)]
        assert got == [outcome(f, i, 2.0) for i in (0, 1)]
    assert got == [4.5, 8.0]
    assert outcome(modulus, 0, 1.0) == (
        "TypeError",
        "Value.__pow__() takes 2 positional arguments but 3 were given",
    )
