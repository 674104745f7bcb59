"""The operation tables of both engines, generated from their rule tables.

Rows come from the engines themselves: every ``Primitive`` of the scalar
engine's table (``chainrule.value.primitives``, with the library's own in
``chainrule.fused`` and ``chainrule.losses``) and every vector-Jacobian
product of the Tensor engine (the ``*_vjp`` rules its ops record on their
nodes). For a scalar primitive the local-derivative column is its rule
itself, run on symbols instead of numbers; "create_graph" is found out by
differentiating the operation twice while the table is made. What each
operation computes and its PyTorch counterpart are written below, once per
rule; a rule without a description, or a description without a rule, is
an error (``tests/test_optable.py``, and a warning in the site's build).

Written to ``_generated/ops-value.md`` and ``_generated/ops-tensor.md`` at
build time (``ops.md`` includes them); the tables themselves need no Sphinx.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

# -- symbols: a rule run on names gives its formula ----------------------------

_ORDER = {"or": 1, "and": 2, "cmp": 3, "+": 4, "*": 5, "neg": 6, "**": 7, "atom": 9}


class Symbolic(Exception):
    """A rule that cannot run on symbols (it branches on its data in Python)."""


def _number(x: float) -> str:
    return f"{x:g}" if x != int(x) else str(int(x))


class Sym:
    """An expression in names, built by running a rule's arithmetic."""

    def __init__(self, text: str, order: int = _ORDER["atom"]) -> None:
        self.text, self.order = text, order

    def __repr__(self) -> str:
        return self.text

    def wrap(self, order: int, right: bool = False) -> str:
        tight = self.order < order or (right and self.order == order)
        return f"({self.text})" if tight else self.text


def sym(x: Any) -> Sym:
    if isinstance(x, Sym):
        return x
    if isinstance(x, bool):
        return Sym(str(x))
    if isinstance(x, (int, float)):
        return Sym(_number(x)) if x >= 0 else Sym(f"-{_number(-x)}", _ORDER["neg"])
    raise Symbolic(f"not a number or symbol: {x!r}")


def _binary(op: str, order: int) -> tuple[Callable[..., Sym], Callable[..., Sym]]:
    def left(a: Any, b: Any) -> Sym:
        a, b = sym(a), sym(b)
        right_assoc = op == "**"
        return Sym(f"{a.wrap(order, right_assoc)} {op} {b.wrap(order, not right_assoc)}", order)

    return left, lambda b, a: left(a, b)


for _op, _name, _kind in [
    ("+", "add", "+"),
    ("-", "sub", "+"),
    ("*", "mul", "*"),
    ("/", "truediv", "*"),
    ("**", "pow", "**"),
    ("and", "and", "and"),
    ("or", "or", "or"),
]:
    _l, _r = _binary(_op, _ORDER[_kind])
    setattr(Sym, f"__{_name}__", _l)
    setattr(Sym, f"__r{_name}__", _r)
for _op, _name in [("==", "eq"), ("!=", "ne"), ("<", "lt"), ("<=", "le"), (">", "gt")]:
    setattr(Sym, f"__{_name}__", _binary(_op, _ORDER["cmp"])[0])
Sym.__ge__ = _binary(">=", _ORDER["cmp"])[0]  # type: ignore[method-assign]
Sym.__neg__ = lambda self: Sym(f"-{self.wrap(_ORDER['neg'])}", _ORDER["neg"])  # type: ignore[attr-defined]
Sym.__hash__ = object.__hash__  # type: ignore[method-assign]


def _no_branch(self: Sym) -> bool:
    raise Symbolic(f"a Python branch on {self.text}")


Sym.__bool__ = _no_branch  # type: ignore[attr-defined]


def _call(name: str) -> Callable[..., Sym]:
    return lambda *args: Sym(f"{name}({', '.join(sym(a).text for a in args)})")


#: The scalar rules' namespace ``M``, on symbols.
SYMBOLIC = SimpleNamespace(
    div=lambda a, b: sym(a) / sym(b),
    pow=lambda a, b: sym(a) ** sym(b),
    pow_scalar=lambda a, b: sym(a) ** sym(b),
    exp=_call("exp"),
    log=_call("log"),
    sqrt=_call("sqrt"),
    sin=_call("sin"),
    cos=_call("cos"),
    sigmoid=_call("sigmoid"),
    sign=_call("sign"),
    data=lambda x: x,
    where=lambda c, t, f: Sym(
        f"{sym(t).wrap(_ORDER['or'] + 1)} if {sym(c).text} else {sym(f).wrap(_ORDER['or'])}",
        0,
    ),
)


# -- the scalar engine ---------------------------------------------------------


@dataclass(frozen=True)
class ScalarOp:
    """How users write a primitive, and what it is."""

    call: str  # as user code writes it
    computes: str
    torch: str
    inputs: tuple[str, ...]  # the rule's input names (its constant's last), for its formula
    sample: tuple[float, ...]  # input values to check create_graph at
    const: Any = None  # the constant operand of a ``const`` primitive, for the check
    note: str = ""  # the derivative in words, for a rule that does not run on symbols


SCALAR_MODULES = (
    "chainrule.value.primitives",
    "chainrule.value.sums",
    "chainrule.fused",
    "chainrule.losses",
)

#: One entry per primitive: the module-level name of a Primitive, or of a
#: function that makes one per constant (``pow_const``).
SCALAR: dict[str, ScalarOp] = {
    "ADD": ScalarOp("a + b", "sum", "torch.add", ("a", "b"), (0.7, 1.3)),
    "MUL": ScalarOp("a * b", "product", "torch.mul", ("a", "b"), (0.7, 1.3)),
    "DIV": ScalarOp("a / b", "quotient (IEEE: 1/0 = inf)", "torch.div", ("a", "b"), (0.7, 1.3)),
    "POW": ScalarOp("a ** b", "power, C's pow", "torch.pow", ("a", "b"), (0.7, 1.3)),
    "MAXIMUM": ScalarOp(
        "a.max(b), maximum(a, b)",
        "larger of two; ties split the gradient",
        "torch.maximum",
        ("a", "b"),
        (0.7, 1.3),
    ),
    "MINIMUM": ScalarOp(
        "a.min(b), minimum(a, b)",
        "smaller of two; ties split the gradient",
        "torch.minimum",
        ("a", "b"),
        (0.7, 1.3),
    ),
    "EXP": ScalarOp("x.exp(), exp(x)", "e to the x", "torch.exp", ("x",), (0.7,)),
    "LOG": ScalarOp("x.log(), log(x)", "natural log; log 0 = -inf", "torch.log", ("x",), (0.7,)),
    "SQRT": ScalarOp("x.sqrt(), sqrt(x)", "square root", "torch.sqrt", ("x",), (0.7,)),
    "TANH": ScalarOp("x.tanh(), tanh(x)", "hyperbolic tangent", "torch.tanh", ("x",), (0.7,)),
    "SIGMOID": ScalarOp(
        "x.sigmoid(), sigmoid(x)", "1 / (1 + e^-x)", "torch.sigmoid", ("x",), (0.7,)
    ),
    "SOFTPLUS": ScalarOp(
        "x.softplus(), softplus(x)",
        "log(1 + e^x), exact at every x",
        "torch.logaddexp(x, 0)",
        ("x",),
        (0.7,),
    ),
    "RELU": ScalarOp("x.relu(), relu(x)", "max(x, 0); keeps nan", "torch.relu", ("x",), (0.7,)),
    "ABS": ScalarOp("abs(x)", "absolute value", "torch.abs", ("x",), (0.7,)),
    "SIN": ScalarOp("x.sin(), sin(x)", "sine", "torch.sin", ("x",), (0.7,)),
    "COS": ScalarOp("x.cos(), cos(x)", "cosine", "torch.cos", ("x",), (0.7,)),
    "ADD_N": ScalarOp(
        "add_n(xs)", "sum of n terms, one node", "torch.sum", ("x_i",), (0.7, 1.3, 0.4)
    ),
    "DOT": ScalarOp(
        "dot(w, x)", "w . x, one node", "torch.dot", ("w_i", "x_i"), (0.5, -1.0, 2.0, 3.0)
    ),
    "AFFINE": ScalarOp(
        "dot(w, x, b), a linear neuron",
        "w . x + b, one node",
        "torch.nn.functional.linear",
        ("w_i", "x_i", "b"),
        (0.5, -1.0, 2.0, 3.0, 0.25),
    ),
    "AFFINE_RELU": ScalarOp(
        "dot(w, x, b, activation='relu'), an nn neuron",
        "relu(w . x + b), one node",
        "relu(linear(...))",
        ("w_i", "x_i", "b"),
        (0.5, -1.0, 2.0, 3.0, 0.25),
        note="as `dot(w, x, b)`'s where the output is > 0; 0 for every input where not",
    ),
    "pow_const": ScalarOp("x ** c", "power with a constant exponent", "torch.pow", ("x",), (0.7,)),
    "EXP_SUB": ScalarOp(
        "chainrule.fused.softmax",
        "exp(a - b): a softmax entry, b the logsumexp",
        "torch.softmax",
        ("a", "b"),
        (0.7, 1.3),
    ),
    "LOGSUMEXP": ScalarOp(
        "chainrule.losses.logsumexp",
        "log(sum(exp(x_i))), stable",
        "torch.logsumexp",
        ("x_i",),
        (0.7, 1.3, 0.4),
    ),
}

#: Factories: one primitive per constant; made with the constant named ``c``.
FACTORIES = ("pow_const",)


class _NamedConstant(float):
    """A factory's constant: a number where the factory needs one (a name,
    a zero test), the symbol ``c`` in the rule's arithmetic."""

    def __format__(self, spec: str) -> str:
        return "c"

    def _sym(self, other: Any, op: Callable[[Any, Any], Any], swap: bool = False) -> Any:
        return op(sym(other), Sym("c")) if swap else op(Sym("c"), sym(other))


for _name, _fn in [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("truediv", lambda a, b: a / b),
    ("pow", lambda a, b: a**b),
]:
    setattr(_NamedConstant, f"__{_name}__", lambda s, o, _f=_fn: s._sym(o, _f))
    setattr(_NamedConstant, f"__r{_name}__", lambda s, o, _f=_fn: s._sym(o, _f, True))


def scalar_primitives() -> dict[str, Any]:
    """name -> Primitive (or factory), from the scalar engine's modules."""
    from chainrule.value.primitives import Primitive

    found: dict[str, Any] = {}
    for module_name in SCALAR_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            rule = isinstance(obj, Primitive) and obj.derivative is not None
            if rule or (name in FACTORIES and callable(obj)):
                found.setdefault(name, obj)
    return found


def local_derivatives(name: str, op: ScalarOp, primitive: Any) -> str:
    """The rule run on symbols: ``a: b, b: a`` for ``a * b``."""
    if name in FACTORIES:
        if op.note:  # computes from its constant when made: no symbol survives
            return op.note
        primitive = inspect.unwrap(primitive)(_NamedConstant(3.0))
    inputs = [Sym(n) for n in op.inputs]
    differentiated = op.inputs[:-1] if primitive.const else op.inputs
    try:
        local = primitive.derivative(SYMBOLIC, *inputs, Sym("y"))
        cells = [f"`{n}`: `{sym(d).text}`" for n, d in zip(differentiated, local, strict=True)]
    except (Symbolic, TypeError, ValueError, IndexError) as e:
        if not op.note:
            raise Symbolic(f"{name}: the rule does not run on symbols ({e}); give a note") from e
        return op.note
    return ", ".join(cells)


def _second_order_scalar(name: str, op: ScalarOp, primitive: Any) -> bool:
    from chainrule import Value, gradients

    if name in FACTORIES:
        primitive = primitive(2.0)
    xs = [Value(v) for v in op.sample]
    out = primitive(*xs, op.const) if primitive.const else primitive(*xs)
    first = gradients(out, xs, create_graph=True)
    total = sum(g * (i + 1.0) for i, g in enumerate(first) if isinstance(g, Value))
    if not isinstance(total, Value):
        return True  # constant first derivatives: the second is 0
    gradients(total, xs)
    return True


def scalar_rows() -> list[list[str]]:
    rows = []
    for name, primitive in scalar_primitives().items():
        op = SCALAR.get(name)
        if op is None:
            continue  # reported by missing()
        try:
            second = "yes" if _second_order_scalar(name, op, primitive) else "no"
        except TypeError:
            second = "no"
        label = primitive.name if name not in FACTORIES else f"{name}(c)"
        rows.append(
            [
                f"`{label}`",
                f"`{op.call}`",
                op.computes,
                f"`{op.torch}`",
                local_derivatives(name, op, primitive),
                second,
            ]
        )
    return rows


# -- the Tensor engine -------------------------------------------------------


@dataclass(frozen=True)
class TensorOp:
    """How users write a Tensor op, and its vector-Jacobian product."""

    call: str  # an expression in the sample names below; it must record this rule
    computes: str
    torch: str
    vjp: str  # the gradient toward each input, given the output's gradient g


#: Names the calls may use: x, y (3, 4) and z (3, 4) Tensors with values in
#: (0.5, 1.5), w (5, 4) and bias (5,) Tensors, q, k, v (2, 3, 4), logits
#: (3, 5) and targets, idx, mask and cond arrays; ``ct`` is chainrule.tensor.
TENSOR: dict[str, TensorOp] = {
    "_add_vjp": TensorOp("x + y", "sum, broadcasting", "torch.add", "`g`, `g`"),
    "_add_const_vjp": TensorOp("x + 2.0", "sum with an array or number", "torch.add", "`g`"),
    "_sub_vjp": TensorOp("x - y", "difference", "torch.sub", "`g`, `-g`"),
    "_rsub_const_vjp": TensorOp("2.0 - x", "a number minus x", "torch.rsub", "`-g`"),
    "_mul_vjp": TensorOp("x * y", "product", "torch.mul", "`g * y`, `g * x`"),
    "_mul_const_vjp": TensorOp("x * 2.0", "product with a constant", "torch.mul", "`g * c`"),
    "_div_vjp": TensorOp("x / y", "quotient", "torch.div", "`g / y`, `-g * (x / y) / y`"),
    "_div_const_vjp": TensorOp("x / 2.0", "quotient by a constant", "torch.div", "`g / c`"),
    "_rdiv_const_vjp": TensorOp("2.0 / x", "a constant over x", "torch.div", "`-g * (c / x) / x`"),
    "_pow_vjp": TensorOp(
        "x ** y", "power", "torch.pow", "`g * y * x ** (y - 1)`, `g * out * log(x)`"
    ),
    "_pow_const_vjp": TensorOp(
        "x ** 3.0", "power, constant exponent", "torch.pow", "`g * c * x ** (c - 1)`"
    ),
    "_rpow_const_vjp": TensorOp(
        "2.0 ** x", "a constant to the x", "torch.pow", "`g * out * log(c)`"
    ),
    "_neg_vjp": TensorOp("-x", "negation", "torch.neg", "`-g`"),
    "_exp_vjp": TensorOp("x.exp()", "e to the x", "torch.exp", "`g * out`"),
    "_log_vjp": TensorOp("x.log()", "natural log", "torch.log", "`g / x`"),
    "_sqrt_vjp": TensorOp("x.sqrt()", "square root", "torch.sqrt", "`g / (2 * out)`"),
    "_tanh_vjp": TensorOp("x.tanh()", "hyperbolic tangent", "torch.tanh", "`g * (1 - out ** 2)`"),
    "_sigmoid_vjp": TensorOp("x.sigmoid()", "logistic", "torch.sigmoid", "`g * out * (1 - out)`"),
    "_relu_vjp": TensorOp("x.relu()", "max(x, 0)", "torch.relu", "`g` where `out > 0`, else 0"),
    "_abs_vjp": TensorOp("abs(x)", "absolute value", "torch.abs", "`g * sign(x)`"),
    "_clamp_vjp": TensorOp(
        "ct.clamp(x, 0.7, 1.2)",
        "limits to [min, max]",
        "torch.clamp",
        "`g` inside the limits, 0 outside",
    ),
    "_where_vjp": TensorOp(
        "ct.where(cond, x, y)", "choose elementwise", "torch.where", "`g` where chosen, 0 elsewhere"
    ),
    "_gelu_vjp": TensorOp(
        "ct.gelu(x)",
        "x * Phi(x) (or its tanh form)",
        "torch.nn.functional.gelu",
        "`g * (Phi(x) + x * phi(x))`",
    ),
    "_erf_vjp": TensorOp(
        "erf_op(x)",
        "the error function (gelu's VJP under create_graph)",
        "torch.erf",
        "`g * 2 / sqrt(pi) * exp(-x ** 2)`",
    ),
    "_astype_vjp": TensorOp(
        "ct.astype(x, np.float32)",
        "another float dtype",
        "Tensor.to(dtype)",
        "`g` in the input's dtype",
    ),
    "_matmul_vjp": TensorOp(
        "x @ w.T", "matrix product, batched", "torch.matmul", "for `a @ b`: `g @ b.T`, `a.T @ g`"
    ),
    "_matmul_left_vjp": TensorOp(
        "x @ np.ones((4, 2))", "product with a constant on the right", "torch.matmul", "`g @ c.T`"
    ),
    "_matmul_right_vjp": TensorOp(
        "ct.matmul(np.ones((2, 3)), x)",
        "product with a constant on the left",
        "torch.matmul",
        "`c.T @ g`",
    ),
    "_linear_vjp": TensorOp(
        "ct.linear(x, w, bias)",
        "x @ w.T + bias, one node",
        "torch.nn.functional.linear",
        "`g @ w`, `g.T @ x`, `g` summed over rows",
    ),
    "_sum_vjp": TensorOp("x.sum(axis=0)", "sum over axes", "torch.sum", "`g` broadcast back"),
    "_mean_vjp": TensorOp(
        "x.mean(axis=1)", "mean over axes", "torch.mean", "`g / n` broadcast back"
    ),
    "_max_vjp": TensorOp(
        "x.max(axis=1)", "maximum over axes", "torch.amax", "`g` split evenly among the maxima"
    ),
    "_min_vjp": TensorOp(
        "x.min(axis=1)", "minimum over axes", "torch.amin", "`g` split evenly among the minima"
    ),
    "_var_vjp": TensorOp(
        "x.var(axis=1)",
        "variance, Bessel's correction by default",
        "torch.var",
        "`g * 2 * (x - mean) / (n - correction)`",
    ),
    "_std_vjp": TensorOp(
        "x.std(axis=1)",
        "standard deviation",
        "torch.std",
        "`g * (x - mean) / ((n - correction) * out)`",
    ),
    "_reshape_vjp": TensorOp(
        "x.reshape((4, 3))",
        "new shape (also view, flatten, squeeze, unsqueeze)",
        "torch.reshape",
        "`g` reshaped back",
    ),
    "_transpose_vjp": TensorOp(
        "x.T", "axes permuted (also swapaxes)", "torch.permute", "`g` with the inverse permutation"
    ),
    "_getitem_vjp": TensorOp(
        "x[1:, idx]",
        "slicing and integer or boolean indexing",
        "Tensor.__getitem__",
        "`g` scattered back; repeats add up",
    ),
    "_scatter_vjp": TensorOp(
        "ct.scatter((3, 4), (slice(1, 3),), True, y[:2])",
        "values placed in zeros (indexing's VJP)",
        "Tensor.index_put",
        "`g[index]`",
    ),
    "_broadcast_to_vjp": TensorOp(
        "ct.broadcast_to(x[:1], (3, 4))",
        "broadcast to a shape",
        "torch.broadcast_to",
        "`g` summed back",
    ),
    "_embedding_vjp": TensorOp(
        "ct.embedding(w, idx)",
        "rows of a table",
        "torch.nn.functional.embedding",
        "`g` added into the rows picked",
    ),
    "_concatenate_vjp": TensorOp(
        "ct.concatenate([x, y], axis=1)",
        "joined along an axis (cat)",
        "torch.cat",
        "`g` split at the seams",
    ),
    "_stack_vjp": TensorOp(
        "ct.stack([x, y])", "stacked on a new axis", "torch.stack", "`g` unstacked"
    ),
    "_softmax_vjp": TensorOp(
        "x.softmax()", "softmax over an axis", "torch.softmax", "`out * (g - sum(g * out))`"
    ),
    "_log_softmax_vjp": TensorOp(
        "ct.log_softmax(x)",
        "log of softmax, stable",
        "torch.log_softmax",
        "`g - softmax(x) * sum(g)`",
    ),
    "_cross_entropy_vjp": TensorOp(
        "ct.cross_entropy(logits, targets)",
        "mean negative log-likelihood; ignore_index skipped",
        "torch.nn.functional.cross_entropy",
        "`g * (softmax(logits) - onehot(targets)) / n`",
    ),
    "_rms_norm_vjp": TensorOp(
        "ct.rms_norm(x, bias[:4])",
        "x / rms(x) * weight",
        "torch.nn.functional.rms_norm",
        "`(weight * g - xhat * mean(weight * g * xhat)) / rms`, `sum(g * xhat)`",
    ),
    "_layer_norm_vjp": TensorOp(
        "ct.layer_norm(x, bias[:4], bias[1:])",
        "(x - mean) / std * weight + bias",
        "torch.nn.functional.layer_norm",
        "`(h - mean(h) - xhat * mean(h * xhat)) / std` with "
        "`h = weight * g`; `sum(g * xhat)`; `sum(g)`",
    ),
    "_masked_fill_vjp": TensorOp(
        "ct.masked_fill(x, mask, -1.0)",
        "a value where the mask is set",
        "Tensor.masked_fill",
        "`g` where not masked",
    ),
    "_attention_vjp": TensorOp(
        "ct.attention(q, k, v)",
        "causal softmax(q k^T / sqrt(d)) v, one node",
        "torch.nn.functional.scaled_dot_product_attention",
        "`dp = g v^T`, `ds = p * (dp - sum(dp * p))`; `ds k * scale`, `ds^T q * scale`, `p^T g`",
    ),
    "_self_attention_vjp": TensorOp(
        "ct.nn_ops.self_attention(q, x.T @ y, y.T @ z, z.T @ x, 2)",
        "causal attention of the heads of x wq^T, x wk^T, x wv^T (one product), one node",
        "torch.nn.functional.scaled_dot_product_attention",
        "attention's, then `gq wq + gk wk + gv wv` (one product); `gq^T x`, `gk^T x`, `gv^T x`",
    ),
    "_feed_forward_vjp": TensorOp(
        "ct.feed_forward.feed_forward(q, w, logits)",
        "relu(x w1^T) w2^T, a transformer's feed-forward block, one node",
        "torch.nn.functional.linear",
        "`gh = g w2`, `g^T h`; `gh` where `h > 0`; `gh w1`, `gh^T x`",
    ),
    "_log_sigmoid_vjp": TensorOp(
        "ct.log_sigmoid(x)",
        "log(sigmoid(x)), stable",
        "torch.nn.functional.logsigmoid",
        "`g * sigmoid(-x)`",
    ),
    "_bce_vjp": TensorOp(
        "ct.binary_cross_entropy(x.sigmoid(), y * 0.5, reduction='none')",
        "-(t log p + (1 - t) log(1 - p)), logs clamped at -100",
        "torch.nn.functional.binary_cross_entropy",
        "`g * (p - t) / (p * (1 - p))`; toward `t`: `-g * log(p / (1 - p))`",
    ),
    "_bce_logits_vjp": TensorOp(
        "ct.binary_cross_entropy_with_logits(x, y * 0.5, reduction='none')",
        "binary cross-entropy of sigmoid(x), exact",
        "torch.nn.functional.binary_cross_entropy_with_logits",
        "`g * (sigmoid(x) - t)`; toward `t`: `-g * x` (with `pos_weight`: PyTorch's formulas)",
    ),
    "_conv2d_vjp": TensorOp(
        "ct.conv2d(x.reshape(1, 1, 3, 4), w.reshape(5, 1, 2, 2))",
        "2-d convolution (cross-correlation), NCHW: stride, padding, dilation, groups",
        "torch.nn.functional.conv2d",
        "toward x: the transposed convolution of `g` with `w`; toward `w`: `g` against"
        " x's patches; toward the bias: `g` summed over N, H, W",
    ),
    "_input_grad_vjp": TensorOp(
        "ct.conv.input_grad_op(ct.conv2d(x.reshape(1, 1, 3, 4), w.reshape(5, 1, 2, 2)),"
        " w.reshape(5, 1, 2, 2), ct.conv.Geometry((1, 1), ((0, 0), (0, 0)), (1, 1), 1),"
        " (1, 1, 3, 4))",
        "conv2d's input gradient as a node (recorded by `create_graph`)",
        "torch.nn.grad.conv2d_input",
        "toward `g`: conv2d of the gradient with `w`; toward `w`: as conv2d's weight gradient",
    ),
    "_weight_grad_vjp": TensorOp(
        "ct.conv.weight_grad_op(x.reshape(1, 1, 3, 4), ct.conv2d(x.reshape(1, 1, 3, 4),"
        " w.reshape(5, 1, 2, 2)), ct.conv.Geometry((1, 1), ((0, 0), (0, 0)), (1, 1), 1),"
        " (5, 1, 2, 2))",
        "conv2d's weight gradient as a node (recorded by `create_graph`)",
        "torch.nn.grad.conv2d_weight",
        "toward x: conv2d's input gradient of `g`; toward `g`: conv2d of x with the gradient",
    ),
    "_max_pool_vjp": TensorOp(
        "ct.max_pool2d(x.reshape(1, 1, 3, 4), 2)",
        "the largest entry of each window",
        "torch.nn.functional.max_pool2d",
        "`g` to the position each window picked, 0 elsewhere",
    ),
    "_batch_norm_vjp": TensorOp(
        "ct.batch_norm(x.reshape(3, 4, 1, 1), None, None, training=True)",
        "each channel normalized by its batch mean and variance, then scaled and shifted",
        "torch.nn.functional.batch_norm",
        "`(g - mean(g) - x̂ mean(g x̂)) / sqrt(var + eps)` per channel (times the weight);"
        " weight: `sum(g x̂)`; bias: `sum(g)`",
    ),
    "_dropout_vjp": TensorOp(
        "ct.dropout(x, 0.5, rng=np.random.default_rng(0))",
        "zero with probability p, scale the rest by 1/(1-p)",
        "torch.nn.functional.dropout",
        "`g * scale` where kept, 0 elsewhere",
    ),
}

#: Rules that are helpers of others, never a node's own.
TENSOR_HELPERS = frozenset({"_extremum_vjp", "_leaf_vjp"})


def tensor_rules() -> dict[str, Callable[..., Any]]:
    """name -> VJP function, for every rule the Tensor engine's ops record."""
    import chainrule.tensor as ct

    found = {}
    for info in pkgutil.iter_modules(ct.__path__, "chainrule.tensor."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                name.endswith("_vjp")
                and inspect.isfunction(obj)
                and obj.__module__ == module.__name__
                and name not in TENSOR_HELPERS
            ):
                found[name] = obj
    return found


def _tensor_sample() -> dict[str, Any]:
    import numpy as np

    import chainrule.tensor as ct
    from chainrule import Tensor
    from chainrule.tensor.elementwise import erf_op

    rng = np.random.default_rng(0)

    def t(*shape: int) -> Tensor:
        return Tensor(rng.uniform(0.5, 1.5, shape))

    return {
        "ct": ct,
        "np": np,
        "erf_op": erf_op,
        "x": t(3, 4),
        "y": t(3, 4),
        "z": t(3, 4),
        "w": t(5, 4),
        "bias": t(5),
        "q": t(2, 3, 4),
        "k": t(2, 3, 4),
        "v": t(2, 3, 4),
        "logits": t(3, 5),
        "targets": np.array([1, 0, 4]),
        "idx": np.array([0, 2, 2]),
        "mask": ct.causal_mask(4)[:3],
        "cond": rng.random((3, 4)) > 0.5,
    }


def check_tensor_row(name: str, op: TensorOp, rule: Callable[..., Any]) -> bool:
    """Run the row's call: it must record ``rule``; returns whether it can
    be differentiated twice (``create_graph``)."""
    import numpy as np

    from chainrule import Tensor
    from chainrule.tensor import gradients

    sample = _tensor_sample()
    out = eval(op.call, sample)  # a fixed expression from the table above
    if not isinstance(out, Tensor) or out._vjp is not rule:
        raise ValueError(f"{name}: `{op.call}` does not record {name}")
    used = compile(op.call, "<optable>", "eval").co_names
    inputs = [v for n, v in sample.items() if n in used and isinstance(v, Tensor)]
    weights = np.random.default_rng(1).uniform(0.5, 1.5, out.data.shape)
    first = gradients((out * weights).sum(), inputs, create_graph=True)
    total = None
    for g in first:
        if isinstance(g, Tensor) and g.requires_grad:
            total = g.sum() if total is None else total + g.sum()
    if total is not None:
        gradients(total, inputs)
    return True


def tensor_rows() -> list[list[str]]:
    rows = []
    rules = tensor_rules()
    for name in TENSOR:  # in the table's order; rules without a row: missing()
        if name not in rules:
            continue
        op, rule = TENSOR[name], rules[name]
        try:
            second = "yes" if check_tensor_row(name, op, rule) else "no"
        except TypeError:
            second = "no"
        rows.append([f"`{op.call}`", op.computes, f"`{op.torch}`", op.vjp, second])
    return rows


# -- both -------------------------------------------------------------------


def missing() -> list[str]:
    """Rules without a row and rows without a rule, one line each."""
    problems = []
    scalar, tensor = scalar_primitives(), tensor_rules()
    problems += [
        f"scalar primitive {n} has no row in optable.SCALAR" for n in scalar if n not in SCALAR
    ]
    problems += [f"optable.SCALAR row {n} names no primitive" for n in SCALAR if n not in scalar]
    problems += [f"Tensor rule {n} has no row in optable.TENSOR" for n in tensor if n not in TENSOR]
    problems += [f"optable.TENSOR row {n} names no rule" for n in TENSOR if n not in tensor]
    return problems


def markdown(header: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def list_table(header: list[str], rows: list[list[list[str]]], widths: list[int]) -> str:
    """A MyST ``list-table`` (class ``ops-table``): each cell a list of
    lines, shown one under the other, so that a row's cells wrap inside
    their column instead of widening the table past the page."""
    lines = [
        "```{list-table}",
        ":header-rows: 1",
        ":class: ops-table",
        f":widths: {' '.join(map(str, widths))}",
        "",
    ]
    for row in [[[h] for h in header], *rows]:
        for i, cell in enumerate(row):
            first, *rest = cell or [""]
            lines.append(f"{'* -' if i == 0 else '  -'} {first}")
            for more in rest:
                lines += ["", f"    {more}"]
    return "\n".join([*lines, "```"]) + "\n"


#: One input's local derivative in a scalar row: ```a`: `b``.
_PER_INPUT = re.compile(r", (?=`\w+`: )")


def _table(
    header: list[str], cells: list[list[list[str]]], widths: list[int], second: list[str]
) -> str:
    """The table, with a create_graph column unless every row says yes
    (then a sentence above it says so)."""
    if all(s == "yes" for s in second):
        return (
            "Every operation was differentiated twice while this table was made: "
            "each can be differentiated again under `create_graph=True`.\n\n"
            + list_table(header, cells, widths)
        )
    widths = [*(w * 9 // 10 for w in widths), 10]
    rows = [[*row, [s]] for row, s in zip(cells, second)]
    return list_table([*header, "create_graph"], rows, widths)


def value_table() -> str:
    rows = scalar_rows()
    cells = [
        [[written, f"primitive {label}"], [computes, f"PyTorch: {torch}"], _PER_INPUT.split(d)]
        for label, written, computes, torch, d, _ in rows
    ]
    header = ["written", "computes", "local derivative (`y`: the output)"]
    return _table(header, cells, [26, 30, 44], [r[5] for r in rows])


def tensor_table() -> str:
    rows = tensor_rows()
    cells = [
        [[written], [computes, f"PyTorch: {torch}"], [vjp]]
        for written, computes, torch, vjp, _ in rows
    ]
    header = ["written", "computes", "VJP (`g`: the output's gradient)"]
    return _table(header, cells, [30, 32, 38], [r[4] for r in rows])


def write_tables(app: Any) -> None:
    from pathlib import Path

    from sphinx.util import logging

    for problem in missing():
        logging.getLogger(__name__).warning("operation tables: %s", problem)
    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    (out / "ops-value.md").write_text(value_table(), encoding="utf-8")
    (out / "ops-tensor.md").write_text(tensor_table(), encoding="utf-8")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_tables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
