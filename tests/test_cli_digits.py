"""``chainrule digits`` in-process on shortened runs: the held-out accuracy,
the same numbers on every run, the checkpoint round trip and an exact
resume, the picture and the table, a user's ``.npz``, and one line (never
a traceback) for every mistake a user can make."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule.cli import main
from chainrule.cli.digits import confusion_matrix, format_confusion
from chainrule.data.images import load_digits, split
from chainrule.optim import Adam
from chainrule.tensor import checkpoint
from chainrule.tensor.cnn import image_classifier

pytest.importorskip("sklearn", reason="the digits need scikit-learn: pip install 'chainrule[data]'")

SHORT = ["--epochs", "3"]


def digits(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["digits", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One shortened run on the digits, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("digits")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        assert main(["digits", *SHORT, "--out", str(out)]) == 0
    return out, buffer.getvalue()


def _accuracy(text: str) -> float:
    match = re.search(r"held-out accuracy: ([\d.]+)% \((\d+) of (\d+) images\)", text)
    assert match, text
    percent, right, total = float(match[1]), int(match[2]), int(match[3])
    assert total == 359 and abs(percent - 100 * right / total) < 0.005
    return right / total


def test_a_short_run_reads_the_held_out_digits(trained: tuple[Path, str]) -> None:
    out, text = trained
    assert "1,797 images of 1 x 8 x 8 in 10 classes" in text
    assert "1,438 training, 359 held out" in text
    assert _accuracy(text) >= 0.95  # three epochs; the full run (15) reaches 99%
    meta = checkpoint.read(out / "digits.safetensors")["metadata"]
    assert meta["command"] == "digits" and meta["run"]["epoch"] == 3
    assert meta["run"]["held_out_accuracy"] == pytest.approx(_accuracy(text), abs=1e-12)


def test_the_checkpoint_round_trip_gives_the_same_predictions(trained: tuple[Path, str]) -> None:
    out, text = trained
    data = load_digits()
    _, held = split(len(data.labels), 0.2, 0)
    model = image_classifier(1, (8, 8), 10, dtype="float32", rng=np.random.default_rng(1))
    checkpoint.load(out / "digits.safetensors", model)
    model.eval()
    predicted = model(data.images[held].astype(np.float32)).data.argmax(axis=1)
    assert (predicted == data.labels[held]).mean() == pytest.approx(_accuracy(text), abs=1e-12)
    # the table printed is this model's confusion matrix
    table = format_confusion(confusion_matrix(data.labels[held], predicted, 10))
    assert table in text
    assert table.splitlines()[0].split() == ["true\\pred", *map(str, range(10))]


def test_the_misclassified_picture_is_a_png_of_the_mistakes(trained: tuple[Path, str]) -> None:
    out, text = trained
    wrong = 359 - round(_accuracy(text) * 359)
    png = (out / "digits-misclassified.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    cells = min(wrong, 48)
    # cells of 48 x 48 pixels plus margins and a label strip, up to 8 a row
    assert width == min(cells, 8) * 56 and height == -(-cells // 8) * 70
    assert f"misclassified: {out / 'digits-misclassified.png'}" in text


def test_the_same_seed_gives_the_same_numbers(
    trained: tuple[Path, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, text = trained
    code, again, _ = digits(capsys, *SHORT, "--out", str(tmp_path))
    assert code == 0 and _accuracy(again) == _accuracy(text)
    first = checkpoint.read(out / "digits.safetensors")["parameters"]
    second = checkpoint.read(tmp_path / "digits.safetensors")["parameters"]
    assert all(np.array_equal(first[k], second[k]) for k in first)


def test_an_interrupted_run_resumes_exactly(
    trained: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_step = Adam.step
    steps: list[int] = []

    def step_then_ctrl_c(self: Adam) -> None:
        real_step(self)
        steps.append(1)
        if len(steps) == 30:  # in the second epoch (23 steps each): Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Adam, "step", step_then_ctrl_c)
    code, _, err = digits(capsys, *SHORT, "--out", str(tmp_path))
    assert code == 130 and len(steps) == 30  # the step under way finished, no other began
    assert (
        f"interrupted in epoch 2 of 3; checkpoint saved: {tmp_path / 'digits.safetensors'}" in err
    )
    assert f"resume with: chainrule digits --resume --out {tmp_path} --epochs 3" in err
    monkeypatch.setattr(Adam, "step", real_step)
    code, text, _ = digits(capsys, *SHORT, "--out", str(tmp_path), "--resume")
    assert code == 0 and "resuming at epoch 2, step 8 of 23" in text
    expected = checkpoint.read(trained[0] / "digits.safetensors")
    resumed = checkpoint.read(tmp_path / "digits.safetensors")
    for name, value in expected["parameters"].items():
        assert np.array_equal(resumed["parameters"][name], value), name
    assert _accuracy(text) == _accuracy(trained[1])
    assert f"to train further: chainrule digits --resume --out {tmp_path} --epochs 6" in text


def test_a_users_npz(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # three classes of 6 x 5 images, told apart by where the bright bar is
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 60)
    images = rng.random((60, 6, 5)) * 0.2
    for i, k in enumerate(labels):
        images[i, 2 * k : 2 * k + 2] += 1.0
    np.savez(tmp_path / "bars.npz", images=images * 255, labels=labels)
    out = tmp_path / "out"
    code, text, _ = digits(
        capsys,
        "--data",
        str(tmp_path / "bars.npz"),
        "--epochs",
        "8",
        "--out",
        str(out),
        "--dtype",
        "float64",
    )
    assert code == 0, text
    assert "60 images of 1 x 6 x 5 in 3 classes" in text and "48 training, 12 held out" in text
    assert _held_out(text) == 1.0
    assert "misclassified: none" in text


def _held_out(text: str) -> float:
    match = re.search(r"held-out accuracy: ([\d.]+)%", text)
    assert match, text
    return float(match[1]) / 100


def _npz(tmp_path: Path, **arrays: Any) -> str:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return str(path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: str(p / "missing.npz"), r"--data .*missing\.npz: no such file"),
        (lambda p: str(p), r"is a directory, not a \.npz file"),
        (
            lambda p: (p / "text.npz").write_text("hello") and str(p / "text.npz"),
            r"not a NumPy \.npz of arrays",
        ),
        (
            lambda p: _npz(p, pictures=np.zeros((20, 8, 8)), labels=np.zeros(20, int)),
            r"needs arrays 'images' and 'labels'; it has pictures, labels",
        ),
        (
            lambda p: _npz(p, images=np.zeros((20, 8)), labels=np.zeros(20, int)),
            r"images must be \(N, H, W\) or \(N, C, H, W\), got shape \(20, 8\)",
        ),
        (
            lambda p: _npz(p, images=np.zeros((20, 8, 8)), labels=np.zeros(19, int)),
            r"labels must be 20 integers, one per image; got int64 of shape \(19,\)",
        ),
        (
            lambda p: _npz(p, images=np.zeros((20, 8, 8)), labels=np.zeros(20)),
            r"labels must be 20 integers",
        ),
        (
            lambda p: _npz(p, images=np.zeros((20, 3, 3)), labels=np.arange(20) % 2),
            r"need at least 4 x 4 pixels",
        ),
        (
            lambda p: _npz(p, images=np.zeros((20, 8, 8)), labels=np.zeros(20, int)),
            r"1 classes; need 2 to 1000",
        ),
        (
            lambda p: _npz(p, images=np.full((20, 8, 8), np.nan), labels=np.arange(20) % 2),
            r"images hold inf or nan",
        ),
        (
            lambda p: _npz(p, images=np.array([None] * 20, dtype=object), labels=np.arange(20) % 2),
            r"not a NumPy \.npz of arrays \(Object arrays cannot be loaded",
        ),
    ],
)
def test_bad_data_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, make: Any, message: str
) -> None:
    data = make(tmp_path)
    code, _, err = digits(capsys, "--data", data, "--out", str(tmp_path / "out"))
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("chainrule digits: --data ")
    assert re.search(message, err), err


def test_unwritable_output_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    code, _, err = digits(capsys, "--out", str(tmp_path / "file"))
    assert (
        code == 1
        and err == f"chainrule digits: --out {tmp_path / 'file'}: exists and is not a directory\n"
    )


def test_missing_scikit_learn_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import fails
    code, _, err = digits(capsys, "--out", str(tmp_path))
    assert code == 1
    assert err == (
        "chainrule digits: the digits need scikit-learn: pip install 'chainrule[data]' "
        "(scikit-learn, which ships the digits); or give your own images with --data FILE.npz\n"
    )


def test_resume_and_overwrite_mistakes(
    trained: tuple[Path, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = trained[0]
    code, _, err = digits(capsys, *SHORT, "--out", str(out))
    assert code == 1 and "exists (another run's checkpoint): --resume continues it" in err
    code, _, err = digits(capsys, *SHORT, "--out", str(out), "--resume")
    assert code == 1 and "is already at epoch 3, which reaches --epochs 3" in err
    code, _, err = digits(capsys, "--epochs", "4", "--out", str(out), "--resume", "--lr", "0.5")
    assert code == 1 and "--lr 0.5 differs from the checkpoint's 0.01" in err
    code, _, err = digits(capsys, "--out", str(tmp_path), "--resume")
    assert code == 1 and err.startswith("chainrule digits: --resume: ") and err.count("\n") == 1
    np.savez(
        tmp_path / "other.npz",
        images=np.random.default_rng(0).random((30, 8, 8)),
        labels=np.arange(30) % 10,
    )
    code, _, err = digits(
        capsys,
        "--epochs",
        "4",
        "--out",
        str(out),
        "--resume",
        "--data",
        str(tmp_path / "other.npz"),
    )
    assert code == 1 and "was trained on other data than" in err


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--epochs", "0"], ["--lr", "-1"], ["--dtype", "float16"], ["--seed", "-3"]):
        with pytest.raises(SystemExit) as stop:
            main(["digits", *args])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "chainrule digits: error:" in err
