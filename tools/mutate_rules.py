"""Break each derivative rule of the scalar engine in turn and check that the
test suite notices: a rule no test can tell from a wrong one is untested.

    python tools/mutate_rules.py

Works on a temporary copy of the repository; the checkout is not touched.
Each rule's local derivatives d become 1.5 * d + 0.125 (so the value stays
right and only the gradient is wrong), then the engine's oracle tests run.
The rules are the table in ``primitives.py`` (its lambdas and ``_d_*``
functions) and the local derivatives that ``engine.py``'s hot operators
(``+``, ``*``, ``relu``, the running sum) write out inline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/test_oracle_torch.py",
    "tests/test_engine.py",
    "tests/test_protocols.py",
    "tests/test_finite_differences.py",
    "tests/test_higher_order.py",
]

# Each local derivative d becomes this: wrong for every d, zeros included.
SCALE = "1.5 * d + 0.125"
TABLE_LINE = r'^([A-Z_]+) = Primitive\("[^"]*", [^,]+, (lambda M, [^:]*: )(.*)\)$'
# engine.py: the functions whose inline local derivatives are mutated
INLINE = ("__add__", "__mul__", "relu", "_add_term", "_dot")
INLINE_TARGET = r"v\._da = (?:v\._db = )?|v\._db = |local = |terms\.local(?: \+= |\.append\()"
INLINE_LINE = rf"^(\s*)({INLINE_TARGET})(.+?)(\)?)$"


def table_mutations(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, mutated line) for every rule in primitives.py: the
    table's lambdas and the ``_d_*`` (and ``pow_const``'s ``d``) functions."""
    out = []
    function = ""
    for i, line in enumerate(lines):
        text = line.rstrip("\n").partition("  # ")[0]
        if text.startswith("def ") or text.startswith("    def "):
            function = text.split("(")[0].split()[-1]
        table = re.match(TABLE_LINE, text)
        if table:  # NAME = Primitive("op", forward, lambda M, ...: locals[, MASK][, const=True])
            body = table.group(3)
            extra = ""
            while m := re.search(r", (?:[A-Z_]+|const=True)$", body):
                body, extra = body[: m.start()], body[m.start() :] + extra
            head = text[: text.index(table.group(2)) + len(table.group(2))]
            out.append((i, f"{head}tuple({SCALE} for d in ({body})){extra})"))
        elif (function.startswith("_d_") or function == "d") and "Primitive(" not in text:
            indent = text[: len(text) - len(text.lstrip())]
            stmt = text.strip()
            if stmt.startswith("return "):
                out.append((i, f"{indent}return tuple({SCALE} for d in ({stmt[7:]}))"))
            elif re.match(r"^d_(base|exponent) = ", stmt):
                name, expr = stmt.split(" = ", 1)
                out.append((i, f"{indent}{name} = 1.5 * ({expr}) + 0.125"))
            elif re.match(r"^local \+= ", stmt):
                expr = stmt.split(" += ", 1)[1]
                out.append((i, f"{indent}local += tuple({SCALE} for d in ({expr}))"))
    return out


def inline_mutations(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, mutated line) for the local derivatives that engine.py's
    hot operators store directly."""
    out = []
    function = ""
    for i, line in enumerate(lines):
        text, _, comment = line.rstrip("\n").partition("  # ")
        if text.startswith("def ") or text.startswith("    def "):
            function = text.split("(")[0].split()[-1]
        if function not in INLINE or comment.startswith("the constant"):
            continue
        m = re.match(INLINE_LINE, text)
        if not m:
            continue
        indent, target, expr, close = m.groups()
        if target == "local = ":
            out.append((i, f"{indent}{target}tuple({SCALE} for d in ({expr}{close}))"))
        elif target.startswith("terms.local +="):
            out.append((i, f"{indent}{target}tuple({SCALE} for d in {expr}{close})"))
        elif target.startswith("terms.local.append("):
            out.append((i, f"{indent}{target}1.5 * ({expr}) + 0.125{close}"))
        else:
            out.append((i, f"{indent}{target}1.5 * ({expr}{close}) + 0.125"))
    return out


def main() -> int:
    missed = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        skip = shutil.ignore_patterns(".git", "*.egg-info", "__pycache__")
        shutil.copytree(ROOT, copy, ignore=skip)
        for name, find in (("primitives.py", table_mutations), ("engine.py", inline_mutations)):
            path = copy / "src" / "chainrule" / "value" / name
            original = path.read_text()
            lines = original.splitlines(keepends=True)
            for i, mutated in find(lines):
                path.write_text("".join(lines[:i] + [mutated + "\n"] + lines[i + 1 :]))
                run = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", *TESTS],
                    cwd=copy,
                    capture_output=True,
                    text=True,
                    env={"PYTHONPATH": str(copy / "src"), "PATH": "/usr/bin:/bin"},
                )
                caught = re.findall(r"(?:FAILED|ERROR) (\S+)", run.stdout)
                if not caught:
                    missed += 1
                verdict = f"caught by {caught[0]}" if caught else "NOT CAUGHT"
                print(f"{name}:{i + 1}: {lines[i].strip()[:60]} -> {verdict}", flush=True)
            path.write_text(original)
    print(f"{missed} rule(s) not caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
