"""The command line's robustness fuzzer: every command over generated bad
input, none of which may reach the user as a traceback.

Each case is an argument list that is wrong in at least one way (a bad
number, a misspelled option, a path that cannot be read or written, a size
that cannot fit in memory, a broken data file or checkpoint, a formula that
does not parse), run in this process by ``chainrule.cli.main``. A case
passes when the command

- exits non-zero (argparse's ``SystemExit`` included) and lets no
  exception escape (it would reach the user as a traceback),
- writes exactly one line to stderr (a formula error may add the formula
  and a caret under the fault; a run that fails after training began has
  the progress bar's lines before it), with no "Traceback", and that line is a
  foreseen error, not the last-resort "internal error" or "out of memory",
- ends within :data:`CASE_SECONDS`, and the process's peak memory stays
  under :data:`PEAK_BYTES`.

The cases are drawn from a seeded generator, so a run is repeatable and
its count fixed. A second phase runs each command, with good arguments,
as a subprocess in hostile environments (stdout full, closed, or a pipe
whose reader has gone; files limited to 100 bytes; a small address space)
and asks the same of it (a command that fits in the small address space may
also succeed; one whose reader has gone ends as ``yes | head -1`` ends
``yes``: quietly, exit status 141). Run it directly for the counts::

    python tests/cli_fuzz.py            # prints: cli fuzz: N cases run ..., failures: 0

``tests/test_cli_fuzz.py`` runs it in CI, in a subprocess whose address
space is capped (``ulimit -v``), so that a size the checks miss fails as a
MemoryError there instead of taking the machine's memory.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

SEED = 14
CASES_PER_COMMAND = 400
CASE_SECONDS = 45.0  # a hang, not a slow machine: CI shares its 2 cores
PEAK_BYTES = 1_500_000_000
ADDRESS_SPACE = 6 * 2**30  # the worker's ulimit -v

# ----------------------------------------------------------------------------
# the files bad cases point at
# ----------------------------------------------------------------------------


@dataclass
class Files:
    root: Path
    text: Path  # a valid data file
    blocker: Path  # a regular file, used where a directory belongs
    binary: Path
    empty: Path
    latin1: Path
    one_line: Path
    read_only: Path | None  # a directory no file can be created in (None: cannot make one)
    corrupt_checkpoint: Path  # a directory whose checkpoints are truncated
    gpt_run: Path  # the output of a finished tiny gpt run (step 1)
    moons_run: Path  # the output of a moons run of 1 step
    foreign: Path  # a directory whose gpt.safetensors is a moons checkpoint
    digits_run: Path  # the output of a digits run of 1 epoch
    bad_npz: list[Path]  # .npz files chainrule digits refuses
    other_npz: Path  # a good .npz, other data than the digits

    def fresh_dir(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root, prefix="out-"))


def _unwritable(path: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=path):
            return False
    except OSError:
        return True


def read_only_dir(path: Path) -> Path | None:
    """A directory in which no file can be created: permission bits for an
    ordinary user, the immutable attribute for root (which permission bits
    do not stop), else None."""
    path.mkdir()
    path.chmod(0o555)
    if _unwritable(path):
        return path
    if shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if _unwritable(path):
            return path
    return None


def release(path: Path | None) -> None:
    """Undo :func:`read_only_dir` so the directory can be deleted."""
    if path is None:
        return
    if shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True, check=False)
    path.chmod(0o755)


def make_files(root: Path) -> Files:
    text = root / "names.txt"
    text.write_text("ann\nbob\ncid\ndee\neve\n", encoding="utf-8")
    blocker = root / "blocker"
    blocker.write_text("not a directory\n")
    binary = root / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    empty = root / "empty.txt"
    empty.write_text("\n \n")
    latin1 = root / "latin1.txt"
    latin1.write_bytes("jos\xe9\nren\xe9\n".encode("latin-1"))
    one_line = root / "one.txt"
    one_line.write_text("onlyone\n")
    corrupt = root / "corrupt"
    corrupt.mkdir()
    for name in ("gpt.safetensors", "moons.json", "digits.safetensors"):
        (corrupt / name).write_text('{"format": "chainrule-checkpoint", "version": 1')
    gpt_run, moons_run, foreign = root / "gpt-run", root / "moons-run", root / "foreign"
    digits_run = root / "digits-run"
    bad_npz, other_npz = _npz_files(root)
    for argv in (
        ["gpt", *GPT_TINY, "--samples", "0", "--out", str(gpt_run)],
        ["moons", "--steps", "1", "--out", str(moons_run)],
        ["digits", *DIGITS_TINY, "--out", str(digits_run)],
    ):
        code, err, _ = run_case(Case("setup", argv))
        assert code == 0, err
    foreign.mkdir()
    shutil.copy(moons_run / "moons.json", foreign / "gpt.safetensors")
    shutil.copy(gpt_run / "gpt.safetensors", foreign / "digits.safetensors")
    return Files(
        root,
        text,
        blocker,
        binary,
        empty,
        latin1,
        one_line,
        read_only_dir(root / "read-only"),
        corrupt,
        gpt_run,
        moons_run,
        foreign,
        digits_run,
        bad_npz,
        other_npz,
    )


def _npz_files(root: Path) -> tuple[list[Path], Path]:
    """.npz files of images that chainrule digits refuses, and one it takes."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {
        "no-labels": {"images": rng.random((20, 8, 8))},
        "flat": {"images": rng.random((20, 64)), "labels": np.arange(20) % 2},
        "short-labels": {"images": rng.random((20, 8, 8)), "labels": np.arange(19) % 2},
        "float-labels": {"images": rng.random((20, 8, 8)), "labels": np.arange(20) * 0.5},
        "tiny-images": {"images": rng.random((20, 3, 3)), "labels": np.arange(20) % 2},
        "one-class": {"images": rng.random((20, 8, 8)), "labels": np.zeros(20, dtype=int)},
        "nan": {"images": np.full((20, 8, 8), np.nan), "labels": np.arange(20) % 2},
        "objects": {"images": np.array([None] * 20, dtype=object), "labels": np.arange(20) % 2},
        "strings": {"images": np.array(["a"] * 20), "labels": np.arange(20) % 2},
    }
    paths = []
    for name, content in arrays.items():
        paths.append(root / f"{name}.npz")
        np.savez(paths[-1], **content)
    other = root / "other.npz"
    np.savez(other, images=rng.random((30, 8, 8)), labels=np.arange(30) % 10)
    return paths, other


# ----------------------------------------------------------------------------
# bad values
# ----------------------------------------------------------------------------

NOT_NUMBERS = ["", " ", "abc", "1.5", "1e3", "nan", "inf", "-inf", "0x10", "1_0_", "ä", "\x00"]
HUGE = ["9" * 12, "1" + "0" * 20, "9" * 60]


def bad_count(rng: random.Random, least: int) -> str:
    """Not a whole number >= ``least``."""
    return rng.choice([*NOT_NUMBERS, str(least - 1), str(least - 1 - rng.randrange(10**6))])


def bad_positive_float(rng: random.Random) -> str:
    return rng.choice(["", "abc", "0", "-0", "-1", "-1e-300", "nan", "inf", "-inf", "1e999", "ä"])


def bad_output_dir(rng: random.Random, files: Files) -> str:
    choices = [
        str(files.blocker),
        str(files.blocker / "sub"),
        str(files.root / "x\x00y"),
        str(files.root / ("n" * 300)),
    ]
    if files.read_only is not None:
        choices += [str(files.read_only), str(files.read_only / "sub")]
    return rng.choice(choices)


def bad_output_file(rng: random.Random, files: Files) -> str:
    choices = [
        str(files.root),
        str(files.root / "missing-dir" / "x.out"),
        str(files.blocker / "x.out"),
        str(files.root / "x\x00y.out"),
        str(files.root / ("n" * 300)),
    ]
    if files.read_only is not None:
        choices.append(str(files.read_only / "x.out"))
    return rng.choice(choices)


def bad_data_file(rng: random.Random, files: Files) -> str:
    return rng.choice(
        [
            str(files.root / "missing.txt"),
            str(files.root),
            str(files.binary),
            str(files.empty),
            str(files.latin1),
            str(files.one_line),
            "/dev/zero",
            str(files.root / "x\x00y"),
            str(files.root / ("n" * 300)),
        ]
    )


def misspell(rng: random.Random, option: str) -> str:
    """``--steps`` as ``--stpes``, ``--step``, ``--stepsx`` or ``--tseps``:
    never an option argparse would accept as an abbreviation."""
    body = option[2:]
    i = rng.randrange(len(body) - 1)
    kinds = [
        body[:i] + body[i + 1] + body[i] + body[i + 2 :],  # swap
        body + rng.choice("xyz"),  # extra letter
        body[:i] + body[i + 1 :] + "q",  # dropped letter
    ]
    word = rng.choice([k for k in kinds if k != body] or ["zz" + body])
    return "--" + word


# ----------------------------------------------------------------------------
# cases, one generator per command
# ----------------------------------------------------------------------------


@dataclass
class Case:
    command: str
    argv: list[str]


GPT_TINY = [
    "--steps", "1", "--batch-size", "2", "--n-embd", "4", "--n-head", "1", "--n-layer", "1",
    "--block-size", "4", "--samples", "1", "--checkpoint-every", "0",
]  # fmt: skip
GPT_COUNTS = {"--steps": 1, "--batch-size": 1, "--n-embd": 1, "--n-head": 1, "--n-layer": 1,
              "--block-size": 1, "--samples": 0, "--checkpoint-every": 0, "--seed": 0,
              "--threads": 1}  # fmt: skip
GPT_SIZES = ["--batch-size", "--n-embd", "--n-layer", "--block-size", "--samples"]


def gpt_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    def resume_conflict() -> list[str]:
        """An option that contradicts the checkpoint, or other data."""
        return rng.choice(
            [["--lr", "0.5"], ["--n-embd", "8"], ["--dtype", "float64"], ["--seed", "3"],
             ["--data", str(files.text)]]
        )  # fmt: skip

    def with_option(option: str, value: str) -> list[str]:
        return ["gpt", *GPT_TINY, option, value, "--out", str(files.fresh_dir())]

    run = str(files.gpt_run)
    kinds: list[Callable[[], list[str]]] = [
        lambda: with_option(o := rng.choice(list(GPT_COUNTS)), bad_count(rng, GPT_COUNTS[o])),
        lambda: with_option(rng.choice(["--lr", "--temperature"]), bad_positive_float(rng)),
        lambda: with_option("--dtype", rng.choice(["float16", "", "int", "Float32", "ä"])),
        lambda: with_option(rng.choice(GPT_SIZES), rng.choice(HUGE)),
        lambda: [*with_option("--n-embd", rng.choice(["5", "7", "9"])), "--n-head", "2"],
        lambda: with_option("--data", bad_data_file(rng, files)),
        lambda: ["gpt", *GPT_TINY, "--out", bad_output_dir(rng, files)],
        lambda: ["gpt", *GPT_TINY, "--resume", "--out", str(files.fresh_dir())],
        lambda: ["gpt", *GPT_TINY, "--resume", "--out", str(files.corrupt_checkpoint)],
        lambda: ["gpt", *GPT_TINY, "--out", str(files.corrupt_checkpoint)],  # no --force
        lambda: ["gpt", *GPT_TINY, "--out", run],  # another run's, no --force
        lambda: ["gpt", "--resume", "--steps", "1", "--out", run],  # reached
        lambda: ["gpt", "--resume", "--steps", "9", *resume_conflict(), "--out", run],
        lambda: ["gpt", "--resume", "--out", str(files.foreign)],
        lambda: [*with_option("--lr", rng.choice(["1e30", "1e10"])), "--steps", "5"],  # diverges
        lambda: ["gpt", *GPT_TINY, misspell(rng, rng.choice(list(GPT_COUNTS))), "3"],
        lambda: ["gpt", *GPT_TINY, rng.choice(list(GPT_COUNTS))],  # value missing
        lambda: ["gpt", *GPT_TINY, "stray-argument"],
    ]
    for _ in range(CASES_PER_COMMAND):
        yield Case("gpt", rng.choice(kinds)())


DIGITS_TINY = ["--epochs", "1", "--batch-size", "256", "--show", "4"]
DIGITS_COUNTS = {"--epochs": 1, "--batch-size": 1, "--seed": 0, "--show": 0}


def digits_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    def resume_conflict() -> list[str]:
        """An option that contradicts the checkpoint, or other data."""
        return rng.choice(
            [["--lr", "0.5"], ["--batch-size", "7"], ["--dtype", "float64"], ["--seed", "3"],
             ["--data", str(files.other_npz)]]
        )  # fmt: skip

    def fresh() -> list[str]:
        return ["--out", str(files.fresh_dir())]

    run = str(files.digits_run)
    counts = list(DIGITS_COUNTS)
    kinds: list[Callable[[], list[str]]] = [
        lambda: ["digits", (o := rng.choice(counts)), bad_count(rng, DIGITS_COUNTS[o]), *fresh()],
        lambda: ["digits", "--lr", bad_positive_float(rng), *fresh()],
        lambda: ["digits", "--dtype", rng.choice(["float16", "int", "", "f4"]), *fresh()],
        lambda: ["digits", *DIGITS_TINY, "--out", bad_output_dir(rng, files)],
        lambda: ["digits", *DIGITS_TINY, "--data", bad_data_file(rng, files), *fresh()],
        lambda: ["digits", *DIGITS_TINY, "--data", str(rng.choice(files.bad_npz)), *fresh()],
        lambda: ["digits", *DIGITS_TINY, "--resume", *fresh()],
        lambda: ["digits", *DIGITS_TINY, "--resume", "--out", str(files.corrupt_checkpoint)],
        lambda: ["digits", *DIGITS_TINY, "--out", str(files.corrupt_checkpoint)],  # no --force
        lambda: ["digits", *DIGITS_TINY, "--out", run],  # another run's, no --force
        lambda: ["digits", "--resume", "--epochs", "1", "--out", run],  # reached
        lambda: ["digits", "--resume", "--epochs", "3", *resume_conflict(), "--out", run],
        lambda: ["digits", "--resume", "--out", str(files.foreign)],
        lambda: ["digits", misspell(rng, rng.choice([*counts, "--resume", "--data"])), "3"],
        lambda: ["digits", rng.choice(counts)],  # value missing
        lambda: ["digits", *DIGITS_TINY, "stray-argument"],
    ]
    for _ in range(CASES_PER_COMMAND // 2):
        yield Case("digits", rng.choice(kinds)())


def moons_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    kinds: list[Callable[[], list[str]]] = [
        lambda: ["moons", "--steps", bad_count(rng, 1), "--out", str(files.fresh_dir())],
        lambda: ["moons", "--seed", rng.choice(NOT_NUMBERS), "--out", str(files.fresh_dir())],
        lambda: ["moons", "--steps", "1", "--out", bad_output_dir(rng, files)],
        lambda: ["moons", "--steps", "1", "--out", str(files.corrupt_checkpoint)],
        lambda: ["moons", "--steps", "2", "--out", str(files.moons_run)],  # another run's
        lambda: ["moons", misspell(rng, rng.choice(["--steps", "--seed", "--force"])), "3"],
        lambda: ["moons", "--steps"],
        lambda: ["moons", "--steps", "1", rng.choice(["extra", "-x", "--", "--help=x"])],
    ]
    for _ in range(CASES_PER_COMMAND):
        yield Case("moons", rng.choice(kinds)())


BENCH_TINY = ["bench", "--tiny", "--repeat", "1", "--warmup", "0", "--workload", "memory"]


def bench_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    kinds: list[Callable[[], list[str]]] = [
        lambda: [*BENCH_TINY, "--json", bad_output_file(rng, files)],
        lambda: ["bench", "--tiny", "--repeat", bad_count(rng, 1)],
        lambda: ["bench", "--tiny", "--warmup", bad_count(rng, 0)],
        lambda: ["bench", "--workload", rng.choice(["gpt", "moons", "", "deep_chain", "ä"])],
        lambda: [*BENCH_TINY, misspell(rng, rng.choice(["--quick", "--repeat", "--warmup"]))],
        lambda: [*BENCH_TINY, "--json"],
    ]
    for _ in range(CASES_PER_COMMAND):
        yield Case("bench", rng.choice(kinds)())


FORMULA_TOKENS = [
    "a", "b", "x1", "_", "1", "0", "2.5", "1e308", "1e999", "-", "+", "*", "/", "**", "(", ")",
    ",", "exp", "log", "relu", "max(", "min(", "tanh(", "nope(", "a.b", "@", "[", "]", "'", '"',
    "==", "lambda", "__import__", "\\", "\t", "ä", "𝑥", "1_000", "0x1", "..", " ",
]  # fmt: skip


def bad_formula(rng: random.Random) -> str:
    """Random tokens ending in a binary operator: whatever comes before, the
    formula cannot parse (it ends where an operand must follow)."""
    kind = rng.randrange(4)
    if kind == 0:
        body = "".join(rng.choice(FORMULA_TOKENS) for _ in range(rng.randrange(1, 40)))
    elif kind == 1:
        body = "(" * rng.randrange(1, 5000) + "a"
    elif kind == 2:
        body = "+".join(["a"] * rng.randrange(1, 20000))
    else:
        body = "relu(" * rng.randrange(1, 3000) + "a" + ")" * rng.randrange(0, 3000)
    return body + rng.choice(["+", "*", "**", "/"])


def explain_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    def drawing() -> list[str]:
        return [rng.choice(["--dot", "--svg", "--html"]), bad_output_file(rng, files)]

    kinds: list[Callable[[], list[str]]] = [
        lambda: ["explain", "--", bad_formula(rng), "a=1", "b=2"],
        lambda: ["explain", "a*b", "a=1", rng.choice(["b", "=2", "b=", "b=x", "1b=2", "a=3"])],
        lambda: ["explain", "a*b", "a=1"],  # b unbound
        lambda: ["explain", "a", "a=1", "--digits", rng.choice(["0", "18", "-3", "x", *HUGE])],
        lambda: ["explain", "a", "a=1", *drawing()],
        lambda: [
            "explain",
            "a",
            "a=1",
            misspell(rng, rng.choice(["--markdown", "--digits", "--trace"])),
        ],
        lambda: ["explain"],
    ]
    for _ in range(CASES_PER_COMMAND):
        yield Case("explain", rng.choice(kinds)())


def top_level_cases(rng: random.Random, files: Files) -> Iterator[Case]:
    words = ["mons", "gtp", "bnech", "explian", "train", "", "-x", "--nope", "ä", "--debugg"]
    for _ in range(CASES_PER_COMMAND // 4):
        yield Case("top-level", [rng.choice(words), *rng.sample(["a", "--b", "1"], 2)])
    yield Case("top-level", [])


GENERATORS = [bench_cases, digits_cases, explain_cases, gpt_cases, moons_cases, top_level_cases]


def all_cases(files: Files, seed: int = SEED) -> Iterator[Case]:
    rng = random.Random(seed)
    for generate in GENERATORS:
        yield from generate(rng, files)


# ----------------------------------------------------------------------------
# running and judging a case
# ----------------------------------------------------------------------------

_CARET = re.compile(r"^\s*\^$")
# the training progress bar's lines, and the benchmark's
_PROGRESS = re.compile(r"^(\[[#-]+\] +\d+/\d+|\S+ / \S+ \.\.\.$)")
UNFORESEEN = ("Traceback", "internal error", "out of memory")


def judge(code: int | None, err: str, seconds: float) -> str | None:
    """Why a case failed, or None."""
    lines = [line for line in err.splitlines() if not _PROGRESS.match(line)]
    if len(lines) == 3 and _CARET.match(lines[2]):
        lines = lines[:1]  # a formula error: the formula and a caret follow the message
    if not code:
        return f"exit status {code!r}, expected non-zero"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr, expected 1"
    for word in UNFORESEEN:
        if word in err:
            return f"{word!r} on stderr"
    if not lines[0].startswith("chainrule"):
        return f"not chainrule's own message: {lines[0][:80]!r}"
    if seconds > CASE_SECONDS:
        return f"took {seconds:.1f} s"
    return None


def run_case(case: Case) -> tuple[int | None, str, float]:
    from chainrule.cli import main

    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: int | None = main(case.argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # escaped main: the user would see a traceback
        err.write(f"Traceback: {type(e).__name__}: {e}\n")
        code = 1
    return code, err.getvalue(), time.perf_counter() - started


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


# ----------------------------------------------------------------------------
# the second phase: good arguments, hostile environments (subprocesses)
# ----------------------------------------------------------------------------


def _full_stdout() -> None:
    fd = os.open("/dev/full", os.O_WRONLY)
    os.dup2(fd, 1)
    os.close(fd)


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails, the process goes on
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


def _small_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (150 * 2**20, 150 * 2**20))


#: name -> (what the child does first, whether the command may still succeed)
ENVIRONMENTS: dict[str, tuple[Callable[[], None] | None, bool]] = {
    "stdout full": (_full_stdout, False),
    "stdout closed": (lambda: os.close(1), False),
    "stdout's reader gone": (None, False),  # a pipe closed before the first write
    "files over 100 bytes fail": (_small_files, False),
    "150 MB of address space": (_small_memory, True),
}


def good_commands(out: Path) -> list[list[str]]:
    return [
        ["explain", "a*b", "a=1", "b=2", "--dot", str(out / "g.dot")],
        ["moons", "--steps", "1", "--force", "--out", str(out)],
        ["gpt", *GPT_TINY, "--force", "--out", str(out)],
        ["digits", *DIGITS_TINY, "--force", "--out", str(out)],
        [*BENCH_TINY, "--json", str(out / "bench.json")],
    ]


def run_in_environment(argv: list[str], environment: str) -> tuple[int | None, str, float]:
    import chainrule

    before, _ = ENVIRONMENTS[environment]
    src = str(Path(chainrule.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("CHAINRULE_DEBUG", None)
    started = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, "-m", "chainrule", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=before,
        env=env,
    ) as proc:
        assert proc.stdout is not None
        if environment == "stdout's reader gone":
            proc.stdout.close()
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    return proc.returncode, err.decode(errors="replace"), time.perf_counter() - started


def judge_environment(environment: str, code: int | None, err: str, seconds: float) -> str | None:
    _, may_succeed = ENVIRONMENTS[environment]
    if environment == "stdout's reader gone":  # as yes | head: quiet, status 128 + SIGPIPE
        if "Traceback" in err:
            return "'Traceback' on stderr"
        lines = [line for line in err.splitlines() if not _PROGRESS.match(line)]
        if code != 128 + signal.SIGPIPE or lines:
            return f"exit status {code!r} and {len(lines)} lines on stderr, expected 141 and none"
        return None
    if may_succeed:
        if code == 0:
            return "'Traceback' on stderr" if "Traceback" in err else None
        # under a real memory limit the last-resort "out of memory" line is the answer
        err = err.replace("out of memory", "short of memory")
    return judge(code, err, seconds)


def fuzz(seed: int = SEED, report: Callable[[str], None] = print) -> tuple[Counter[str], int]:
    """Run every case; returns cases run per command and the failures."""
    counts: Counter[str] = Counter()
    failures = 0
    root = Path(tempfile.mkdtemp(prefix="chainrule-fuzz-"))
    files = make_files(root)

    def record(label: str, problem: str | None, argv: list[str], err: str) -> None:
        nonlocal failures
        counts[label] += 1
        if problem:
            failures += 1
            report(f"FAIL {label}: {problem}: argv {argv!r:.300}\n  {err!r:.400}")

    try:
        for case in all_cases(files, seed):
            code, err, seconds = run_case(case)
            problem = judge(code, err, seconds)
            if problem is None and peak_rss() > PEAK_BYTES:
                problem = f"peak memory {peak_rss() / 1e9:.2f} GB"
            record(case.command, problem, case.argv, err)
        for environment in ENVIRONMENTS:
            for argv in good_commands(files.fresh_dir()):
                code, err, seconds = run_in_environment(argv, environment)
                record(
                    "environments", judge_environment(environment, code, err, seconds), argv, err
                )
    finally:
        release(files.read_only)
        shutil.rmtree(root, ignore_errors=True)
    return counts, failures


def main() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > ADDRESS_SPACE:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, hard))
    started = time.perf_counter()
    counts, failures = fuzz()
    per = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(
        f"cli fuzz: {sum(counts.values())} cases run ({per}), failures: {failures}, "
        f"{time.perf_counter() - started:.1f} s, peak memory {peak_rss() / 1e6:.0f} MB"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
