"""What the commands share: argument types and the output directory."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def int_at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number, at least ``least``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {n}")
        return n

    return parse


def make_out_dir(out: Path) -> str | None:
    """Create ``out`` (and its parents); a one-line reason if that fails."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"--out {out}: exists and is not a directory"
    except OSError as e:
        return f"--out {out}: cannot create directory ({e.strerror or e})"
    return None
