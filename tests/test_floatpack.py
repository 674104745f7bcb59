"""chainrule.floatpack: lists of floats as arrays, as numpy.array makes them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chainrule import Value
from chainrule.tensor.floatpack import NOT_A_NUMBER, to_array


def test_to_array_is_numpy_array_bit_for_bit() -> None:
    xs = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 2.0**-1074, 1e308, 3, True]
    xs += [float(i) / 7.0 for i in range(500)]
    got = to_array(xs)
    assert got.dtype == np.float64 and got.shape == (len(xs),)
    assert got.tobytes() == np.array(xs, dtype=np.float64).tobytes()
    assert math.copysign(1.0, got[1]) == -1.0
    assert to_array([]).shape == (0,)


def test_to_array_refuses_what_is_not_a_number() -> None:
    for bad in (None, "1.0", Value(2.0), np.zeros(2), 10**400):  # a Value: create_graph's grads
        with pytest.raises(NOT_A_NUMBER):
            to_array([0.5, bad, 1.0])
    assert to_array([0.5, 1, True]).tolist() == [0.5, 1.0, 1.0]
