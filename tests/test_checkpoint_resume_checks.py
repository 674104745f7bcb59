"""A checkpoint checked as a whole before ``gpt --resume`` and ``digits
--resume`` train from it: correctly sealed files (as a tool that writes the
format, or a hand that edits and reseals it, would make them) whose random
state is out of range, whose tensors hold nan or inf, or whose dtypes are
not the model's are refused in one line naming the field; a dtype the
model's holds exactly is converted, with a note."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule.cli import main
from chainrule.cli.training import random_state_problem
from chainrule.tensor import checkpoint as tc

GPT_TINY = [
    "--steps", "2", "--batch-size", "4", "--n-embd", "8", "--n-head", "2",
    "--n-layer", "1", "--samples", "0", "--checkpoint-every", "0",
]  # fmt: skip
DIGITS_SHORT = ["--epochs", "1"]

Edit = Callable[[dict[str, np.ndarray], dict[str, Any], dict[str, Any]], None]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One short run of each command: its checkpoint, the file every test edits a copy of."""
    made = {}
    for command, args in (("gpt", GPT_TINY), ("digits", DIGITS_SHORT)):
        out = tmp_path_factory.mktemp(command)
        assert main([command, *args, "--out", str(out)]) == 0
        made[command] = out
    return made


def _resealed(source: Path, out: Path, command: str, edit: Edit) -> None:
    """The checkpoint of ``source`` copied to ``out``, edited (``edit(tensors,
    metadata, optimizer state)``, moments as ``state["m"][name]``) and
    sealed again, its sidecar with it: a file whose every digest holds."""
    path = source / f"{command}.safetensors"
    data, _, fields, _ = tc._open(path, tc.FORMAT)
    tensors = tc._tensors(data, path)
    side = tc.optimizer_path(path)
    sdata, _, sfields, _ = tc._open(side, tc.OPTIMIZER_FORMAT)
    state = sfields["state"]
    for key, array in tc._tensors(sdata, side).items():
        group, _, name = key.partition(".")
        state.setdefault(group, {})[name] = array
    edit(tensors, fields["metadata"], state)
    moments, rest = tc._split(state)
    sidecar = tc._sealed(tc.OPTIMIZER_FORMAT, moments, {"state": rest})
    fields["optimizer_sha256"] = tc._digest_of(sidecar)
    target = out / path.name
    tc.optimizer_path(target).write_bytes(sidecar)
    target.write_bytes(tc._sealed(tc.FORMAT, tensors, fields))


def _resume(capsys: pytest.CaptureFixture[str], command: str, out: Path) -> tuple[int, str]:
    more = ["--steps", "3", "--samples", "0"] if command == "gpt" else ["--epochs", "2"]
    code = main([command, "--resume", *more, "--out", str(out)])
    return code, capsys.readouterr().err


def _first(tensors: dict[str, np.ndarray], kind: str = "f") -> str:
    return next(n for n in sorted(tensors) if tensors[n].dtype.kind == kind)


def _rng(field: str, value: Any) -> Edit:
    def edit(tensors: Any, metadata: dict[str, Any], state: Any) -> None:
        rng = metadata["run"]["rng"]
        (rng["state"] if field in ("state", "inc") else rng)[field] = value

    return edit


def _tensor(value: float) -> Edit:
    def edit(tensors: dict[str, np.ndarray], metadata: Any, state: Any) -> None:
        name = _first(tensors)
        tensors[name] = tensors[name].copy()
        tensors[name].reshape(-1)[0] = value

    return edit


def _moment(group: str, value: float) -> Edit:
    def edit(tensors: Any, metadata: Any, state: dict[str, Any]) -> None:
        name = sorted(state[group])[0]
        state[group][name] = state[group][name].copy()
        state[group][name].reshape(-1)[-1] = value

    return edit


def _dtype(dtype: str) -> Edit:
    def edit(tensors: dict[str, np.ndarray], metadata: Any, state: Any) -> None:
        name = _first(tensors)
        tensors[name] = (tensors[name] * 64).round().astype(dtype)

    return edit


def _inexact(tensors: dict[str, np.ndarray], metadata: Any, state: Any) -> None:
    name = _first(tensors)
    tensors[name] = tensors[name].astype(np.float64) + 1e-12


REFUSED = {
    "random state -1": (
        _rng("state", -1),
        "bad random state (rng.state.state = -1, must be an int in [0, 2**128))",
    ),
    "random increment 2**128": (
        _rng("inc", 2**128 + 1),
        f"bad random state (rng.state.inc = {2**128 + 1}, must be an int in [0, 2**128))",
    ),
    "random increment even": (_rng("inc", 4), "bad random state (rng.state.inc = 4, must be odd"),
    "random buffer a float": (
        _rng("uinteger", 0.5),
        "bad random state (rng.uinteger = 0.5, must be an int in [0, 2**32))",
    ),
    "random generator": (
        _rng("bit_generator", "MT19937"),
        "bad random state (rng = {'bit_generator': 'MT19937'",
    ),
    "nan parameter": (_tensor(np.nan), "is not finite (it holds nan or inf)"),
    "inf parameter": (_tensor(-np.inf), "is not finite (it holds nan or inf)"),
    "nan first moment": (_moment("m", np.nan), "Adam's m of '"),
    "inf second moment": (_moment("v", np.inf), "Adam's v of '"),
    "negative second moment": (
        _moment("v", -1.0),
        "is negative (a second moment is a mean of squares)",
    ),
    "int32 parameter": (_dtype("int32"), "is int32, the model holds float32"),
    "float64 parameter float32 cannot hold": (
        _inexact,
        "is float64, and float32 (the model's) cannot hold it exactly",
    ),
}


@pytest.mark.parametrize("command", ["gpt", "digits"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_checkpoint_that_would_misrun_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    runs: dict[str, Path],
    command: str,
    case: str,
) -> None:
    """Before: the random state -1 was an internal error (OverflowError),
    nan and inf loaded and training stopped as "diverged", int32 was cast
    silently."""
    edit, message = REFUSED[case]
    _resealed(runs[command], tmp_path, command, edit)
    code, err = _resume(capsys, command, tmp_path)
    assert code == 1, err
    assert err.startswith(f"chainrule {command}: --resume: {tmp_path / command}.safetensors: "), err
    assert message in err and err.count("\n") == 1, err
    assert "internal error" not in err and "diverged" not in err


@pytest.mark.parametrize("command", ["gpt", "digits"])
def test_a_float16_checkpoint_is_converted_exactly_with_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, runs: dict[str, Path], command: str
) -> None:
    """float16 values are float32 values (the models' dtype here):
    converted, said so, and the run resumes."""
    _resealed(runs[command], tmp_path, command, _dtype("float16"))
    code, err = _resume(capsys, command, tmp_path)
    assert code == 0, err
    assert f"note: {tmp_path / command}.safetensors: 1 tensor(s) (" in err
    assert "converted exactly to the model's dtype" in err


def test_random_state_problems_name_the_field() -> None:
    good = np.random.default_rng(7).bit_generator.state
    assert random_state_problem(good) is None
    assert random_state_problem({**good, "has_uint32": 2}) == ("rng.has_uint32 = 2, must be 0 or 1")
    assert random_state_problem({**good, "state": {"state": 1}}) == (
        "rng.state = {'state': 1}, must hold 'state' and 'inc'"
    )
    assert random_state_problem(None) == "rng = None, must be a numpy PCG64 state"
