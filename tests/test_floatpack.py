"""chainrule.floatpack: lists of floats as arrays, as numpy.array makes them."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from chainrule import Value
from chainrule.floatpack import all_numbers, to_array


def test_to_array_is_numpy_array_bit_for_bit() -> None:
    xs = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 2.0**-1074, 1e308, 3, True]
    xs += [float(i) / 7.0 for i in range(500)]
    got = to_array(xs)
    assert got.dtype == np.float64 and got.shape == (len(xs),)
    assert got.tobytes() == np.array(xs, dtype=np.float64).tobytes()
    assert math.copysign(1.0, got[1]) == -1.0
    assert to_array([]).shape == (0,)


def test_to_array_refuses_what_is_not_a_number() -> None:
    with pytest.raises((TypeError, struct.error)):
        to_array([1.0, None])
    with pytest.raises((TypeError, struct.error)):
        to_array(["1.0"])


def test_all_numbers_tells_floats_and_ints_from_values_and_others() -> None:
    assert all_numbers([0.5, 1, -0.0, math.nan, math.inf])
    assert all_numbers([])
    assert not all_numbers([0.5, Value(2.0), 1.0])  # backward(create_graph=True)
    assert not all_numbers([None, 0.5])
    assert not all_numbers([np.zeros(2), 0.5])
    assert not all_numbers([10**400])
