"""Break each derivative rule of the scalar engine in turn and check that the
test suite notices: a rule no test can tell from a wrong one is untested.

    python tools/mutate_rules.py

Works on a temporary copy of the repository; the checkout is not touched.
Each rule's local derivatives d become 1.5 * d + 0.125 (so the value stays
right and only the gradient is wrong), then the engine's oracle tests run.
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
    "tests/test_finite_differences.py",
    "tests/test_higher_order.py",
]


# Each local derivative d becomes this: wrong for every d, zeros included.
SCALE = "1.5 * d + 0.125"
TABLE_LINE = r'^([A-Z_]+) = Primitive\("[^"]*", [^,]+, (lambda M, [^:]*: )(.*)\)$'


def _node_locals(text: str) -> tuple[str, str, str] | None:
    """Split ``return _node(y, prev, LOCALS, NAME)`` around LOCALS, reading
    from the right so nested parentheses in ``y`` and ``prev`` don't matter."""
    m = re.search(r", [A-Z_]+\)$", text)
    if not text.lstrip().startswith("return _node(") or not m:
        return None
    end = m.start()
    if text[end - 1] == ")":
        depth, start = 0, end - 1
        while start >= 0:
            depth += {")": 1, "(": -1}.get(text[start], 0)
            if depth == 0:
                break
            start -= 1
        if text[start - 1] not in " ,(":  # a call such as tuple(xd): take it whole
            start = text.rindex(", ", 0, start) + 2
    else:
        start = text.rindex(", ", 0, end) + 2
    if text[start:end].startswith("_d_") or ".derivative(" in text[start:end]:
        return None  # a rule of the table: mutated where it is defined
    return text[:start], f"({text[start:end]})", text[end:]


def mutations(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, mutated line) for every derivative rule in engine.py: the
    table's lambdas, the ``_d_*`` rule functions, and the constant local
    derivatives given to ``_node`` by the linear ops and ``dot``."""
    out = []
    function = ""
    for i, line in enumerate(lines):
        text, _, comment = line.rstrip("\n").partition("  # ")
        comment = f"  # {comment}" if comment else ""
        if text.startswith("def ") or text.startswith("    def "):
            function = text.split("(")[0].split()[-1]
        table = re.match(TABLE_LINE, text)
        node = _node_locals(text)
        if table:  # NAME = Primitive("op", forward, lambda M, ...: locals[, MASK])
            body = table.group(3)
            extra = ""
            if re.search(r", [A-Z_]+$", body):
                body, extra = body.rsplit(", ", 1)
                extra = ", " + extra
            head = text[: text.index(table.group(2)) + len(table.group(2))]
            out.append((i, f"{head}tuple({SCALE} for d in ({body})){extra})"))
        elif node:
            head, locals_, tail = node
            out.append((i, f"{head}tuple({SCALE} for d in {locals_}){tail}{comment}"))
        elif (function.startswith("_d_") or function == "d") and "Primitive(" not in text:
            indent = text[: len(text) - len(text.lstrip())]
            stmt = text.strip()
            if stmt.startswith("return "):
                out.append((i, f"{indent}return tuple({SCALE} for d in ({stmt[7:]}))"))
            elif re.match(r"^d_(base|exponent) = ", stmt):
                name, expr = stmt.split(" = ", 1)
                out.append((i, f"{indent}{name} = 1.5 * ({expr}) + 0.125"))
    return out


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        skip = shutil.ignore_patterns(".git", "*.egg-info", "__pycache__")
        shutil.copytree(ROOT, copy, ignore=skip)
        engine = copy / "src" / "chainrule" / "engine.py"
        original = engine.read_text()
        lines = original.splitlines(keepends=True)
        missed = 0
        for i, mutated in mutations(lines):
            engine.write_text("".join(lines[:i] + [mutated + "\n"] + lines[i + 1 :]))
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:warnings", *TESTS],
                cwd=copy,
                capture_output=True,
                text=True,
            )
            caught = re.findall(r"(?:FAILED|ERROR) (\S+)", run.stdout)
            if not caught:
                missed += 1
            verdict = f"caught by {caught[0]}" if caught else "NOT CAUGHT"
            print(f"engine.py:{i + 1}: {lines[i].strip()[:60]} -> {verdict}", flush=True)
        engine.write_text(original)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
