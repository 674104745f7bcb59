"""Float functions with IEEE-754 (and so PyTorch float64) semantics.

Python's ``math`` module raises where IEEE arithmetic returns a value:
``math.log(0.0)`` raises instead of giving ``-inf``, ``1.0 / 0.0`` raises
instead of giving ``inf``, and ``(-8.0) ** 0.5`` even returns a complex
number. The engine needs the IEEE answer in every case, because the contract
is "the same numbers as PyTorch float64, inf and nan included".

The happy path is the plain ``math`` call; the special cases are only paid
for when Python refuses.
"""

from __future__ import annotations

import math

inf = math.inf
nan = math.nan


def _is_odd_integer(b: float) -> bool:
    return math.isfinite(b) and b == math.floor(b) and math.fmod(b, 2.0) != 0.0


def div(a: float, b: float) -> float:
    """``a / b`` where dividing by zero gives ``±inf`` or ``nan``."""
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0.0:
            return nan
        return math.copysign(inf, a) * math.copysign(1.0, b)


def pow(a: float, b: float) -> float:  # noqa: A001 - the field's name for it
    """``a ** b`` as C99 ``pow``: a real result, never a complex number.

    This is PyTorch's ``pow`` when the exponent is a tensor (``x ** y``
    between Values, ``2 ** x``); see :func:`pow_scalar` for a constant
    exponent.
    """
    try:
        return math.pow(a, b)
    except OverflowError:
        return -inf if a < 0.0 and _is_odd_integer(b) else inf
    except ValueError:
        if a == 0.0:  # zero to a negative power
            return math.copysign(inf, a) if _is_odd_integer(b) else inf
        return nan  # negative base, non-integer exponent


def pow_scalar(a: float, b: float) -> float:
    """``a ** b`` for a constant exponent ``b``, as PyTorch's
    ``pow(tensor, scalar)``.

    Exponents 0.5 and -0.5 follow PyTorch's square-root path where it
    differs from C's ``pow`` (at ``-0.0``, ``-inf`` and negative bases:
    ``-0.0`` and ``-inf`` instead of ``0.0`` and ``inf``); for positive
    finite ``a`` the result is C's ``pow``, which is what Python's ``**``
    gives (and so what micrograd and microgpt compute, bit for bit), within
    an ulp of PyTorch's ``sqrt``/``rsqrt``."""
    if (b == 0.5 or b == -0.5) and not 0.0 < a < inf:
        return sqrt(a) if b == 0.5 else div(1.0, sqrt(a))
    return pow(a, b)


def exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return inf


def log(x: float) -> float:
    if x > 0.0:
        return math.log(x)
    if x == 0.0:
        return -inf
    return nan  # negative or nan


def sqrt(x: float) -> float:
    if x >= 0.0:
        return math.sqrt(x)
    return nan


def sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else nan


def cos(x: float) -> float:
    return math.cos(x) if math.isfinite(x) else nan


def tanh(x: float) -> float:
    return math.tanh(x)


def sigmoid(x: float) -> float:
    # Two branches so that neither exp() overflows.
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = exp(x)
    return e / (1.0 + e)


def softplus(x: float) -> float:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    if x != x:
        return nan
    return max(x, 0.0) + math.log1p(exp(-abs(x)))


def sign(x: float) -> float:
    """-1, 0 or 1; 0 for nan, as ``torch.sgn`` gives in ``abs``'s gradient."""
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return 0.0


def maximum(a: float, b: float) -> float:
    """Larger of two floats; nan if either is nan (``torch.maximum``)."""
    if a != a or b != b:
        return nan
    return a if a >= b else b


def minimum(a: float, b: float) -> float:
    """Smaller of two floats; nan if either is nan (``torch.minimum``)."""
    if a != a or b != b:
        return nan
    return a if a <= b else b
