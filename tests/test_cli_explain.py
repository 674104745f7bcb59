"""``chainrule explain``: micrograd's and microgpt's worked examples as commands, the
drawing options, and one-line errors (never a traceback) for bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import chainrule.explainer.draw
from chainrule.cli import main
from tables import cells, grads

SRC = Path(__file__).resolve().parent.parent / "src"


def require_dot() -> None:
    """Skip without Graphviz, except in CI, where drawing must be tested."""
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("Graphviz's `dot` is required in CI (apt-get install graphviz)")
        pytest.skip("Graphviz's `dot` is not installed")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_seed_002(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "relu(a*b + d)", "a=2", "b=-3", "d=10")
    assert (code, err) == (0, "")
    assert grads(out) == {
        "relu(a*b + d)": "1.0 (seed)",
        "a*b + d": "1.0",
        "d": "1.0",
        "a*b": "1.0",
        "b": "2.0",
        "a": "-3.0",
    }
    assert "a*b            *     -6.0  a: -3.0, b: 2.0" in out


def test_seed_003(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "(a*b + a)**2", "a=2", "b=3")
    assert code == 0
    assert grads(out) == {
        "(a*b + a)**2": "1.0 (seed)",
        "a*b + a": "16.0",
        "a*b": "16.0",
        "b": "32.0",
        "a": "16.0 + 48.0 = 64.0",
    }
    assert out.splitlines()[2] == (
        "(a*b + a)**2  **2  64.0  a*b + a: 16.0                     1.0 (seed)          "
        "seed: the output itself"
    )


def test_named_steps_seed_002(capsys: pytest.CaptureFixture[str]) -> None:
    # the walkthrough's table: f 1, e 1, d 1, c 1, b 2, a -3, with the meaning of each
    code, out, err = run(capsys, "c = a*b; e = c + d; f = relu(e)", "a=2", "b=-3", "d=10")
    assert (code, err) == (0, "")
    rows = cells(out)
    assert [(r["node"], r["grad"]) for r in rows] == [
        ("f", "1.0 (seed)"),
        ("e", "1.0"),
        ("d", "1.0"),
        ("c", "1.0"),
        ("b", "2.0"),
        ("a", "-3.0"),
    ]
    assert rows[-1]["meaning"] == "if a increases by a small h, f decreases by 3h"
    assert rows[-2]["meaning"] == "if b increases by a small h, f increases by 2h"


def test_named_steps_seed_003_with_trace(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "c = a*b; d = c + a; e = d**2", "a=2", "b=3", "--trace")
    assert code == 0
    table, trace = out.split("\n\n")
    assert grads(table) == {
        "e": "1.0 (seed)",
        "d": "16.0",
        "c": "16.0",
        "a": "16.0 + 48.0 = 64.0",
        "b": "32.0",
    }
    lines = trace.splitlines()
    assert lines[:3] == [
        "topological order: a, b, c, d, e",
        "seed: e.grad = 1.0",
        "reverse order: e, d, c (then b, a: leaves, nothing to pass on)",
    ]
    into_a = [line.split() for line in lines if "a.grad +=" in line]
    # the two contributions to a: 1 * 16 = 16 from d = c + a, then 3 * 16 = 48 from c = a*b
    assert " ".join(into_a[0]).endswith("a.grad += 1.0 * 16.0 -> a.grad = 16.0")
    assert " ".join(into_a[1]).endswith("a.grad += 3.0 * 16.0 -> a.grad = 16.0 + 48.0 = 64.0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["relu(a*b + d)", "a=2", "b=-3", "d=10", "c=3"],
            "c is given but the formula does not use it",
        ),
        (
            ["e = c + d; c = a*b; f = relu(e)", "a=1", "b=1", "d=1"],
            "c is used before it is defined",
        ),
        (["c = a*b; c = c + 1", "a=1", "b=1"], "c is defined twice"),
    ],
)
def test_step_and_binding_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.splitlines()[0].startswith(f"chainrule explain: {message}")
    assert "Traceback" not in err


def test_markdown_and_digits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "a/b", "a=1", "b=3", "--markdown", "--digits", "3")
    assert code == 0
    # a / b is micrograd's a * b**-1: two nodes
    assert out.splitlines()[2] == (
        "| `a/b` | `*` | 0.333 | `a`: 0.333, `#1`: 1.0 | 1.0 (seed) | seed: the output itself |"
    )
    assert out.splitlines()[4].startswith("| `#1` | `**-1` | 0.333 | `b`: -0.111 | 1.0 |")


def test_values_accept_any_float_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "x*y", "x=1e-3", "y=-2.5")
    assert code == 0 and grads(out)["x"] == "-2.5" and grads(out)["y"] == "0.001"


def test_formula_starting_with_minus_goes_after_double_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--", "-a*b", "a=1", "b=2")
    assert code == 0 and grads(out)["a"] == "-2.0"


@pytest.mark.parametrize(
    ("formula", "message", "caret"),
    [
        ("__import__('os')", "unknown function '__import__'", "  ^"),
        ("a.__class__", "no attribute access (column 2)", "   ^"),
        ("relu(a*b", "'(' is never closed (column 5)", "      ^"),
        ("a*b)", "unmatched ')' (column 4)", "     ^"),
        ("a*x", "unknown name 'x' (bind it: x=...) (column 3)", "    ^"),
        ("a**9**9", "exponent 3.8742e+08 is too large", "     ^"),
    ],
)
def test_malformed_formula(
    capsys: pytest.CaptureFixture[str], formula: str, message: str, caret: str
) -> None:
    code, out, err = run(capsys, formula, "a=2", "b=3")
    assert code == 2 and out == ""
    first, echo, pointer = err.splitlines()
    assert first.startswith("chainrule explain: ") and message in first
    assert (echo, pointer) == (f"  {formula}", caret)


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ("a", "'a' is not NAME=VALUE (e.g. a=2)"),
        ("a=two", "'a=two': 'two' is not a number"),
        ("2a=1", "'2a=1' is not NAME=VALUE (e.g. a=2)"),
        ("a=", "'a=': '' is not a number"),
    ],
)
def test_bad_binding(capsys: pytest.CaptureFixture[str], binding: str, message: str) -> None:
    code, out, err = run(capsys, "a", binding)
    assert (code, out, err) == (2, "", f"chainrule explain: {message}\n")


def test_name_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "a", "a=1", "a=2") == (2, "", "chainrule explain: a is given twice\n")


def test_bad_digits(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "a", "a=1", "--digits", "0")[0] == 2


def test_missing_formula_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explain"])
    assert info.value.code == 2
    assert "required: FORMULA" in capsys.readouterr().err


def test_dot_file_needs_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "g.dot"
    code, _, _ = run(capsys, "relu(a*b + d)", "a=2", "b=-3", "d=10", "--dot", str(path))
    text = path.read_text()
    assert code == 0 and text.startswith("digraph chainrule {")
    assert 'v0 [shape=record, label="{a|data 2.0|grad -3.0}"];' in text


def test_svg_without_graphviz(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chainrule.explainer.draw.shutil, "which", lambda name: None)
    code, out, err = run(capsys, "a*b", "a=2", "b=3", "--svg", str(tmp_path / "g.svg"))
    assert code == 1
    assert grads(out)["a"] == "3.0"  # the table is still printed
    assert err.count("\n") == 1 and "apt-get install graphviz" in err
    assert err.startswith("chainrule explain: drawing needs Graphviz's `dot` program")


def test_svg_into_a_missing_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    require_dot()
    target = tmp_path / "no" / "such" / "g.svg"
    code, out, err = run(capsys, "a*b", "a=2", "b=3", "--svg", str(target))
    assert code == 1 and out == ""  # checked before the work
    assert (
        err
        == f"chainrule explain: cannot write {target}: directory {target.parent} does not exist\n"
    )


def test_svg_of_seed_002(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    require_dot()
    path = tmp_path / "seed002.svg"
    code, _, err = run(capsys, "relu(a*b + d)", "a=2", "b=-3", "d=10", "--svg", str(path))
    assert (code, err) == (0, f"wrote {path}\n")
    svg = path.read_text()
    assert "<svg" in svg and "relu(a*b + d)" in svg and "grad &#45;3.0" in svg


def test_malformed_input_in_a_real_process_gives_no_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "chainrule", "explain", "__import__('os').system('ls')"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[0].startswith(
        "chainrule explain: unknown function '__import__'"
    )


def test_html_writes_the_page(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "walk.html"
    code, out, err = run(capsys, "c = a*b; d = c + a; e = d**2", "a=2", "b=3", "--html", str(page))
    assert code == 0 and err == f"wrote {page}\n"
    assert grads(out)["a"] == "16.0 + 48.0 = 64.0"  # the table is printed as well
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "a.grad = 16.0 + 48.0 = 64.0" in text


def test_html_to_an_unwritable_place_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "a*b", "a=2", "b=3", "--html", str(tmp_path / "no" / "p.html"))
    assert code == 1
    assert err.startswith("chainrule explain: cannot write ") and len(err.splitlines()) == 1


def test_a_formula_starting_with_minus_says_to_put_it_after_double_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explain", "-a*b", "a=1", "b=2"])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        "chainrule explain: error: unknown option '-a*b'; a formula that starts with '-' "
        "goes after '--': chainrule explain -- '-a*b' ...; see chainrule explain --help\n"
    )
    with pytest.raises(SystemExit):  # a misspelled option still gets its suggestion
        main(["explain", "a", "a=1", "--tarce"])
    assert "(did you mean --trace?)" in capsys.readouterr().err


def test_every_explain_error_starts_with_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for args in (["a)", "a=1"], ["a", "a=x"], ["a", "a=1", "--digits", "40"]):
        code, _, err = run(capsys, *args)
        assert code == 2 and err.startswith("chainrule explain: "), err


def test_html_of_a_graph_beyond_max_nodes_names_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    formula = "+".join(["a"] * 300)  # 300 values: a and 299 sums
    page = tmp_path / "p.html"
    code, _, err = run(capsys, formula, "a=1", "--html", str(page))
    assert code == 1 and not page.exists()
    assert err == (
        "chainrule explain: --html: the graph has 300 values, more than --max-nodes 200; "
        "give --max-nodes 300 to draw the page\n"
    )
    code, _, err = run(capsys, formula, "a=1", "--html", str(page), "--max-nodes", "300")
    assert code == 0 and page.read_text(encoding="utf-8").count('class="node"') == 300


@pytest.mark.parametrize("option", ["--html", "--dot"])
def test_a_full_disk_leaves_the_old_file_not_an_empty_one(tmp_path: Path, option: str) -> None:
    """Writes past 2 KB fail (``ulimit -f``, as a full disk fails them): the
    file that was there is still there, whole, and no temporary is left."""
    import resource
    import signal

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    target = tmp_path / "out.file"
    target.write_text("the old file\n")
    formula = "+".join(f"x{i}" for i in range(40))
    done = subprocess.run(
        [sys.executable, "-m", "chainrule", "explain", formula,
         *[f"x{i}=1" for i in range(40)], option, str(target)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120, preexec_fn=small_files,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"chainrule explain: cannot write {target}: File too large"
    )
    assert target.read_text() == "the old file\n"
    assert os.listdir(tmp_path) == ["out.file"]
