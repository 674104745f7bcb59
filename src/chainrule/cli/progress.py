"""A small progress bar for training loops, written to stderr.

On a terminal it redraws one line in place; otherwise (a log file, CI) it
prints a plain line every ``every`` steps and at the last one, so logs stay
readable.

>>> import io
>>> out = io.StringIO()
>>> with ProgressBar(20, stream=out, every=10) as bar:
...     for step in range(1, 21):
...         bar.update(step, loss=1.0 / step)
>>> print(out.getvalue(), end="")
[##########----------] 10/20 loss 0.1000
[####################] 20/20 loss 0.0500
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO


class ProgressBar:
    """``update(step, **stats)`` after each of ``total`` steps shows a bar
    with the step count and the stats (floats to 4 decimals, or as given if
    already strings)."""

    def __init__(
        self, total: int, *, stream: TextIO | None = None, every: int = 10, width: int = 20
    ) -> None:
        self.total = max(int(total), 1)
        self.stream = stream if stream is not None else sys.stderr
        self.every = max(int(every), 1)
        self.width = width
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty())
        self._drawn = False

    def line(self, step: int, **stats: float | str) -> str:
        filled = round(self.width * min(step, self.total) / self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        digits = len(str(self.total))
        shown = " ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items()
        )
        return f"[{bar}] {step:>{digits}}/{self.total} {shown}".rstrip()

    def update(self, step: int, **stats: float | str) -> None:
        if self.live:
            self.stream.write("\r\x1b[K" + self.line(step, **stats))
            self._drawn = True
        elif step % self.every == 0 or step == self.total:
            self.stream.write(self.line(step, **stats) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
