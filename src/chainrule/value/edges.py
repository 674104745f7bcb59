"""One node's chain rule, term by term: ``(child, local * g)``.

The backward walk (:mod:`chainrule.value.walk`) multiplies stored floats in its
loop; it comes here when it needs the terms one at a time: for an edge hook
(``explain``, anomaly detection: a closure that checks its own terms under
the observer, ``observed``, runs itself and gives none), for
``create_graph`` (the rule evaluated again on Values) and where an inf or
nan gradient meets an op whose PyTorch backward selects rather than
multiplies (relu, max, min, pow's base), so that a masked input gets
nothing instead of ``0 * inf = nan``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .higher_order import rule
from .mode import mode
from .primitives import DEAD_UNIT, ZERO_EXPONENT


def contributions(v: Any, g: Any, create_graph: bool = False) -> Iterator[tuple[Any, Any]]:
    """``(child, local * g)`` for each input of ``v``: one node's chain rule,
    with the rule evaluated on Values for ``create_graph``."""
    closure = v._fn.closure
    if closure is not None:
        if not create_graph and mode.observer is not None and getattr(closure, "observed", False):
            closure()  # (it adds its terms and checks them itself: a compiled output)
            return
        # (a closure that knows why it cannot run on Values says so: a compiled output)
        raise TypeError(
            getattr(closure, "not_again", None)
            or f"node {v._fn.name!r} backpropagates through a _backward closure (micrograd's "
            "protocol), which only backward() without create_graph can run; define the "
            "operation as a chainrule.Primitive to use it here"
        )
    local = rule(v) if create_graph else v._local
    if type(g) is float and g - g != 0.0 and v._fn.masked:
        yield from _masked(v, local, g)
    else:
        for child, d in zip(v._prev, local):
            yield child, d * g


def _masked(v: Any, local: Sequence[Any], g: float) -> Iterator[tuple[Any, Any]]:
    """A selecting op's contributions to an inf or nan gradient: a masked
    input gets nothing (PyTorch's backward selects, so no 0 * inf)."""
    masked = v._fn.masked
    if masked == ZERO_EXPONENT:  # torch.pow selects, for the base only
        base, exponent = v._prev
        if exponent.data != 0.0:
            yield base, local[0] * g
        yield exponent, local[1] * g
    elif masked != DEAD_UNIT or local[len(v._prev) - 1] != 0.0:  # fused relu(w.x + b):
        for child, d in zip(v._prev, local):  # an inactive unit blocks all
            if d != 0.0 or masked == DEAD_UNIT:
                yield child, d * g
