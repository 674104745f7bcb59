"""Where chainrule's random numbers come from, and ``manual_seed``.

The scalar engine draws initial weights from Python's :mod:`random`, as
micrograd does (so ``random.seed(1337)`` gives micrograd's own network).
The Tensor engine draws initial weights, dropout masks and samples from one
NumPy generator, :func:`tensor_generator`. Both take an explicit ``rng``
wherever they draw, which overrides these defaults.

``manual_seed(s)`` seeds both, as ``torch.manual_seed`` seeds PyTorch's
default generator: after it, building and training a model draws the same
numbers every run.
"""

from __future__ import annotations

import operator
import random
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["manual_seed", "tensor_generator"]


class _State:
    """The Tensor engine's generator (made on first use) and its seed: one
    for the process, as PyTorch's default generator."""

    generator: Any = None
    seed: int | None = None


_state = _State()
_lock = threading.Lock()

#: Called with what is drawn before chainrule draws random numbers while
#: ``chainrule.compile`` traces (None at every other time, set by
#: :func:`chainrule.compiler.trace.watching`): numbers drawn inside a
#: compiled function change from call to call, which a replay would not
#: repeat, even from code compile does not copy.
before_draw: Callable[[str], None] | None = None


def drawing(what: str) -> None:
    """Say that chainrule is about to draw ``what`` (``nn.Neuron``'s
    initial weights) to a trace that may be running."""
    if before_draw is not None:
        before_draw(what)


def manual_seed(seed: int) -> None:
    """Seed every random draw chainrule makes by default: Python's
    :mod:`random` (the scalar engine's weights) and the Tensor engine's
    NumPy generator (its weights, dropout and sampling).

    >>> import chainrule
    >>> from chainrule.nn import MLP
    >>> chainrule.manual_seed(0)
    >>> a = MLP(2, [3, 1]).state_dict()
    >>> chainrule.manual_seed(0)
    >>> a == MLP(2, [3, 1]).state_dict()
    True
    """
    if isinstance(seed, bool):
        raise TypeError(f"manual_seed: seed must be an int, got {seed!r}")
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"manual_seed: seed must be an int, got {seed!r}") from None
    if seed < 0:
        raise ValueError(f"manual_seed: seed must be >= 0, got {seed}")
    random.seed(seed)
    with _lock:
        _state.seed = seed
        _state.generator = None  # made from the seed at its next use


def tensor_generator() -> Any:
    """The Tensor engine's default ``numpy.random.Generator``: seeded by
    :func:`manual_seed`, else from fresh entropy."""
    with _lock:
        if _state.generator is None:
            import numpy as np

            _state.generator = np.random.default_rng(_state.seed)
        return _state.generator
