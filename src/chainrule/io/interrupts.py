"""Ctrl-C at a moment of the program's choosing.

:func:`deferred_interrupts` records SIGINT inside a block instead of
raising ``KeyboardInterrupt`` wherever the main thread happens to be, so
that work which must not be cut in half (a training step that updates
every parameter, the renames of files that belong together) finishes
first; the code then looks at what was recorded. :func:`held_interrupts`
delivers a recorded Ctrl-C when its block ends.

Only the main thread receives signals: in another thread both blocks do
nothing (an interrupt there never arrives anyway).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["deferred_interrupts", "held_interrupts"]


@contextlib.contextmanager
def deferred_interrupts(*, insist: bool = False) -> Iterator[list[Any]]:
    """Record SIGINT inside the block in the yielded list (one entry per
    Ctrl-C) instead of raising. ``insist=True``: a second Ctrl-C raises
    ``KeyboardInterrupt`` at once, for a user who will not wait."""
    caught: list[Any] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def record(*args: Any) -> None:
        caught.append(args)
        if insist and len(caught) > 1:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, record)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT arriving inside the block takes effect when it ends."""
    previous = signal.getsignal(signal.SIGINT)
    with deferred_interrupts() as caught:
        yield
    if caught and callable(previous):
        previous(*caught[0])
    elif caught and previous == signal.SIG_DFL:
        os.kill(os.getpid(), signal.SIGINT)
