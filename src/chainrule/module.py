"""What the modules of both engines share: parameters by name, a
state dict, and loading one back.

:class:`BaseModule` knows nothing of either engine's semantics. The scalar
engine's :class:`chainrule.nn.Module` (micrograd's, ``zero_grad`` sets
``0.0``) and the Tensor engine's :class:`chainrule.tensor.nn.Module`
(PyTorch's, ``zero_grad`` sets ``None``) build on it, and checkpoints
(:mod:`chainrule.checkpoint`) work with either.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class BaseModule:
    """Something with named parameters, objects with ``.data`` and ``.grad``.

    A subclass gives ``named_parameters()`` (or ``parameters()``, from which
    the scalar engine numbers them) and ``zero_grad()``; it may define
    ``config()`` to describe its architecture for checkpoints.
    """

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        """``(name, parameter)`` pairs, in a fixed order."""
        raise NotImplementedError

    def parameters(self) -> list[Any]:
        """The parameters of ``named_parameters()``, in its order."""
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        """Forget the gradients, as the engine's own ``zero_grad`` does."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """The architecture, as JSON-ready data (checkpoints compare it)."""
        return {"type": type(self).__name__}

    def state_dict(self) -> dict[str, Any]:
        """Every parameter's value by name, e.g. ``{"layers.0.neurons.0.w.0": 0.23, ...}``."""
        return {name: p.data for name, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Set every parameter from ``state`` (as made by ``state_dict()``).

        Everything is checked before anything changes: the names must be
        exactly this module's and each value a real number (or, for an
        array parameter, an array or nested lists of its shape). On any mismatch a
        ``ValueError`` says what is wrong and the module is left as it was.
        """
        named = dict(self.named_parameters())
        missing = [n for n in named if n not in state]
        unexpected = [n for n in state if n not in named]
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing {_some(missing)}")
            if unexpected:
                parts.append(f"unexpected {_some(unexpected)}")
            raise ValueError(f"state_dict does not fit this model: {'; '.join(parts)}")
        values = {name: _convert(name, p.data, state[name]) for name, p in named.items()}
        for name, p in named.items():
            p.data = values[name]


def _some(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    more = len(names) - limit
    return f"{shown} and {more} more" if more > 0 else shown


def _convert(name: str, old: Any, new: Any) -> Any:
    """``new`` in the form of the parameter's current ``old`` data, or a
    ValueError: a float for a scalar, an array of the same shape and dtype
    for an array (which may come as nested lists, as from JSON)."""
    shape = getattr(old, "shape", None)
    if shape is not None:  # an array parameter (the Tensor engine): NumPy is there
        import numpy as np

        try:
            array = np.array(new, dtype=old.dtype)
        except (TypeError, ValueError):
            array = None
        if array is None or array.shape != shape:
            raise ValueError(f"parameter {name!r}: expected an array of shape {shape}")
        return array
    if isinstance(new, bool) or not isinstance(new, numbers.Real):
        raise ValueError(f"parameter {name!r}: expected a number, got {new!r:.60}")
    return float(new)
