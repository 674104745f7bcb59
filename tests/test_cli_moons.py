"""``chainrule moons``: the default run reaches 99%, writes its files, and
every error a user can cause is one line, not a traceback."""

from __future__ import annotations

import doctest
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import chainrule.cli.progress
from chainrule import checkpoint
from chainrule.cli import main
from chainrule.cli.moons import PLOT_HINT, objective, train
from chainrule.cli.progress import ProgressBar
from chainrule.value.mode import no_grad

SRC = str(Path(__file__).resolve().parent.parent / "src")


def _need_matplotlib() -> None:
    """The plot path needs the optional extra; in CI it must be there."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("matplotlib (the plot extra) is not installed: pip install -e '.[plot]'")


def test_default_run_reaches_99_percent_and_writes_plot_and_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_matplotlib()
    out = tmp_path / "run"
    assert main(["moons", "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("accuracy: ") and last.endswith("%")
    assert float(last.removeprefix("accuracy: ").removesuffix("%")) >= 99.0
    assert (out / "moons.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # not a terminal: a progress line every 10 steps, with loss and accuracy
    progress = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 10 and " 100/100 loss " in progress[-1] and "acc " in progress[-1]
    # the checkpoint holds the trained model: it scores what the run printed
    model = checkpoint.load_model(out / "moons.json")
    meta = checkpoint.read(out / "moons.json")["metadata"]
    assert meta["steps"] == 100 and meta["seed"] == 1337
    result = train(steps=1, seed=1337)  # the same data
    with no_grad():
        _, acc = objective(model, result.X, result.labels)
    assert f"accuracy: {100 * acc:.1f}%" == last == f"accuracy: {100 * meta['accuracy']:.1f}%"


def test_same_seed_same_numbers() -> None:
    a, b, c = train(steps=4, seed=5), train(steps=4, seed=5), train(steps=4, seed=6)
    assert a.loss == b.loss and a.model.state_dict() == b.model.state_dict()
    assert a.X == b.X and a.loss != c.loss


def test_without_matplotlib_a_basic_plot_a_hint_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes "import matplotlib..." raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["moons", "--steps", "3", "--out", str(tmp_path)]) == 0
    stdout, stderr = capsys.readouterr()
    assert PLOT_HINT in stderr.splitlines()
    assert "Traceback" not in stderr
    # the standard-library picture instead of matplotlib's
    assert (tmp_path / "moons.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "moons.json").exists()
    assert stdout.splitlines()[-1].startswith("accuracy: ")


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    with ProgressBar(3, stream=stream) as bar:
        for k in range(1, 4):
            bar.update(k, loss=0.5, acc="90.0%")
    text = stream.getvalue()
    assert text.count("\r") == 3 and text.endswith("3/3 loss 0.5000 acc 90.0%\n")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["moons", "--steps", "0"], "must be at least 1"),
        (["moons", "--steps", "ten"], "expected a whole number"),
        (["moons", "--seed", "x"], "expected an integer seed"),
    ],
)
def test_bad_options_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_out_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["moons", "--steps", "1", "--out", str(blocker)]) == 1
    err = capsys.readouterr().err
    assert err == f"chainrule moons: --out {blocker}: exists and is not a directory\n"


def test_out_that_cannot_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["moons", "--steps", "1", "--out", str(tmp_path / "sub")]) == 1
    err = capsys.readouterr().err
    expected = f"--out {tmp_path / 'sub'}: cannot create directory (Permission denied)"
    assert err == f"chainrule moons: {expected}\n"


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    top = capsys.readouterr().out
    assert "moons" in top and "two-moons" in top
    with pytest.raises(SystemExit):
        main(["moons", "--help"])
    text = capsys.readouterr().out
    for needle in ("--steps", "--seed", "--out", "moons.png", "moons.json", "default 100"):
        assert needle in text


def test_console_entry_point(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-m", "chainrule", "moons", "--steps", "2", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("accuracy: ")
    assert (tmp_path / "moons.json").exists()


def test_progress_docstring_example() -> None:
    result = doctest.testmod(chainrule.cli.progress)
    assert result.attempted > 0 and result.failed == 0
