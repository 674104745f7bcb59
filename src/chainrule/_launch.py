"""Ctrl-C while the ``chainrule`` command is still starting up.

Before :func:`chainrule.cli.main` runs, Python imports the ``chainrule``
package (a few tenths of a second on a busy machine), and a Ctrl-C then
would end in a traceback through the import machinery. When this process
is the ``chainrule`` command (``python -m chainrule`` or the console
script, as ``sys.orig_argv`` tells), :func:`guard` makes such a Ctrl-C end
it with one line and the shell's status for Ctrl-C, 130; ``main`` puts
Python's own handler back as it starts. Any other program importing
chainrule is left as it is.

The package imports this module first, and importing it is the guard.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

STATUS = 130  # 128 + SIGINT


def is_the_command() -> bool:
    """True when this process is ``python -m chainrule`` or the
    ``chainrule`` console script."""
    argv = getattr(sys, "orig_argv", None) or []
    for k, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[k + 1 : k + 2] == ["chainrule"]
        if arg.startswith("-m"):
            return arg == "-mchainrule"
        if not arg.startswith("-"):  # the script: the console script, or another one
            return os.path.basename(arg).removesuffix(".exe") == "chainrule"
    return False


def _interrupted(signum: int, frame: Any) -> None:
    os.write(2, b"chainrule: interrupted\n")
    os._exit(STATUS)  # nothing is open yet: no work to lose, no file half-written


def guard() -> None:
    """Install the start-up handler if this process is the command and
    Python's own handler is in place (in the main thread)."""
    try:
        if is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread
        pass


def release() -> None:
    """Give Ctrl-C back to Python (``KeyboardInterrupt``), which ``main``
    turns into its one line."""
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:
        pass


guard()
