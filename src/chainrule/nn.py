"""Neural networks on the scalar engine: micrograd's ``Neuron``, ``Layer``
and ``MLP``, with the same signatures, parameter order and reprs, so code
written for ``micrograd.nn`` runs with only the import swapped.

Two things differ, neither visible to that code: a neuron computes
``relu(w . x + b)`` as one ``ReLU(dot)`` node (not ``2n + 1`` binary and
unary ones), and every
module can name its parameters, save them (``state_dict``) and load them
back. The losses live in :mod:`chainrule.losses`.

For teaching, ``fused=False``
makes a network whose neurons compute micrograd's own chain,
``sum((wi*xi for wi, xi in zip(w, x)), b).relu()``: the same values and
gradients, drawn node for node as micrograd draws them.

>>> import random
>>> from chainrule.nn import MLP
>>> random.seed(1337)
>>> model = MLP(2, [3, 1])
>>> model
MLP of [Layer of [ReLUNeuron(2), ReLUNeuron(2), ReLUNeuron(2)], Layer of [LinearNeuron(3)]]
>>> len(model.parameters())
13
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from .module import BaseModule, SequentialBase
from .random_state import drawing
from .value.engine import Scalar, Value
from .value.sums import dense, dot

#: The activations a neuron can apply to ``w . x + b``, and the repr prefix.
ACTIVATIONS: dict[str, str] = {"relu": "ReLU", "tanh": "Tanh", "linear": "Linear"}


def _check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        choices = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"unknown activation {activation!r}: choose one of {choices}")
    return activation


def _check_size(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be a positive int, got {n!r}")
    return n


class Module(BaseModule):
    """A module of the scalar engine: something with parameters, objects
    with ``.data`` and ``.grad``.

    A subclass defines ``parameters()`` (micrograd's contract); it may also
    define ``named_parameters()`` to give them readable names in
    ``state_dict()``, and ``config()`` to describe its architecture for
    checkpoints. ``zero_grad()`` sets every gradient to ``0.0``, as
    micrograd's does.
    """

    def parameters(self) -> list[Any]:
        """The parameters, in a fixed order: what an optimizer takes (none here)."""
        return []

    def named_parameters(self) -> Iterator[tuple[str, Any]]:
        """``(name, parameter)`` pairs in ``parameters()`` order."""
        for i, p in enumerate(self.parameters()):
            yield str(i), p

    def zero_grad(self) -> None:
        """Set every parameter's ``grad`` to 0, as before a backward pass."""
        for p in self.parameters():
            p.grad = 0.0


class Neuron(Module):
    """One unit: ``activation(w . x + b)`` with ``nin`` weights drawn from
    ``uniform(-1, 1)`` and bias 0, as in micrograd.

    ``nonlin=True`` means ReLU and ``nonlin=False`` linear (micrograd's
    switch); ``activation`` chooses explicitly: ``"relu"``, ``"tanh"`` or
    ``"linear"``. Weights come from Python's global ``random``, like
    micrograd, unless ``rng`` (a ``random.Random``) is given.

    ``fused=True`` (the default) computes the unit
    as one node; ``fused=False`` as micrograd's chain of ``*`` and ``+``
    nodes and the activation: the same numbers, more nodes.

    >>> n = Neuron(3, activation="tanh")
    >>> n
    TanhNeuron(3)
    >>> n([0.0, 0.0, 0.0]).data
    0.0
    """

    def __init__(
        self,
        nin: int,
        nonlin: bool = True,
        *,
        activation: str | None = None,
        rng: random.Random | None = None,
        fused: bool | None = None,
    ) -> None:
        _check_size(nin, "nin")
        if activation is None:
            activation = "relu" if nonlin else "linear"
        self.activation = _check_activation(activation)
        self.fused = True if fused is None else bool(fused)
        drawing("the initial weights of an nn.Neuron")
        uniform = (rng or random).uniform
        self.w = [Value(uniform(-1, 1)) for _ in range(nin)]
        self.b = Value(0.0)

    @property
    def nonlin(self) -> bool:
        """True for a ReLU or tanh neuron, False for a linear one (micrograd's switch)."""
        return self.activation != "linear"

    @nonlin.setter
    def nonlin(self, on: bool) -> None:
        self.activation = "relu" if on else "linear"

    def __call__(self, x: Sequence[Scalar]) -> Value:
        if not self.fused:
            if len(x) != len(self.w):
                raise ValueError(f"Neuron: {len(self.w)} weights but {len(x)} inputs")
            act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)  # micrograd's chain
            if self.activation == "relu":
                return act.relu()
            return act.tanh() if self.activation == "tanh" else act
        # One node for relu(w . x + b) (a tanh neuron adds a tanh node): the
        # same value and gradients as micrograd's chain of + and *, with 2n
        # fewer nodes.
        return dot(self.w, x, self.b, self.activation)

    def parameters(self) -> list[Value]:
        """The weights, then the bias (micrograd's order)."""
        return self.w + [self.b]

    def named_parameters(self) -> Iterator[tuple[str, Value]]:
        for i, w in enumerate(self.w):
            yield f"w.{i}", w
        yield "b", self.b

    def config(self) -> dict[str, Any]:
        return {"type": "Neuron", "nin": len(self.w), "activation": self.activation}

    def __repr__(self) -> str:
        return f"{ACTIVATIONS[self.activation]}Neuron({len(self.w)})"


class Layer(Module):
    """``nout`` neurons reading the same ``nin`` inputs. Keyword arguments
    (``activation``, ``rng``, ``fused``) go to every :class:`Neuron`. A
    layer of one neuron returns a Value, a wider one a list, as in
    micrograd."""

    def __init__(self, nin: int, nout: int, **kwargs: Any) -> None:
        _check_size(nout, "nout")
        self.neurons = [Neuron(nin, **kwargs) for _ in range(nout)]

    def __call__(self, x: Sequence[Scalar]) -> Value | list[Value]:
        # All the neurons in one call, which reads x once; each output is the
        # node Neuron.__call__ makes.
        kinds = {(n.activation, n.fused) for n in self.neurons}
        if len(kinds) == 1 and next(iter(kinds))[1]:
            activation = next(iter(kinds))[0]
            out = dense([n.w for n in self.neurons], x, [n.b for n in self.neurons], activation)
        else:
            out = [n(x) for n in self.neurons]
        return out[0] if len(out) == 1 else out

    def parameters(self) -> list[Value]:
        """Every neuron's parameters, neuron by neuron."""
        return [p for n in self.neurons for p in n.parameters()]

    def named_parameters(self) -> Iterator[tuple[str, Value]]:
        for i, n in enumerate(self.neurons):
            for name, p in n.named_parameters():
                yield f"neurons.{i}.{name}", p

    def config(self) -> dict[str, Any]:
        first = self.neurons[0]
        return {
            "type": "Layer",
            "nin": len(first.w),
            "nout": len(self.neurons),
            "activation": first.activation,
        }

    def __repr__(self) -> str:
        return f"Layer of [{', '.join(str(n) for n in self.neurons)}]"


class MLP(Module):
    """A multi-layer perceptron: ``nin`` inputs, then one layer per entry
    of ``nouts``. Hidden layers use ``activation`` (ReLU by default, as in
    micrograd); the last layer is linear. ``fused=False`` builds every
    neuron from binary and unary ops, as micrograd.

    >>> import random
    >>> random.seed(0)
    >>> model = MLP(2, [3, 1], activation="tanh")
    >>> model
    MLP of [Layer of [TanhNeuron(2), TanhNeuron(2), TanhNeuron(2)], Layer of [LinearNeuron(3)]]
    >>> isinstance(model([1.0, -1.0]).data, float)
    True
    """

    def __init__(
        self,
        nin: int,
        nouts: Sequence[int],
        *,
        activation: str = "relu",
        rng: random.Random | None = None,
        fused: bool | None = None,
    ) -> None:
        _check_size(nin, "nin")
        if isinstance(nouts, (str, bytes)) or not isinstance(nouts, Sequence) or not nouts:
            raise ValueError(f"nouts must be a non-empty list of layer sizes, got {nouts!r}")
        self.activation = _check_activation(activation)
        sizes = [nin, *nouts]
        last = len(nouts) - 1
        self.layers = [
            Layer(
                sizes[i],
                sizes[i + 1],
                activation=activation if i != last else "linear",
                rng=rng,
                fused=fused,
            )
            for i in range(len(nouts))
        ]

    def __call__(self, x: Sequence[Scalar]) -> Any:
        for layer in self.layers:
            x = layer(x)  # type: ignore[assignment]
        return x

    def parameters(self) -> list[Value]:
        """Every layer's parameters, layer by layer."""
        return [p for layer in self.layers for p in layer.parameters()]

    def named_parameters(self) -> Iterator[tuple[str, Value]]:
        for i, layer in enumerate(self.layers):
            for name, p in layer.named_parameters():
                yield f"layers.{i}.{name}", p

    def config(self) -> dict[str, Any]:
        return {
            "type": "MLP",
            "nin": len(self.layers[0].neurons[0].w),
            "nouts": [len(layer.neurons) for layer in self.layers],
            "activation": self.activation,
        }

    def __repr__(self) -> str:
        return f"MLP of [{', '.join(str(layer) for layer in self.layers)}]"


class Sequential(SequentialBase, Module):
    """Scalar modules applied in turn, as ``torch.nn.Sequential``:
    ``Sequential(Layer(2, 16), Layer(16, 1, activation="linear"))`` is a
    two-layer perceptron, its parameters named ``0.neurons.0.w.0`` ...

    >>> import random
    >>> random.seed(0)
    >>> Sequential(Layer(2, 2), Layer(2, 1, activation="linear"))
    Sequential(
      (0): Layer of [ReLUNeuron(2), ReLUNeuron(2)]
      (1): Layer of [LinearNeuron(2)]
    )
    """

    module_type = Module


#: The Tensor engine's layers, once importable from here too. They live in
#: chainrule.tensor.nn; this module is the scalar engine's (its MLP is
#: micrograd's perceptron). Loaded on first use: they need NumPy.
_TENSOR_LAYERS = frozenset(
    {
        "Linear",
        "Embedding",
        "RMSNorm",
        "LayerNorm",
        "CausalSelfAttention",
        "Block",
        "GPT",
        "GPTConfig",
    }
)


def __getattr__(name: str) -> Any:
    if name in _TENSOR_LAYERS:
        import warnings

        warnings.warn(
            f"chainrule.nn.{name} is the Tensor engine's: import it from chainrule.tensor.nn",
            DeprecationWarning,
            stacklevel=2,
        )
        from .tensor import nn as tensor_nn

        return getattr(tensor_nn, name)
    raise AttributeError(f"module 'chainrule.nn' has no attribute {name!r}")
