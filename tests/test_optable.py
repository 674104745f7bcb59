"""The operation tables (``docs/_ext/optable.py``, shown on ``ops.md``):
one row for every rule of both engines, the scalar derivatives read from
the rules themselves, every Tensor row checked against the rule it names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "_ext"))

import optable

import chainrule.tensor.elementwise
import chainrule.value.primitives


def test_every_rule_has_a_row_and_every_row_a_rule() -> None:
    assert optable.missing() == []
    assert len(optable.scalar_rows()) == len(optable.scalar_primitives()) >= 20
    assert len(optable.tensor_rows()) == len(optable.tensor_rules()) >= 45


def test_a_new_rule_without_a_row_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    Primitive = chainrule.value.primitives.Primitive
    cube = Primitive("cube", lambda x: x**3, lambda M, x, y: (3 * x * x,))
    monkeypatch.setattr(chainrule.value.primitives, "CUBE", cube, raising=False)

    def _cube_vjp(M, g, out):  # type: ignore[no-untyped-def]
        return (g,)

    _cube_vjp.__module__ = "chainrule.tensor.elementwise"
    monkeypatch.setattr(chainrule.tensor.elementwise, "_cube_vjp", _cube_vjp, raising=False)
    monkeypatch.delitem(optable.TENSOR, "_neg_vjp")
    assert sorted(optable.missing()) == [
        "Tensor rule _cube_vjp has no row in optable.TENSOR",
        "Tensor rule _neg_vjp has no row in optable.TENSOR",
        "scalar primitive CUBE has no row in optable.SCALAR",
    ]


def test_scalar_derivatives_are_the_rules_run_on_names() -> None:
    rows = {row[1]: row[4] for row in optable.scalar_rows()}
    assert rows["`a * b`"] == "`a`: `b`, `b`: `a`"
    assert rows["`a / b`"] == "`a`: `1 / b`, `b`: `-y / b`"
    assert rows["`x.tanh(), tanh(x)`"] == "`x`: `1 - y * y`"
    assert rows["`x ** c`"] == "`x`: `c * x ** (c - 1)`"
    assert rows["`dot(w, x)`"] == "`w_i`: `x_i`, `x_i`: `w_i`"


def test_a_rule_that_branches_in_python_needs_a_note() -> None:
    relu_of_dot = optable.scalar_primitives()["AFFINE_RELU"]
    op = optable.SCALAR["AFFINE_RELU"]
    bare = optable.ScalarOp(op.call, op.computes, op.torch, op.inputs, op.sample)
    with pytest.raises(optable.Symbolic, match="AFFINE_RELU: the rule does not run on symbols"):
        optable.local_derivatives("AFFINE_RELU", bare, relu_of_dot)


def test_a_tensor_row_must_record_the_rule_it_names() -> None:
    rules = optable.tensor_rules()
    wrong = optable.TensorOp("x.exp()", "", "", "")
    with pytest.raises(ValueError, match="does not record _log_vjp"):
        optable.check_tensor_row("_log_vjp", wrong, rules["_log_vjp"])
    assert optable.check_tensor_row("_exp_vjp", wrong, rules["_exp_vjp"])
