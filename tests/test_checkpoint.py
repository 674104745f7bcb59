"""Checkpoints: exact round trips, clear errors that change nothing, and
saves that a crash cannot leave half-written."""

from __future__ import annotations

import doctest
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

import chainrule.checkpoint
from chainrule import checkpoint
from chainrule.checkpoint import CheckpointError
from chainrule.io import sealed
from chainrule.nn import MLP


def _model(seed: int = 0, nouts: list[int] | None = None, activation: str = "relu") -> MLP:
    return MLP(2, nouts or [8, 8, 1], activation=activation, rng=random.Random(seed))


@pytest.fixture
def saved(tmp_path: Path) -> tuple[MLP, Path]:
    model = _model(1)
    path = tmp_path / "model.json"
    checkpoint.save(model, path, metadata={"step": 42, "loss": 0.125})
    return model, path


def test_round_trip_is_exact(saved: tuple[MLP, Path]) -> None:
    model, path = saved
    other = _model(2)
    assert other.state_dict() != model.state_dict()
    metadata = checkpoint.load(path, other)
    assert other.state_dict() == model.state_dict()  # every float bit for bit
    assert metadata == {"step": 42, "loss": 0.125}


def test_load_model_builds_the_architecture(saved: tuple[MLP, Path]) -> None:
    model, path = saved
    random.seed(11)
    expected_next = random.random()
    random.seed(11)
    restored = checkpoint.load_model(path)
    assert random.random() == expected_next  # the global stream did not move
    assert repr(restored) == repr(model)
    assert restored.state_dict() == model.state_dict()
    assert restored([0.5, -0.5]).data == model([0.5, -0.5]).data


def test_file_is_readable_json(saved: tuple[MLP, Path]) -> None:
    _, path = saved
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc["format"] == "chainrule-checkpoint" and doc["version"] == 2
    assert len(doc["file_sha256"]) == 64
    assert doc["architecture"] == {
        "type": "MLP",
        "nin": 2,
        "nouts": [8, 8, 1],
        "activation": "relu",
    }
    assert len(doc["parameters"]) == len(_model().parameters())
    assert '\n  "layers.0.neurons.0.w.0": ' in text  # one parameter a line


def test_checkpoint_of_another_architecture(saved: tuple[MLP, Path]) -> None:
    _, path = saved
    for other in (_model(3, [8, 4, 1]), _model(3, activation="tanh")):
        before = other.state_dict()
        with pytest.raises(CheckpointError, match=r"checkpoint is for MLP.*but the model is MLP"):
            checkpoint.load(path, other)
        assert other.state_dict() == before


def test_truncated_checkpoint(saved: tuple[MLP, Path]) -> None:
    _, path = saved
    data = path.read_bytes()
    model = _model(5)
    before = model.state_dict()
    for cut in (0, 1, len(data) // 2, len(data) - 3):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=r"corrupt or truncated|damaged") as info:
            checkpoint.load(path, model)
        assert "\n" not in str(info.value)
        assert model.state_dict() == before


def _edit(path: Path, change: Any, reseal: bool = False) -> None:
    """Change the document; with ``reseal`` also recompute its digest (as
    someone who edits the file on purpose would), so the later checks run."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    if reseal:
        doc["file_sha256"] = sealed.PLACEHOLDER
        path.write_bytes(sealed.seal(json.dumps(doc).encode()))
    else:
        path.write_text(json.dumps(doc, indent=1), encoding="utf-8")


@pytest.mark.parametrize(
    "change, reseal, message",
    [
        (lambda d: d["parameters"].update({"layers.0.neurons.0.b": 0.5}), 0, "modified or damaged"),
        (lambda d: d["parameters"].pop("layers.2.neurons.0.b"), 0, "modified or damaged"),
        (lambda d: d["architecture"].update({"nouts": [8, 8, 2]}), 0, "modified or damaged"),
        (lambda d: d["metadata"].update({"step": 43}), 0, "modified or damaged"),
        (lambda d: None, 0, "modified or damaged"),  # the same JSON, other whitespace
        (lambda d: d.pop("file_sha256"), 0, "damaged"),
        (lambda d: d.update({"version": 3}), 1, "version 3 is not supported"),
        (lambda d: d.update({"format": "pickle"}), 1, "not a chainrule checkpoint"),
        (lambda d: d.pop("parameters"), 1, "lacks its architecture or parameters"),
        (lambda d: d["parameters"].pop("layers.2.neurons.0.b"), 1, "missing 'layers.2.neurons"),
    ],
)
def test_edited_checkpoint(
    saved: tuple[MLP, Path], change: Any, reseal: bool, message: str
) -> None:
    _, path = saved
    _edit(path, change, reseal)
    model = _model(5)
    before = model.state_dict()
    with pytest.raises(CheckpointError, match=message):
        checkpoint.load(path, model)
    assert model.state_dict() == before


def test_parameter_edit_with_recomputed_digest_is_still_checked(saved: tuple[MLP, Path]) -> None:
    # Someone who edits the file and fixes the digest gets the model's own checks.
    _, path = saved

    def change(doc: dict[str, Any]) -> None:
        doc["parameters"]["layers.0.neurons.0.b"] = "zero"

    _edit(path, change, reseal=True)
    model = _model(5)
    before = model.state_dict()
    with pytest.raises(CheckpointError, match="expected a number"):
        checkpoint.load(path, model)
    assert model.state_dict() == before


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2]", "not a chainrule checkpoint"),
        ('{"format": "chainrule-checkpoint", "version": 1, "x": NaN}', "corrupt"),
        ('{"format": "chainrule-checkpoint", "version": 2}', "damaged"),
    ],
)
def test_not_a_checkpoint(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError, match=message):
        checkpoint.read(path)


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        checkpoint.load(tmp_path / "nope.json", _model())


def test_a_crash_mid_save_leaves_the_old_file(
    saved: tuple[MLP, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path = saved
    old = path.read_bytes()

    def crash(*args: object) -> None:
        raise OSError("disk full")

    for where in ("fsync", "replace"):
        with monkeypatch.context() as m:
            m.setattr(os, where, crash)
            with pytest.raises(OSError, match="disk full"):
                checkpoint.save(_model(9), path)
        assert path.read_bytes() == old
        assert sorted(p.name for p in path.parent.iterdir()) == ["model.json"]  # no temp left
    checkpoint.load(path, _model(9))  # still loads


def test_non_finite_parameter_is_not_saved(saved: tuple[MLP, Path]) -> None:
    _, path = saved
    old = path.read_bytes()
    bad = _model(3)
    bad.parameters()[4].data = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        checkpoint.save(bad, path)
    assert path.read_bytes() == old


def test_save_overwrites_with_new_parameters(saved: tuple[MLP, Path]) -> None:
    _, path = saved
    newer = _model(7)
    checkpoint.save(newer, path)
    assert checkpoint.load_model(path).state_dict() == newer.state_dict()
    assert checkpoint.read(path)["metadata"] == {}


def test_docstring_examples() -> None:
    result = doctest.testmod(chainrule.checkpoint)
    assert result.attempted > 0 and result.failed == 0
