"""What the commands share: argument types, the output directory (and its
lock), and the error a command raises to stop with one line."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

#: The exit status after Ctrl-C: 128 + SIGINT, the shell's convention.
INTERRUPTED = 130


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


@contextlib.contextmanager
def locked_out_dir(out: Path) -> Iterator[None]:
    """Hold ``out`` for this run: a second run given the same ``--out``
    while this one works stops at once with a :class:`CommandError`
    instead of both writing the same files. An advisory lock on the
    directory itself (``flock``: released when the process ends, however
    it ends, and it leaves no file behind); where there is none (Windows),
    nothing is locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        fd = os.open(out, os.O_RDONLY)
    except OSError:  # preflight.make_out_dir checked it: a race; let the writes say what is wrong
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CommandError(
                f"--out {out} is in use by another chainrule run; "
                "wait for it to finish or choose another --out"
            ) from None
        except OSError:  # a file system without locks (some network mounts)
            pass
        yield
    finally:
        os.close(fd)
