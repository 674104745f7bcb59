"""Numbers coming into the scalar engine, checked once at the door.

An operand that is not a Value becomes a float here, or an error that
names the operation and the value (a string, None, a complex number, a
list). Division is micrograd's ``a * b ** -1`` only where that is as exact
as one true division; :func:`reciprocal_is_exact` decides.
"""

from __future__ import annotations

import numbers
from typing import Any

ACCEPTED = "an int, float, bool, NumPy real scalar or 0-d array, or Value"


def as_float(x: object, op: str) -> float:
    """``x`` as a float, or a TypeError that names the op and the value."""
    if type(x) is float:
        return x
    if type(x) is int:  # -1 in micrograd's -b = b * -1
        try:
            return float(x)
        except OverflowError:
            pass
    if isinstance(x, numbers.Real) or _numpy_real(x):  # int, bool, Fraction, NumPy
        try:
            return float(x)  # type: ignore[arg-type]
        except OverflowError:  # an int or Fraction beyond 1.8e308
            big: Any = x
            digits = int(int(abs(big) // 1).bit_length() * 0.30103)
            raise ValueError(
                f"{op}: {type(x).__name__} of about 10**{digits} is too large for a float"
            ) from None
    raise TypeError(f"{op}: expected {ACCEPTED}, got {type(x).__name__} {x!r}")


def _numpy_real(x: object) -> bool:
    """A NumPy bool or a 0-d real array (not registered as ``numbers.Real``)."""
    if type(x).__module__ != "numpy" or getattr(x, "shape", None) != ():
        return False
    return getattr(getattr(x, "dtype", None), "kind", "") in ("b", "i", "u", "f")


# Division as micrograd and microgpt define it, ``a * b ** -1`` (two nodes,
# the same floats bit for bit), wherever that is as exact as true division:
# 1/b and 1/b**2 normal and finite, and the quotient a normal number. Outside
# that range a single true-division node keeps PyTorch's numbers.
RECIP_MIN = 2.0**-500
RECIP_MAX = 2.0**500
NORMAL_MIN = 2.0**-1022
FLOAT_MAX = 1.7976931348623157e308


def reciprocal_is_exact(a: float, b: float) -> bool:
    """True when ``a * b ** -1`` gives ``a / b`` exactly enough (see above)."""
    if not RECIP_MIN <= abs(b) <= RECIP_MAX:  # also False for nan
        return False
    y = abs(a * b**-1.0)
    return y == 0.0 or NORMAL_MIN <= y <= FLOAT_MAX
