"""Rerun the benchmark: the same harness as ``chainrule bench``.

    python benchmarks/run.py                 # full run, table on stdout
    python benchmarks/run.py --json benchmarks/results.json

Any ``chainrule bench`` option works here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from chainrule.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
