"""``chainrule gpt`` in-process on a tiny configuration, and the data
pieces behind it: the shipped names, the vocabulary, batches, the split
and the bigram baseline."""

from __future__ import annotations

import math
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule.cli import gpt as gpt_cli
from chainrule.cli import main
from chainrule.tensor import charlm, checkpoint

TINY = [
    "--steps", "6", "--batch-size", "4", "--n-embd", "8", "--n-head", "2",
    "--n-layer", "1", "--samples", "3", "--checkpoint-every", "0",
]  # fmt: skip


def gpt(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["gpt", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output directory of one tiny run, shared by tests that only read it."""
    out = tmp_path_factory.mktemp("trained")
    assert main(["gpt", *TINY, "--samples", "0", "--out", str(out)]) == 0
    return out


def _parameters(path: Path) -> dict[str, Any]:
    return {k: v.tolist() for k, v in checkpoint.read(path)["parameters"].items()}


# ----------------------------------------------------------------------------
# the data
# ----------------------------------------------------------------------------


def test_shipped_names() -> None:
    names = charlm.shipped_names()
    assert len(names) == 5163 == len(set(names))
    assert all(n.isascii() and n.isalpha() and n.islower() for n in names)
    assert {"mary", "james", "zena"} <= set(names)


def test_vocabulary_batches_and_split() -> None:
    docs = ["ab", "b", "abca"]
    vocab = charlm.Vocabulary.from_documents(docs)
    assert (vocab.chars, vocab.bos, vocab.size) == ("abc", 3, 4)
    assert vocab.encode("cab") == [3, 2, 0, 1, 3]
    assert vocab.decode([3, 2, 0, 1, 3]) == "cab"
    with pytest.raises(ValueError, match="'z'"):
        vocab.encode("z")
    seqs = charlm.encode_all(docs, vocab, block_size=3)
    assert [s.tolist() for s in seqs] == [[3, 0, 1, 3], [3, 1, 3], [3, 0, 1, 2]]  # cut to 3 + 1
    x, y = charlm.batch(seqs[:2], pad=vocab.bos)
    assert x.tolist() == [[3, 0, 1], [3, 1, 3]]
    assert y.tolist() == [[0, 1, 3], [1, 3, -100]]
    train, held = charlm.split([str(i) for i in range(20)], 0.1, seed=3)
    assert len(held) == 2 and len(train) == 18 and not set(train) & set(held)
    assert charlm.split([str(i) for i in range(20)], 0.1, seed=3) == (train, held)


def test_bigram_is_smoothed_counts() -> None:
    vocab = charlm.Vocabulary.from_documents(["ab"])  # a=0 b=1 BOS=2
    model = charlm.Bigram(charlm.encode_all(["ab", "a"], vocab, 8), vocab.size)
    # from BOS: 'a' twice, plus one of each: P(a | BOS) = 3 / 5
    assert math.isclose(np.exp(model.log_prob(2, 0)), 3 / 5)
    held = charlm.encode_all(["b"], vocab, 8)  # BOS b BOS
    # P(b | BOS) = 1/5; after 'b' came BOS once: P(BOS | b) = (1 + 1) / (1 + 3)
    expected = -(np.log(1 / 5) + np.log(2 / 4)) / 2
    assert math.isclose(model.loss(held), expected)


# ----------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------


def test_gpt_tiny_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = gpt(capsys, *TINY, "--out", str(tmp_path))
    assert code == 0, err
    assert "5,163 documents" in out and "4,647 training, 516 held out" in out
    assert "float32" in out
    held = float(out.split("held-out loss: ")[1].split()[0])
    bigram = float(out.split("bigram baseline: ")[1].split(")")[0])
    assert 2.0 < held < 3.4  # six steps: barely better than uniform (log 27 = 3.30)
    assert math.isclose(bigram, 2.3592, abs_tol=1e-4)
    samples = out.split("samples")[1].splitlines()[1:4]
    assert len(samples) == 3 and all(s.startswith("  ") for s in samples)
    assert "6/6" in err  # the progress bar, on stderr
    doc = checkpoint.read(tmp_path / "gpt.safetensors")
    assert doc["architecture"]["type"] == "GPT" and doc["architecture"]["n_embd"] == 8
    assert doc["metadata"]["run"]["step"] == 6 and doc["optimizer"]["t"] == 6
    assert doc["parameters"]["lm_head.weight"].shape == (27, 8)
    assert doc["parameters"]["lm_head.weight"].dtype == np.float32
    assert doc["optimizer"]["v"]["lm_head.weight"].shape == (27, 8)


def test_gpt_resume_continues_exactly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run interrupted after its step-4 checkpoint and resumed ends with
    the same parameters as an uninterrupted run."""
    from chainrule.cli.progress import ProgressBar

    straight, broken = tmp_path / "straight", tmp_path / "broken"
    args = [*[a if a != "6" else "8" for a in TINY], "--checkpoint-every", "4"]
    assert gpt(capsys, *args, "--out", str(straight))[0] == 0
    update = ProgressBar.update

    def interrupt_at_5(self: ProgressBar, step: int, **stats: Any) -> None:
        if step == 5:
            raise KeyboardInterrupt
        update(self, step, **stats)

    monkeypatch.setattr(ProgressBar, "update", interrupt_at_5)
    assert gpt(capsys, *args, "--out", str(broken))[0] == 130
    assert checkpoint.read(broken / "gpt.safetensors")["metadata"]["run"]["step"] == 4
    monkeypatch.undo()
    code, out, _ = gpt(capsys, "--steps", "8", "--samples", "0", "--resume", "--out", str(broken))
    assert code == 0
    assert "resuming at step 4 of 8" in out
    assert _parameters(straight / "gpt.safetensors") == _parameters(broken / "gpt.safetensors")


def test_gpt_custom_data_float64(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = tmp_path / "words.txt"
    data.write_text("\n".join(["alpha", "beta", "gamma", "delta", "epsilon"] * 4) + "\n")
    code, out, err = gpt(
        capsys, *TINY, "--dtype", "float64", "--data", str(data), "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    assert "20 documents" in out and "float64" in out and "vocabulary 15" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--resume"], "no such checkpoint"),
        (["--data", "missing.txt"], "no such file"),
        (["--n-embd", "10", "--n-head", "3"], "not divisible"),
    ],
)
def test_gpt_user_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    code, _, err = gpt(capsys, *args, "--out", str(tmp_path))
    assert code == 1
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_gpt_negative_seed_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["gpt", "--seed", "-1"])
    assert exit_.value.code == 2
    assert "--seed: must be at least 0" in capsys.readouterr().err


def test_gpt_resume_rejects_other_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert gpt(capsys, *TINY, "--out", str(tmp_path))[0] == 0
    code, _, err = gpt(capsys, "--resume", "--lr", "0.5", "--out", str(tmp_path))
    assert code == 1 and "--lr 0.5 differs from the checkpoint's 0.01" in err
    (tmp_path / "gpt.safetensors").write_text("{")
    code, _, err = gpt(capsys, "--resume", "--out", str(tmp_path))
    assert code == 1 and "damaged or truncated" in err


def test_gpt_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["gpt", "--steps", "0"])
    assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit of a checkpoint: ``doc[k1][k2]... = value`` (KeyError: delete)."""

    def edit(doc: dict[str, Any]) -> None:
        *path, last = ("metadata", "run", *keys)
        for k in path:
            doc = doc[k]
        if value is KeyError:
            del doc[last]
        else:
            doc[last] = value

    return edit


@pytest.mark.parametrize(
    "edit,message",
    [
        (_set("settings", value=KeyError), "corrupt run state (bad or missing settings)"),
        (_set("settings", "n_head", value=0), "corrupt run state (bad or missing settings)"),
        (_set("settings", "dtype", value="int8"), "bad or missing settings"),
        (_set("step", value="4"), "bad or missing step"),
        (_set("data_sha256", value=KeyError), "bad or missing data_sha256"),
        (_set("optimizer", "t", value="a"), "bad or missing optimizer"),
        (_set("optimizer", "m", "wte.weight", value=[1.0]), "wte.weight: shape (1,)"),
        (_set("optimizer", "v", "lm_head.weight", value=KeyError), "lm_head.weight"),
        (_set("rng", value=5), "corrupt optimizer or random state"),
        (_set(value=[]), "is not a chainrule gpt checkpoint"),
    ],
)
def test_gpt_resume_rejects_corrupt_run_state(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    trained: Path,
    edit: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    """A run state edited and resealed (so that the digest matches) is
    still checked: one line and exit 1, never a traceback or a run that
    silently broadcasts a wrong-shaped Adam moment."""
    saved = checkpoint.read(trained / "gpt.safetensors")
    doc = {"metadata": {**saved["metadata"]}}
    doc["metadata"]["run"] = {**saved["metadata"]["run"], "optimizer": saved["optimizer"]}
    edit(doc)
    run = doc["metadata"]["run"]
    adam = run.pop("optimizer", None) if isinstance(run, dict) else None
    model = checkpoint.load_model(trained / "gpt.safetensors")
    checkpoint.save(model, tmp_path / "gpt.safetensors", metadata=doc["metadata"], optimizer=adam)
    code, _, err = gpt(capsys, "--resume", "--steps", "8", "--samples", "0", "--out", str(tmp_path))
    assert code == 1, err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


# ----------------------------------------------------------------------------
# Ctrl-C: a checkpoint at the step it stopped, and the command that resumes it
# ----------------------------------------------------------------------------

SRC = str(Path(__file__).resolve().parent.parent / "src")
# Long enough that the interrupt below always lands mid-run: on a quiet
# machine a step of this model takes under a millisecond.
STEPS = 2000
SHORT = [
    "--steps", str(STEPS), "--batch-size", "4", "--n-embd", "8", "--n-head", "2",
    "--n-layer", "1", "--samples", "4", "--checkpoint-every", "0",
]  # fmt: skip


def _command(argv: list[str], **kwargs: Any) -> Any:
    """``python -m chainrule`` for ``chainrule ARGV``, as a Popen."""
    env = {**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("CHAINRULE_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "chainrule", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def _finish(argv: list[str]) -> tuple[int, str, str]:
    with _command(argv) as proc:
        out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _results(out: str) -> list[str]:
    """The lines a run ends with that its numbers decide: loss and samples."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("held-out loss"))
    return [line for line in lines[start:] if not line.startswith(("time:", "to train"))]


def test_ctrl_c_saves_a_checkpoint_that_resumes_to_the_same_numbers(tmp_path: Path) -> None:
    """SIGINT at a random moment of training: the step under way ends, the
    checkpoint is saved, the resume command is printed, and running it ends
    with the loss and samples of a run never interrupted."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    code, out, err = _finish(["gpt", *SHORT, "--out", str(straight)])
    assert code == 0, err
    expected = _results(out)
    resume_further = out.splitlines()[-1]
    assert resume_further == (
        f"to train further: chainrule gpt --resume --out {straight} --steps {2 * STEPS} "
        "--checkpoint-every 0 --samples 4"
    )

    with _command(["gpt", *SHORT, "--out", str(broken)]) as proc:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first progress line: training is under way
        assert first.startswith("[") and f"/{STEPS}" in first, first
        time.sleep(random.Random(22).uniform(0.0, 0.2))
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=120)
    err = first + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    stopped, command = err.splitlines()[-2:]
    m = re.fullmatch(
        rf"chainrule gpt: interrupted at step (\d+) of {STEPS}; checkpoint saved: "
        rf"{re.escape(str(broken / 'gpt.safetensors'))}",
        stopped,
    )
    assert m, err
    step = int(m.group(1))
    assert 0 < step < STEPS
    saved = checkpoint.read(broken / "gpt.safetensors")
    assert saved["metadata"]["run"]["step"] == step and saved["optimizer"]["t"] == step
    assert command == (
        f"resume with: chainrule gpt --resume --out {broken} --steps {STEPS} "
        "--checkpoint-every 0 --samples 4"
    )

    argv = shlex.split(command.removeprefix("resume with: "))
    assert argv[0] == "chainrule"
    code, out, err = _finish(argv[1:])
    assert code == 0, err
    assert f"resuming at step {step} of {STEPS}" in out
    assert _results(out) == expected
    assert _parameters(straight / "gpt.safetensors") == _parameters(broken / "gpt.safetensors")


def test_the_resume_command_names_the_data_and_options_a_checkpoint_lacks() -> None:
    from chainrule.cli import build_parser

    args = build_parser().parse_args(
        ["gpt", "--out", "my runs/a", "--data", "names.txt", "--temperature", "0.8",
         "--threads", "2", "--steps", "50", "--lr", "0.1"]
    )  # fmt: skip
    assert gpt_cli.resume_command(args) == (
        "chainrule gpt --resume --out 'my runs/a' --steps 50 --data names.txt "
        "--temperature 0.8 --threads 2"
    )  # --lr is in the checkpoint: resuming takes it from there


def test_an_interrupt_after_the_last_step_keeps_the_complete_checkpoint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("chainrule.cli.gpt.evaluate", interrupted)
    code, _, err = gpt(capsys, *TINY, "--out", str(tmp_path))
    assert code == 130
    assert err.splitlines()[-2:] == [
        f"chainrule gpt: interrupted after training; the checkpoint at step 6 is complete: "
        f"{tmp_path / 'gpt.safetensors'}",
        f"to train further: chainrule gpt --resume --out {tmp_path} --steps 12 "
        "--checkpoint-every 0 --samples 3",
    ]
    assert checkpoint.read(tmp_path / "gpt.safetensors")["metadata"]["run"]["step"] == 6
