"""chainrule.nn: micrograd's modules, same weights, reprs and gradients."""

from __future__ import annotations

import doctest
import math
import random
from typing import Any

import micrograd.nn as mg
import pytest

import chainrule.nn
from chainrule import Value
from chainrule.nn import MLP, Layer, Module, Neuron
from conftest import close


def _pair(seed: int, make: Any) -> tuple[Any, Any]:
    random.seed(seed)
    ours = make(chainrule.nn)
    random.seed(seed)
    theirs = make(mg)
    return ours, theirs


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.MLP(2, [16, 16, 1]),
        lambda m: m.MLP(3, [4, 2]),
        lambda m: m.Layer(3, 2, nonlin=False),
        lambda m: m.Layer(2, 1),
        lambda m: m.Neuron(5),
        lambda m: m.Neuron(2, nonlin=False),
    ],
)
def test_same_repr_parameters_and_initial_weights_as_micrograd(make: Any) -> None:
    ours, theirs = _pair(1337, make)
    assert repr(ours) == repr(theirs)
    assert [p.data for p in ours.parameters()] == [p.data for p in theirs.parameters()]


def test_repr_of_the_demo_model() -> None:
    random.seed(0)
    r = repr(MLP(2, [16, 16, 1]))
    assert r.startswith("MLP of [Layer of [ReLUNeuron(2), ReLUNeuron(2),")
    assert r.endswith("Layer of [LinearNeuron(16)]]")


def test_forward_and_gradients_match_micrograd() -> None:
    ours, theirs = _pair(7, lambda m: m.MLP(3, [5, 4, 1]))
    x = [0.5, -1.25, 2.0]
    out, mg_out = ours(x), theirs(x)
    assert close(out.data, mg_out.data)
    (out * out).backward()
    (mg_out * mg_out).backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert close(p.grad, q.grad, atol=1e-15)


def test_value_inputs_get_gradients() -> None:
    random.seed(3)
    n = Neuron(2, nonlin=False)
    x = [Value(1.5), Value(-2.0)]
    n(x).backward()
    assert [xi.grad for xi in x] == [w.data for w in n.w]


def test_tanh_and_linear_activations() -> None:
    n = Neuron(2, activation="tanh", rng=random.Random(0))
    n.b.data = 0.1
    w0, w1 = (w.data for w in n.w)
    assert close(n([0.3, -0.7]).data, math.tanh(w0 * 0.3 - w1 * 0.7 + 0.1))
    n.nonlin = False
    assert n.activation == "linear" and repr(n) == "LinearNeuron(2)"
    assert close(n([0.3, -0.7]).data, w0 * 0.3 - w1 * 0.7 + 0.1)
    n.nonlin = True
    assert repr(n) == "ReLUNeuron(2)"


def test_mlp_activation_applies_to_hidden_layers_only() -> None:
    model = MLP(2, [3, 3, 2], activation="tanh", rng=random.Random(0))
    kinds = [[n.activation for n in layer.neurons] for layer in model.layers]
    assert kinds == [["tanh"] * 3, ["tanh"] * 3, ["linear"] * 2]
    assert isinstance(model([1.0, 2.0]), list)


def test_relu_hidden_units_are_zero_or_positive() -> None:
    layer = Layer(2, 8, rng=random.Random(1))
    outs = layer([3.0, -4.0])
    assert all(o.data >= 0.0 for o in outs)
    assert any(o.data == 0.0 for o in outs) and any(o.data > 0.0 for o in outs)


def test_rng_leaves_global_random_alone() -> None:
    random.seed(5)
    expected = random.random()
    random.seed(5)
    a = MLP(2, [4, 1], rng=random.Random(9))
    assert random.random() == expected
    b = MLP(2, [4, 1], rng=random.Random(9))
    assert a.state_dict() == b.state_dict()


def test_zero_grad() -> None:
    model = MLP(2, [3, 1], rng=random.Random(0))
    model([1.0, 1.0]).backward()
    assert any(p.grad != 0.0 for p in model.parameters())
    model.zero_grad()
    assert all(p.grad == 0.0 for p in model.parameters())


def test_state_dict_names_follow_parameter_order() -> None:
    model = MLP(2, [2, 1], rng=random.Random(0))
    state = model.state_dict()
    assert list(state) == [
        "layers.0.neurons.0.w.0",
        "layers.0.neurons.0.w.1",
        "layers.0.neurons.0.b",
        "layers.0.neurons.1.w.0",
        "layers.0.neurons.1.w.1",
        "layers.0.neurons.1.b",
        "layers.1.neurons.0.w.0",
        "layers.1.neurons.0.w.1",
        "layers.1.neurons.0.b",
    ]
    assert list(state.values()) == [p.data for p in model.parameters()]


def test_load_state_dict_round_trip() -> None:
    a = MLP(2, [4, 1], rng=random.Random(1))
    b = MLP(2, [4, 1], rng=random.Random(2))
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    assert b([0.3, 0.4]).data == a([0.3, 0.4]).data


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("layers.1.neurons.0.b"), "missing 'layers.1.neurons.0.b'"),
        (lambda s: s.update({"extra": 1.0}), "unexpected 'extra'"),
        (lambda s: s.update({"layers.0.neurons.0.w.0": "0.5"}), "expected a number"),
        (lambda s: s.update({"layers.0.neurons.0.w.0": True}), "expected a number"),
    ],
)
def test_load_state_dict_rejects_and_changes_nothing(edit: Any, message: str) -> None:
    model = MLP(2, [4, 1], rng=random.Random(1))
    before = model.state_dict()
    state = MLP(2, [4, 1], rng=random.Random(2)).state_dict()
    edit(state)
    with pytest.raises(ValueError, match=message):
        model.load_state_dict(state)
    assert model.state_dict() == before


def test_config_describes_the_architecture() -> None:
    assert MLP(2, [16, 16, 1], rng=random.Random(0)).config() == {
        "type": "MLP",
        "nin": 2,
        "nouts": [16, 16, 1],
        "activation": "relu",
    }
    assert Layer(3, 2, nonlin=False).config()["activation"] == "linear"
    assert Neuron(4, activation="tanh").config() == {
        "type": "Neuron",
        "nin": 4,
        "activation": "tanh",
    }


def test_a_plain_module_subclass() -> None:
    class Affine(Module):
        def __init__(self) -> None:
            self.a, self.b = Value(2.0), Value(1.0)

        def parameters(self) -> list[Value]:
            return [self.a, self.b]

    m = Affine()
    assert m.state_dict() == {"0": 2.0, "1": 1.0}
    m.load_state_dict({"0": 3.0, "1": -1.0})
    assert (m.a.data, m.b.data) == (3.0, -1.0)
    assert m.config() == {"type": "Affine"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: Neuron(0),
        lambda: Neuron(2.5),  # type: ignore[arg-type]
        lambda: Neuron(2, activation="gelu"),
        lambda: Layer(2, 0),
        lambda: MLP(2, []),
        lambda: MLP(2, "16"),  # type: ignore[arg-type]
        lambda: MLP(2, [4, 1], activation="sigmoid"),
    ],
)
def test_bad_sizes_and_activations_raise_value_error(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_docstring_examples() -> None:
    result = doctest.testmod(chainrule.nn)
    assert result.attempted > 0 and result.failed == 0


def test_array_parameters_load_from_nested_lists() -> None:
    # The Tensor engine's parameters hold arrays; a JSON checkpoint holds lists.
    np = pytest.importorskip("numpy")

    class Param:
        def __init__(self, data: Any) -> None:
            self.data, self.grad = data, 0.0

    class Linear(Module):
        def __init__(self) -> None:
            self.weight = Param(np.zeros((2, 3)))

        def parameters(self) -> list[Any]:
            return [self.weight]

    m = Linear()
    m.load_state_dict({"0": [[1, 2, 3], [4, 5, 6]]})
    assert m.weight.data.dtype == np.float64 and m.weight.data[1, 2] == 6.0
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        m.load_state_dict({"0": [[1, 2], [3, 4]]})
    with pytest.raises(ValueError, match="shape"):
        m.load_state_dict({"0": "abc"})
    assert m.weight.data[1, 2] == 6.0


def test_loaded_numbers_become_floats() -> None:
    n = Neuron(1, rng=random.Random(0))
    n.load_state_dict({"w.0": 2, "b": -1})
    assert type(n.w[0].data) is float and n([3.0]).data == 5.0


# -- fused=False: micrograd's neuron, node for node ---------------------------


def _ops(root: Value) -> list[str]:
    seen, stack, ops = {root}, [root], []
    while stack:
        v = stack.pop()
        if v._prev:
            ops.append(v._op)
        for c in v._prev:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return sorted(ops)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_unfused_mlp_has_the_same_numbers_with_binary_ops_only(activation: str) -> None:
    fused = MLP(3, [4, 4, 1], activation=activation, rng=random.Random(5))
    plain = MLP(3, [4, 4, 1], activation=activation, rng=random.Random(5), fused=False)
    x = [Value(0.5), Value(-1.5), Value(2.0)]
    outs = []
    for model in (fused, plain):
        for v in x:
            v.grad = 0.0
        y = model(x)
        y.backward()
        outs.append((y.data, [p.grad for p in model.parameters()], [v.grad for v in x]))
        if model is plain:
            assert set(_ops(y)) <= {"*", "+", "ReLU", "tanh"}
            # hidden: 4 + 4 units of 3 or 4 products and sums, the output 4 of each
            assert _ops(y).count("*") == 4 * 3 + 4 * 4 + 4
    (y1, g1, x1), (y2, g2, x2) = outs
    assert math.isclose(y1, y2, rel_tol=1e-12)
    assert all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(g1 + x1, g2 + x2))


def test_unfused_neuron_refuses_a_wrong_input_length() -> None:
    n = Neuron(3, fused=False)
    with pytest.raises(ValueError, match="Neuron: 3 weights but 2 inputs"):
        n([1.0, 2.0])
