"""The command line fuzzer (``tests/cli_fuzz.py``) in CI, and a check that
its verdict can fail."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_fuzz import CASE_SECONDS, Case, judge, run_case

HERE = Path(__file__).parent
SRC = str(HERE.parent / "src")


def test_every_command_over_generated_bad_input() -> None:
    """Over 1,500 bad command lines, and every command in hostile
    environments: each exits non-zero with one line on stderr and no
    traceback, in bounded time and memory (the fuzzer's own address-space
    cap turns a missed size check into a failure)."""
    env = {**os.environ, "PYTHONPATH": SRC, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("CHAINRULE_DEBUG", None)
    done = subprocess.run(
        [sys.executable, str(HERE / "cli_fuzz.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    print(summary)  # the counts, for the closing note: pytest -s shows them
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    m = re.fullmatch(r"cli fuzz: (\d+) cases run \((.*)\), failures: 0, .*", summary)
    assert m, summary
    assert int(m.group(1)) >= 1500
    for command in ("bench", "digits", "environments", "explain", "gpt", "moons", "top-level"):
        assert command in m.group(2)


@pytest.mark.parametrize(
    ("code", "err", "seconds", "problem"),
    [
        (0, "", 0.1, "exit status 0"),
        (None, "x\n", 0.1, "exit status None"),
        (1, "", 0.1, "0 lines"),
        (1, "chainrule gpt: a\nchainrule gpt: b\n", 0.1, "2 lines"),
        (1, "Traceback (most recent call last): ...\n", 0.1, "'Traceback'"),
        (1, "chainrule gpt: internal error (KeyError: 1); ...\n", 0.1, "'internal error'"),
        (1, "chainrule gpt: out of memory; try smaller sizes\n", 0.1, "'out of memory'"),
        (1, "chainrule gpt: no\n", CASE_SECONDS + 1, "took"),
        (1, "OpenBLAS error: Memory allocation still failed\n", 0.1, "not chainrule's own"),
    ],
)
def test_the_verdict_catches_each_kind_of_failure(
    code: int | None, err: str, seconds: float, problem: str
) -> None:
    verdict = judge(code, err, seconds)
    assert verdict is not None and problem in verdict


def test_the_verdict_accepts_one_line_and_a_formula_caret() -> None:
    assert judge(1, "chainrule gpt: --data x: no such file\n", 0.1) is None
    assert judge(2, "chainrule explain: unmatched ')' (column 2)\n  a)\n   ^\n", 0.1) is None


def test_an_exception_escaping_main_is_reported_as_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chainrule.cli

    def escape(argv: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(chainrule.cli, "main", escape)
    code, err, _ = run_case(Case("x", []))
    assert judge(code, err, 0.0) == "'Traceback' on stderr"
