"""What the commands share: argument types, the output directory, and the
error a command raises to stop with one line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


class CommandError(Exception):
    """A problem the user can fix, reported as one line on stderr (no
    traceback) with exit status ``code``; :func:`chainrule.cli.main` prints it."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def int_at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number, at least ``least``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r:.60}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {n}")
        return n

    return parse


def make_out_dir(out: Path) -> str | None:
    """Create ``out`` (and its parents) and make sure files can be written
    in it; a one-line reason if not."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"--out {out}: exists and is not a directory"
    except (OSError, ValueError) as e:
        return f"--out {out}: cannot create directory ({getattr(e, 'strerror', None) or e})"
    from .preflight import unwritable_dir

    problem = unwritable_dir(out)
    return f"--out {out}: {problem}" if problem else None
