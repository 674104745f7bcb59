"""No traceback reaches a user: each way a command used to fail with one,
reproduced as a new user meets it, now exits non-zero with one line on
stderr (or, for the Python API, raises the documented error naming the op).

Commands whose failure depends on the process's environment (a closed
pipe, a full disk, a memory limit) run as subprocesses; the rest in this
process, through ``chainrule.cli.main``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule import Value
from chainrule.cli import gpt as gpt_cli
from chainrule.cli import main
from chainrule.cli.preflight import available_memory, format_bytes
from chainrule.explainer.formula import evaluate
from chainrule.explainer.table import explain
from chainrule.tensor import charlm
from chainrule.tensor import checkpoint as gpt_checkpoint
from chainrule.tensor.nn import GPT, GPTConfig
from cli_fuzz import read_only_dir, release

SRC = str(Path(__file__).parent.parent / "src")
TINY = [
    "--steps", "4", "--batch-size", "4", "--n-embd", "8", "--n-head", "2", "--n-layer", "1",
    "--samples", "2", "--checkpoint-every", "0",
]  # fmt: skip
GB = 2**30


def command(
    *args: str, before: Callable[[], None] | None = None, timeout: float = 120, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``python -m chainrule ARGS`` in a subprocess; ``before`` runs in the
    child first (a limit, a closed stream)."""
    env = {**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("CHAINRULE_DEBUG", None)
    env.update(kwargs.pop("env", {}))
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run(
        [sys.executable, "-m", "chainrule", *args],
        text=True,
        env=env,
        timeout=timeout,
        preexec_fn=before,
        **kwargs,
    )


def address_space(limit: int) -> Callable[[], None]:
    """``ulimit -v``, for :func:`command`'s ``before``."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def one_line(err: str) -> str:
    """The one line of ``err`` (asserted), with no traceback."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ----------------------------------------------------------------------------
# output closed or full
# ----------------------------------------------------------------------------


def _pipe_status(command: str) -> tuple[str, str]:
    """``COMMAND | head -1`` in bash: what head printed and, after it, the
    exit status bash saw for COMMAND; and COMMAND's stderr."""
    done = subprocess.run(
        ["bash", "-c", f'{command} 2>"$ERR" | head -1; echo "${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "ERR": os.devnull},
        timeout=120,
    )
    return done.stdout, done.stderr


@pytest.mark.parametrize("flags", [[], ["--trace"]])
def test_a_reader_that_leaves_ends_the_command_as_it_ends_yes(
    tmp_path: Path, flags: list[str]
) -> None:
    """``chainrule explain "a+a+...+a" a=1 --trace | head -1``: nothing on
    stderr, and the exit status the shell shows for ``yes | head -1``."""
    formula = "+".join(["a"] * 2000)  # a table far larger than a pipe's buffer
    err = tmp_path / "err"
    yes_out, _ = _pipe_status(f"yes 2>{err}")
    assert yes_out == "y\n141\n"  # SIGPIPE: 128 + 13
    line = f"{sys.executable} -m chainrule explain '{formula}' a=1 {' '.join(flags)} 2>{err}"
    out, _ = _pipe_status(line)
    head, status = out.splitlines()
    assert head.startswith("node") and status == yes_out.split()[1]
    assert err.read_text() == ""


def test_a_reader_that_leaves_is_silent_for_every_writer() -> None:
    """The pipe closed under a real process (the Popen form of ``| head -1``)."""
    formula = "+".join(["a"] * 2000)
    with subprocess.Popen(
        [sys.executable, "-m", "chainrule", "explain", formula, "a=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("node")
        proc.stdout.close()  # what head does after its line
        err = proc.stderr.read()
        code = proc.wait(timeout=60)
    assert (code, err) == (128 + signal.SIGPIPE, "")


def test_full_disk_on_stdout_is_one_line() -> None:
    """``chainrule explain a a=1 >/dev/full``"""
    with open("/dev/full", "w") as full:
        done = command("explain", "a", "a=1", stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        "chainrule explain: cannot write output: No space left on device"
    )


def test_closed_stdout_is_one_line() -> None:
    """``chainrule explain a a=1 >&-``"""
    done = command("explain", "a", "a=1", stderr=subprocess.PIPE, before=lambda: os.close(1))
    assert done.returncode == 1
    assert one_line(done.stderr) == "chainrule: standard output is closed; redirect it instead"


def test_closed_stderr_still_runs(tmp_path: Path) -> None:
    """``chainrule moons --steps 2 2>&-``: the progress bar has nowhere to go."""
    done = command(
        "moons", "--steps", "2", "--out", str(tmp_path), stdout=subprocess.PIPE,
        before=lambda: os.close(2),
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith("accuracy: ")


@pytest.mark.parametrize(
    ("args", "target"),
    # the optimizer state is written first (the model file records its digest)
    [(["gpt", *TINY], "gpt.optim.safetensors"), (["moons", "--steps", "1"], "moons.png")],
)
def test_a_full_disk_while_saving_is_one_line(tmp_path: Path, args: list[str], target: str) -> None:
    """Writes past 8 KB fail (``ulimit -f``, the way a full disk fails them)."""

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, not the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))

    done = command(*args, "--out", str(tmp_path), before=small_files)
    assert done.returncode == 1
    name = args[0]
    last = done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert last == f"chainrule {name}: cannot write {tmp_path / target} (File too large)"
    assert os.listdir(tmp_path) == []  # no half-written file, no temporary left


def test_debug_shows_the_traceback() -> None:
    with open("/dev/full", "w") as full:
        done = command(
            "explain", "a", "a=1", stdout=full, stderr=subprocess.PIPE, env={"CHAINRULE_DEBUG": "1"}
        )
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "No space left on device" in done.stderr


def test_an_unforeseen_exception_is_one_line_unless_debugging(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(args: object) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr("chainrule.cli.explain.run", bug)
    monkeypatch.delenv("CHAINRULE_DEBUG", raising=False)
    code, _, err = run(capsys, "explain", "a", "a=1")
    assert code == 1
    line = one_line(err)
    assert line.startswith("chainrule explain: internal error (KeyError: 'a bug')")
    assert "CHAINRULE_DEBUG=1" in line
    with pytest.raises(KeyError, match="a bug"):
        main(["explain", "a", "a=1", "--debug"])
    with pytest.raises(KeyError, match="a bug"):
        main(["--debug", "explain", "a", "a=1"])
    monkeypatch.setenv("CHAINRULE_DEBUG", "1")
    with pytest.raises(KeyError, match="a bug"):
        main(["explain", "a", "a=1"])


# ----------------------------------------------------------------------------
# huge sizes: refused before any allocation, with the memory they would need
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes",
    [
        ["--block-size", "1000000000"],
        ["--n-embd", "1000000", "--n-head", "1"],
        ["--batch-size", "100000000000000000000"],
    ],
)
def test_huge_sizes_are_refused_with_the_memory_they_need(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sizes: list[str]
) -> None:
    code, out, err = run(capsys, "gpt", "--steps", "1", *sizes, "--out", str(tmp_path))
    assert code == 1 and out == ""
    line = one_line(err)
    assert line.startswith("chainrule gpt: this run would need about ")
    assert "is available; use a smaller --batch-size" in line


@pytest.mark.parametrize(
    "sizes", [["--batch-size", "1000000000"], ["--samples", "100000000"], ["--n-layer", "100000"]]
)
def test_sizes_beyond_a_2_gb_memory_limit_are_refused(tmp_path: Path, sizes: list[str]) -> None:
    limit = address_space(2 * GB)
    done = command("gpt", "--steps", "1", *sizes, "--out", str(tmp_path), before=limit)
    assert done.returncode == 1
    assert "this run would need about" in one_line(done.stderr)
    assert not (tmp_path / "gpt.safetensors").exists()


def test_a_small_run_fits_under_the_same_limit(tmp_path: Path) -> None:
    done = command("gpt", *TINY, "--out", str(tmp_path), before=address_space(2 * GB))
    assert done.returncode == 0, done.stderr
    assert "held-out loss" in done.stdout


def test_too_little_memory_to_load_numpy_is_one_line(tmp_path: Path) -> None:
    """Short of memory, OpenBLAS would end the process with its own message."""
    done = command("gpt", *TINY, "--out", str(tmp_path), before=address_space(100 * 2**20))
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("chainrule gpt: loading NumPy would need about 100.0 MB of memory, ")
    assert line.endswith(" is available; raise the memory limit (ulimit -v)")


def test_moons_plots_without_matplotlib_when_memory_is_short(tmp_path: Path) -> None:
    done = command(
        "moons", "--steps", "1", "--out", str(tmp_path), before=address_space(150 * 2**20)
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "moons.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in done.stderr and "OpenBLAS" not in done.stderr


def test_available_memory_sees_the_address_space_limit() -> None:
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31)); "
        "from chainrule.cli.preflight import available_memory; print(available_memory())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=60,
    )
    left = int(done.stdout)
    assert 0 < left < 2**31
    unlimited = available_memory()
    assert unlimited is None or unlimited > 0


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (512, 1500, 2.5e9, 3e15, 2.9e122)] == [
        "512 B",
        "1.5 KB",
        "2.5 GB",
        "3.0 PB",
        "2.9e+122 B",
    ]


def _step_peak(config: GPTConfig, batch: int, dtype: str) -> int:
    """tracemalloc's peak over building the model and two Adam steps."""
    import tracemalloc

    from chainrule.optim import Adam

    rng = np.random.default_rng(0)
    x = rng.integers(0, config.vocab_size - 1, (batch, config.block_size))
    tracemalloc.start()
    try:
        model = GPT(config, dtype=dtype, rng=rng)
        optimizer = Adam(model.parameters(), lr=0.01)
        for _ in range(2):
            _, loss = model(x, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("C", "H", "L", "T", "V", "dtype"),
    [(32, 4, 2, 16, 27, "float32"), (64, 2, 1, 8, 300, "float64"), (16, 4, 3, 32, 60, "float32")],
)
def test_the_memory_estimate_bounds_a_training_step(
    C: int, H: int, L: int, T: int, V: int, dtype: str
) -> None:
    """At the evaluation batch (where training and evaluation coincide) the
    estimate is at least the measured peak and within 2.5x of it."""
    batch = gpt_cli.EVAL_BATCH
    settings = gpt_cli.Settings(batch, 0.01, 0, dtype, C, H, L, T)
    estimate = gpt_cli.memory_estimate(settings, V, T + 1, documents=0, samples=0)
    peak = _step_peak(GPTConfig(V, T, C, H, L), batch, dtype)
    assert peak <= estimate <= 2.5 * peak


# ----------------------------------------------------------------------------
# data files: a large vocabulary, an endless file
# ----------------------------------------------------------------------------


def _cjk_names(path: Path) -> int:
    """3,000 five-character names over 10,701 distinct CJK characters."""
    rng = np.random.default_rng(0)
    chars = [chr(0x4E00 + i) for i in range(10_701)]
    order = np.concatenate([rng.permutation(10_701), rng.integers(0, 10_701, 15_000 - 10_701)])
    names = ["".join(chars[i] for i in order[k : k + 5]) for k in range(0, 15_000, 5)]
    path.write_text("\n".join(names) + "\n", encoding="utf-8")
    return len(set("".join(names)))


def test_a_large_vocabulary_trains_in_bounded_memory(tmp_path: Path) -> None:
    """The bigram baseline was a vocabulary-squared table (2.86 GB peak for
    3 steps on this file); now the whole run fits under a 1 GB limit."""
    data = tmp_path / "cjk.txt"
    assert _cjk_names(data) == 10_701
    done = command(
        "gpt", "--steps", "3", "--data", str(data), "--samples", "2", "--out",
        str(tmp_path / "out"), before=address_space(GB),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "vocabulary 10702" in done.stdout
    bigram = float(done.stdout.split("bigram baseline: ")[1].split(")")[0])
    assert math.isfinite(bigram) and bigram > math.log(10_702)  # unseen pairs: worse than uniform


def test_sparse_bigram_equals_the_dense_table() -> None:
    rng = np.random.default_rng(1)
    V = 13
    seqs = [rng.integers(0, V, rng.integers(2, 9)) for _ in range(40)]
    held = [rng.integers(0, V, rng.integers(2, 9)) for _ in range(10)]
    counts = np.ones((V, V))
    for s in seqs:
        for a, b in itertools.pairwise(s):
            counts[a, b] += 1
    dense = np.log(counts / counts.sum(axis=1, keepdims=True))
    model = charlm.Bigram(seqs, V)
    grid = np.arange(V)
    np.testing.assert_allclose(model.log_prob(grid[:, None], grid[None, :]), dense, rtol=1e-13)
    expected = -np.mean([dense[a, b] for s in held for a, b in itertools.pairwise(s)])
    assert math.isclose(model.loss(held), expected, rel_tol=1e-12)
    assert math.isnan(model.loss([]))
    assert math.isclose(charlm.Bigram([], V).loss(held), math.log(V))  # no counts: uniform


def test_data_from_dev_zero_is_capped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "gpt", "--data", "/dev/zero", "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert (
        one_line(err)
        == "chainrule gpt: --data /dev/zero: larger than the limit of 67,108,864 bytes"
    )


# ----------------------------------------------------------------------------
# output paths are checked before the work
# ----------------------------------------------------------------------------


def test_bench_json_in_a_missing_directory_fails_before_the_benchmark(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "bench", "--tiny", "--json", "/nonexistent/x.json")
    assert code == 1 and out == ""  # no table: nothing was run
    assert one_line(err) == (
        "chainrule bench: --json /nonexistent/x.json: directory /nonexistent does not exist"
    )


def test_bench_json_naming_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "bench", "--tiny", "--json", str(tmp_path))
    assert code == 1 and out == ""
    assert one_line(err) == f"chainrule bench: --json {tmp_path}: is a directory; give a file name"


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    path = read_only_dir(tmp_path / "read-only")
    if path is None:
        pytest.skip("cannot make a directory read-only here (root without chattr)")
    yield path
    release(path)


@pytest.mark.parametrize("name", ["gpt", "moons"])
def test_read_only_out_fails_before_training(
    capsys: pytest.CaptureFixture[str], read_only: Path, name: str
) -> None:
    code, out, err = run(capsys, name, "--steps", "500", "--out", str(read_only))
    assert code == 1 and out == ""  # not a step trained
    assert one_line(err).startswith(f"chainrule {name}: --out {read_only}: cannot write there (")


def test_explain_drawing_to_a_missing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "explain", "a*b", "a=1", "b=2", "--dot", "/nonexistent/g.dot")
    assert code == 1 and out == ""
    assert one_line(err) == (
        "chainrule explain: cannot write /nonexistent/g.dot: directory /nonexistent does not exist"
    )


# ----------------------------------------------------------------------------
# checkpoints: --force, --resume's target, stale temporary files
# ----------------------------------------------------------------------------


def test_a_new_run_does_not_overwrite_a_checkpoint_without_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "gpt", *TINY, "--out", str(tmp_path))[0] == 0
    ckpt = tmp_path / "gpt.safetensors"
    before = ckpt.read_bytes()
    code, out, err = run(capsys, "gpt", *TINY, "--seed", "5", "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"chainrule gpt: {ckpt} exists (another run's checkpoint): --resume continues it, "
        "--force overwrites it, or choose another --out"
    )
    assert ckpt.read_bytes() == before
    assert run(capsys, "gpt", *TINY, "--seed", "5", "--force", "--out", str(tmp_path))[0] == 0
    assert gpt_checkpoint.read(ckpt)["metadata"]["run"]["settings"]["seed"] == 5


def test_moons_overwrites_only_the_same_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "moons", "--steps", "2", "--out", str(tmp_path))[0] == 0
    assert run(capsys, "moons", "--steps", "2", "--out", str(tmp_path))[0] == 0  # same numbers
    code, out, err = run(capsys, "moons", "--steps", "3", "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert "holds another run (not --steps 3 --seed 1337): --force overwrites it" in one_line(err)
    assert run(capsys, "moons", "--steps", "3", "--force", "--out", str(tmp_path))[0] == 0
    meta = json.loads((tmp_path / "moons.json").read_text())["metadata"]
    assert meta["steps"] == 3


@pytest.mark.parametrize("steps", ["2", "4"])
def test_resume_whose_target_is_reached_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, steps: str
) -> None:
    """``--resume --steps 100`` on a checkpoint at step 2000, in small."""
    assert run(capsys, "gpt", *TINY, "--out", str(tmp_path))[0] == 0
    code, out, err = run(capsys, "gpt", "--resume", "--steps", steps, "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"chainrule gpt: --resume: {tmp_path / 'gpt.safetensors'} is already at step 4, "
        f"which reaches --steps {steps}: nothing to train; give a larger --steps to continue"
    )


def test_stale_temporary_files_are_removed_on_the_next_save(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """What repeated ``kill -9`` during saves leaves behind."""
    stale = [
        tmp_path / f".{name}.{tag}.tmp"
        for name in ("gpt.safetensors", "gpt.optim.safetensors")
        for tag in ("abcd1234", "x_9y8z7w", "00000000")
    ]
    for path in stale:
        path.write_text('{"format": "chainrule-checkpoint", "ver')
    keep = [tmp_path / ".gpt.safetensors.notmine.tmp", tmp_path / ".moons.json.abcd1234.tmp"]
    for path in keep:
        path.write_text("someone else's\n")
    assert run(capsys, "gpt", *TINY, "--out", str(tmp_path))[0] == 0
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["gpt.optim.safetensors", "gpt.safetensors", *(p.name for p in keep)]
    )


def test_kill_9_during_saves_leaves_nothing_after_the_next_save(tmp_path: Path) -> None:
    """A process saving in a loop is killed the moment a temporary file
    shows up, three times; the next save removes what they left."""
    code = (
        "import sys, random\n"
        "from chainrule import checkpoint\n"
        "from chainrule.nn import MLP\n"
        "model = MLP(2, [64, 64, 1], rng=random.Random(0))\n"
        "checkpoint.save(model, sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "while True: checkpoint.save(model, sys.argv[1])\n"
    )
    path = tmp_path / "model.json"
    env = {**os.environ, "PYTHONPATH": SRC}
    left: set[str] = set()
    for _ in range(3):
        with subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env
        ) as proc:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if any(n.endswith(".tmp") for n in os.listdir(tmp_path)):
                    proc.kill()  # SIGKILL, mid-save
                    break
            else:
                proc.kill()
        left |= {n for n in os.listdir(tmp_path) if n.endswith(".tmp")}
    assert left  # the kills did leave temporaries behind
    from chainrule import checkpoint

    model = checkpoint.load_model(path)  # never corrupt
    checkpoint.save(model, path)
    assert os.listdir(tmp_path) == ["model.json"]


# ----------------------------------------------------------------------------
# sampling and threads
# ----------------------------------------------------------------------------


def test_a_tiny_temperature_samples_greedily_without_warnings() -> None:
    model = GPT(GPTConfig(vocab_size=6, block_size=7), rng=np.random.default_rng(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        docs = model.generate(4, 5, temperature=1e-320, rng=np.random.default_rng(0))
    # the argmax, step by step, from BOS (5) until BOS or a full context
    idx = [5]
    while len(idx) <= 7:
        nxt = int(np.argmax(model(np.array([idx])).data[0, -1]))
        if nxt == 5:
            break
        idx.append(nxt)
    assert docs == [idx[1:]] * 4


def test_gpt_with_a_tiny_temperature_leaks_no_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run(
            capsys, "gpt", *TINY, "--temperature", "1e-320", "--out", str(tmp_path)
        )
    assert code == 0, err
    samples = out.split("* = also in the data):\n")[1]
    first, second = samples.splitlines()[:2]
    assert first == second  # greedy: the same name every time


def test_threads_take_effect_after_numpy_is_loaded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads() -> set[int]:
        return {
            p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"
        }

    before = blas_threads()
    seen: list[set[int]] = []
    real_train = gpt_cli.train

    def train(args: Any, out: Path) -> Any:
        seen.append(blas_threads())
        return real_train(args, out)

    monkeypatch.setattr(gpt_cli, "train", train)
    for n in (1, 2):
        out = tmp_path / str(n)
        assert run(capsys, "gpt", *TINY, "--threads", str(n), "--out", str(out))[0] == 0
    assert seen == [{1}, {2}]
    assert blas_threads() == before  # restored afterwards


# ----------------------------------------------------------------------------
# usage errors
# ----------------------------------------------------------------------------


def test_a_misspelled_option_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    """``chainrule moons --stpes 3``"""
    with pytest.raises(SystemExit) as exit_:
        main(["moons", "--stpes", "3"])
    assert exit_.value.code == 2
    assert one_line(capsys.readouterr().err) == (
        "chainrule moons: error: unknown option '--stpes' (did you mean --steps?); "
        "see chainrule moons --help"
    )


def test_a_misspelled_command_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["mons"])
    assert exit_.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("chainrule: error: argument COMMAND: invalid choice: 'mons'")
    assert line.endswith("(did you mean moons?); see chainrule --help")


def test_no_command_prints_help_and_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: chainrule")
    assert (
        one_line(captured.err)
        == "chainrule: error: name a command (bench, digits, explain, gpt, moons)"
    )


# ----------------------------------------------------------------------------
# the Python API: the documented errors, naming the op
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("digits", "error", "message"),
    [
        (-1, ValueError, "explain: digits must be between 1 and 17, got -1"),
        (0, ValueError, "explain: digits must be between 1 and 17, got 0"),
        (18, ValueError, "explain: digits must be between 1 and 17, got 18"),
        (1.5, TypeError, "explain: digits must be an int, got float 1.5"),
        (None, TypeError, "explain: digits must be an int, got NoneType None"),
        (True, TypeError, "explain: digits must be an int, got bool True"),
    ],
)
def test_explain_digits(digits: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        explain(Value(1.0), digits=digits)
    assert str(info.value) == message


def test_explain_digits_in_range_still_work() -> None:
    assert " 0.3 " in explain(Value(0.1 + 0.2), digits=2)
    assert " 0.30000000000000004 " in explain(Value(0.1 + 0.2), digits=17)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Value(10**400), "Value: int of about 10**400 is too large for a float"),
        (lambda: Value(-(10**5000)), "Value: int of about 10**5000 is too large for a float"),
        (lambda: Value(Fraction(10**400, 7)), "Value: Fraction of about 10**399 is too large"),
        (lambda: evaluate("a", {"a": 10**400}), "Value: int of about 10**400 is too large"),
        (lambda: Value(1.0) + 10**400, "+: int of about 10**400 is too large"),
        (lambda: Value(1.0) * 10**400, "*: int of about 10**400 is too large"),
    ],
)
def test_numbers_too_large_for_a_float(make: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message)


def test_large_numbers_that_fit_are_exact() -> None:
    assert Value(10**308).data == 1e308
    assert Value(2**1023).data == float(2**1023)
    assert Value(Fraction(1, 3)).data == 1 / 3


def test_many_samples_are_drawn_in_chunks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """More names than one chunk: all of them, and the first chunk's are
    those a run asking for one chunk gets."""

    def samples(n: int, out: Path) -> list[str]:
        code, text, err = run(capsys, "gpt", *TINY, "--samples", str(n), "--out", str(out))
        assert code == 0, err
        # the samples, without the "time: ..." and "to train further: ..." after them
        lines = text.split("* = also in the data):\n")[1].splitlines()[:-2]
        return [line.removesuffix(" *").strip() for line in lines]

    settings = gpt_cli.Settings(4, 0.01, 0, "float32", 8, 2, 1, 16)
    chunk = gpt_cli.sample_chunk(settings, 27)
    assert chunk == gpt_cli.SAMPLE_CHUNK
    many = samples(chunk + 300, tmp_path / "many")
    assert len(many) == chunk + 300
    assert many[:chunk] == samples(chunk, tmp_path / "one")


def test_long_contexts_sample_fewer_names_at_once() -> None:
    long = gpt_cli.Settings(32, 0.01, 0, "float32", 32, 4, 2, 1024)
    chunk = gpt_cli.sample_chunk(long, 27)
    assert 1 <= chunk < gpt_cli.SAMPLE_CHUNK
    # so a long context with many samples is not refused for the sampling alone
    assert gpt_cli.memory_estimate(long, 27, 17, 5163, 1024) < 2 * GB


def test_a_diverging_run_stops_with_one_line_and_no_warnings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = run(capsys, "gpt", *TINY, "--lr", "1e30", "--out", str(tmp_path))
    assert code == 1
    lines = [line for line in err.splitlines() if not line.startswith("[")]  # the progress bar
    assert "Traceback" not in err and len(lines) == 1
    assert lines[0].startswith("chainrule gpt: training diverged at step ")
    assert lines[0].endswith(" (loss nan); try a smaller --lr")
    assert not (tmp_path / "gpt.safetensors").exists()  # nothing non-finite was saved


def test_a_fifo_nobody_writes_to_is_empty_not_a_hang(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, out, err = run(capsys, "gpt", "--data", str(fifo), "--out", str(tmp_path / "out"))
    assert code == 1 and out == ""
    assert (
        one_line(err) == f"chainrule gpt: --data {fifo}: is empty, expected one document per line"
    )


def test_data_from_a_pipe_is_read_once(tmp_path: Path) -> None:
    """``--data <(command)``: the samples are marked against what was read,
    not by reading the pipe again at the end."""
    names = "\n".join(charlm.shipped_names()[:60]) + "\n"
    read_end, write_end = os.pipe()
    with subprocess.Popen(
        [sys.executable, "-m", "chainrule", "gpt", *TINY, "--data", f"/dev/fd/{read_end}",
         "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(read_end,),
        env={**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"},
    ) as proc:  # fmt: skip
        os.close(read_end)
        os.write(write_end, names.encode())
        os.close(write_end)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "data: 60 documents from /dev/fd/" in out and "held-out loss" in out


# ----------------------------------------------------------------------------
# outputs checked before the work, one run per --out, Ctrl-C at start-up
# ----------------------------------------------------------------------------


def test_moons_checks_its_outputs_before_training(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``out/moons.png`` a directory: refused before a step is trained (it
    used to train fully and then fail without saving moons.json)."""
    (tmp_path / "moons.png").mkdir()
    trained: list[int] = []
    monkeypatch.setattr("chainrule.cli.moons.train", lambda *a: trained.append(1))
    code, out, err = run(capsys, "moons", "--steps", "2", "--out", str(tmp_path))
    assert (code, out, trained) == (1, "", [])
    assert one_line(err) == (
        f"chainrule moons: cannot write {tmp_path / 'moons.png'}: is a directory; give a file name"
    )


def test_gpt_names_the_optimizer_file_that_cannot_be_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "gpt.optim.safetensors").mkdir()
    code, out, err = run(capsys, "gpt", *TINY, "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"chainrule gpt: --out {tmp_path / 'gpt.optim.safetensors'}: is a directory; "
        "give a file name"
    )


@pytest.mark.parametrize("name", ["moons", "gpt"])
def test_a_second_run_on_the_same_out_stops_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    """Two runs on one ``--out``: the second says the directory is in use
    (they used to both report success, one's files lost)."""
    import fcntl

    holder = subprocess.Popen(  # another run, holding the directory as a run does
        [sys.executable, "-c",
         "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        args = TINY if name == "gpt" else ["--steps", "1"]
        code, out, err = run(capsys, name, *args, "--out", str(tmp_path))
        assert (code, out) == (1, "")
        assert one_line(err) == (
            f"chainrule {name}: --out {tmp_path} is in use by another chainrule run; "
            "wait for it to finish or choose another --out"
        )
        assert os.listdir(tmp_path) == []
    finally:
        holder.kill()
        holder.wait()
    # released when the holder ends, however it ends
    fd = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@pytest.mark.slow
def test_two_moons_runs_started_together_do_not_both_succeed(tmp_path: Path) -> None:
    """The race itself, two real processes (the lock test above holds the
    directory deterministically)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "chainrule", "moons", "--steps", "25", "--out", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    if codes == [0, 0]:  # one finished before the other started: one after the other
        return
    assert codes == [0, 1], results
    err = next(e for code, e in results if code == 1)
    assert err.splitlines()[-1].endswith(
        "is in use by another chainrule run; wait for it to finish or choose another --out"
    )


_INTERRUPT_DURING_IMPORT = """
import os, signal, sys

class Interrupt:
    '''Ctrl-C just as the module named by INTERRUPT_AT starts to import.'''
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["INTERRUPT_AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
"""


@pytest.mark.parametrize(
    "module", ["chainrule.value.engine", "chainrule.cli", "chainrule.cli.explain", "numpy"]
)
def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path: Path, module: str) -> None:
    """Ctrl-C in the first tenths of a second, while the package (or a
    command's module, or NumPy) is imported: one line and status 130, no
    traceback."""
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_DURING_IMPORT)
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}", "INTERRUPT_AT": module}
    done = command("gpt", *TINY, "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 130, done.stderr
    assert done.stderr.endswith("interrupted\n") and one_line(done.stderr).startswith("chainrule")


def test_a_program_importing_chainrule_keeps_its_own_ctrl_c(tmp_path: Path) -> None:
    """The start-up guard is the command's only: elsewhere Ctrl-C during
    ``import chainrule`` is Python's KeyboardInterrupt, as always."""
    (tmp_path / "sitecustomize.py").write_text(_INTERRUPT_DURING_IMPORT)
    done = subprocess.run(
        [sys.executable, "-c", "import chainrule"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}",
             "INTERRUPT_AT": "chainrule.value.engine"},
    )  # fmt: skip
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
