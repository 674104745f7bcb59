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

    # -- the module tree, printed as PyTorch prints it ------------------------

    def _submodules(self) -> Iterator[tuple[str, Any]]:
        """The direct sub-modules by attribute name, in assignment order:
        each a module, or a list of modules (printed as PyTorch's
        ``ModuleList``)."""
        for name, value in vars(self).items():
            if isinstance(value, BaseModule):
                yield name, value
            elif isinstance(value, (list, tuple)):
                items = [item for item in value if isinstance(item, BaseModule)]
                if items:
                    yield name, items

    def extra_repr(self) -> str:
        """The module's own settings for its repr, e.g. ``in_features=2,
        out_features=3, bias=True`` (PyTorch's hook); none by default."""
        return ""

    def __repr__(self) -> str:
        """The module tree, as PyTorch prints it::

        Net(
          (hidden): Linear(in_features=2, out_features=3, bias=True)
          (out): Linear(in_features=3, out_features=1, bias=True)
        )
        """
        children = [
            f"({name}): " + _indent(_list_repr(value) if isinstance(value, list) else repr(value))
            for name, value in self._submodules()
        ]
        extra = self.extra_repr()
        lines = (extra.split("\n") if extra else []) + children
        if not lines:
            return f"{type(self).__name__}()"
        if extra and not children and len(lines) == 1:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

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


def _indent(text: str) -> str:
    """Every line but the first indented by two spaces (PyTorch's ``_addindent``)."""
    return text.replace("\n", "\n  ")


def _list_repr(modules: list[Any]) -> str:
    """A list of modules as PyTorch prints a ``ModuleList``: runs of equal
    modules shown once, ``(0-2): 3 x Block(...)``."""
    runs: list[tuple[int, int, str]] = []  # (first index, last index, repr)
    for i, module in enumerate(modules):
        text = repr(module)
        if runs and runs[-1][2] == text:
            runs[-1] = (runs[-1][0], i, text)
        else:
            runs.append((i, i, text))
    lines = []
    for first, last, text in runs:
        if first == last:
            lines.append(_indent(f"({first}): {text}"))
        else:
            lines.append(_indent(f"({first}-{last}): {last - first + 1} x {text}"))
    return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class SequentialBase(BaseModule):
    """Modules applied one after the other, ``Sequential(a, b, c)(x) ==
    c(b(a(x)))``, as PyTorch's ``nn.Sequential``: parameters named
    ``0.weight``, ``1.bias`` ..., indexing, ``len`` and iteration. Each
    engine's ``Sequential`` is this and its own ``Module``; ``module_type``
    is the class its items must be."""

    module_type: type = BaseModule

    def __init__(self, *modules: Any) -> None:
        for i, module in enumerate(modules):
            if not isinstance(module, self.module_type):
                what = type(module).__name__
                engine = self.module_type.__module__
                raise TypeError(
                    f"Sequential: item {i} is a {what}, not a module of {engine} "
                    "(wrap a function in a Module)"
                )
        self.layers = list(modules)

    def forward(self, x: Any) -> Any:
        """``x`` through every module in turn."""
        for module in self.layers:
            x = module(x)
        return x

    def __call__(self, x: Any) -> Any:
        return self.forward(x)

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.layers)

    def __getitem__(self, index: int) -> Any:
        return self.layers[index]

    def _submodules(self) -> Iterator[tuple[str, Any]]:
        for i, module in enumerate(self.layers):
            yield str(i), module

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """``(name, parameter)`` pairs named by position, as PyTorch's:
        ``0.weight``, ``0.bias``, ``2.weight`` ..."""
        for i, module in enumerate(self.layers):
            for name, p in module.named_parameters():
                yield f"{prefix}{i}.{name}", p

    def parameters(self) -> list[Any]:
        """Every module's parameters, in order."""
        return [p for _, p in self.named_parameters()]

    def config(self) -> dict[str, Any]:
        return {"type": "Sequential", "layers": [m.config() for m in self.layers]}


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
