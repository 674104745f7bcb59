"""The ``chainrule`` command: one subcommand per module in this package.

Each command module has ``register(subparsers)``, which adds its parser and
sets ``func`` to the function that runs it and returns an exit code.

No traceback reaches a user: :func:`main` turns a :class:`CommandError`,
a full output, a failed allocation, Ctrl-C or an unforeseen exception into
one line on stderr, ``chainrule COMMAND: ...``, and a non-zero exit.
``--debug`` (or the environment variable ``CHAINRULE_DEBUG=1``) shows the
traceback instead, for bug reports. A reader that leaves early
(``chainrule explain ... | head -1``) ends the command quietly, as it ends
``yes``: nothing on stderr, exit status 141 (128 + SIGPIPE, what the shell
shows for a process that SIGPIPE stopped).

The top layer: it may import every layer of the package; nothing in the
package imports it (its Ctrl-C, progress and preflight helpers live here).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import io
import os
import re
import shlex
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .. import _launch
from .._version import __version__
from .options import INTERRUPTED, CommandError

# One line per command module (chainrule/cli/<name>.py).
COMMANDS: list[str] = [
    "bench",
    "digits",
    "explain",
    "gpt",
    "moons",
]

DEBUG_ENV = "CHAINRULE_DEBUG"
#: The exit status when the reader of the output has gone: what the shell
#: shows for ``yes | head -1``'s ``yes``.
BROKEN_PIPE_STATUS = 128 + getattr(signal, "SIGPIPE", 13)
_OPTION_NAME = re.compile(r"--?[A-Za-z][A-Za-z0-9-]*")
_INVALID_CHOICE = re.compile(r"invalid choice: '(.*?)' \(choose from (.*)\)", re.S)


def _closest(word: str, candidates: Sequence[str]) -> str:
    """`` (did you mean X?)`` for the closest candidate, or nothing."""
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


class CommandParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (and a suggestion for a
    misspelled choice) instead of the usage block. ``dash_hint`` (a
    subcommand's keyword) is added to the error for an unknown option that
    is no option's name, such as a formula that starts with ``-``: it says
    how to pass it (``--`` before it)."""

    def __init__(self, *args: Any, dash_hint: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dash_hint = dash_hint

    def error(self, message: str) -> NoReturn:
        m = _INVALID_CHOICE.search(message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            message = message.rstrip() + _closest(m.group(1), choices)
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")

    def unknown(self, extra: list[str]) -> NoReturn:
        """Report the first of the arguments parsing left over."""
        options = [s for a in self._actions for s in a.option_strings]
        word = extra[0]
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if self.dash_hint and not _OPTION_NAME.fullmatch(name):
                self.error(
                    f"unknown option {name!r:.80}; {self.dash_hint} that starts with '-' "
                    f"goes after '--': {self.prog} -- {shlex.quote(word)[:80]} ..."
                )
            self.error(f"unknown option {name!r:.80}{_closest(name, options)}")
        self.error(f"unexpected argument {word!r:.80}")


def build_parser() -> CommandParser:
    return _with_subparsers()[0]


def _with_subparsers() -> tuple[CommandParser, dict[str, CommandParser]]:
    parser = CommandParser(
        prog="chainrule",
        description="Reverse-mode automatic differentiation: train the classic demos, "
        "benchmark the engine, and explain a backward pass step by step.",
    )
    parser.add_argument("--version", action="version", version=f"chainrule {__version__}")
    _add_debug(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"chainrule.cli.{name}").register(sub)
    commands: dict[str, CommandParser] = dict(sub.choices)
    for p in commands.values():
        _add_debug(p)
    return parser, commands


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """``--debug`` before or after the command (SUPPRESS: the command's
    parser does not reset what the top-level one set)."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"on an error, show the Python traceback (also: {DEBUG_ENV}=1)",
    )


def _debugging(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``) and return its
    exit status; Ctrl-C at any moment, parsing included, is one line."""
    _launch.release()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _report("chainrule", "interrupted", INTERRUPTED)


def _main(argv: Sequence[str] | None) -> int:
    # A stream the shell closed (``2>&-``): the progress bar and the one
    # line have nowhere to go, and a closed stdout would fail after the work.
    if _closed(sys.stderr):
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (for the life of the process)
    if _closed(sys.stdout):
        print("chainrule: standard output is closed; redirect it instead", file=sys.stderr)
        return 1
    parser, commands = _with_subparsers()
    args, extra = parser.parse_known_args(argv)
    command = getattr(args, "command", None)
    if extra:
        commands.get(command or "", parser).unknown(extra)
    if not getattr(args, "func", None):
        parser.print_help()
        print(f"chainrule: error: name a command ({', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    prefix = f"chainrule {command}"
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed or full stdout shows here, not at exit
        return code
    except KeyboardInterrupt:
        return _report(prefix, "interrupted", INTERRUPTED)
    except CommandError as e:
        return _report(prefix, str(e), e.code)
    except BrokenPipeError:
        if _debugging(args):
            raise
        _silence_stdout(broken=True)
        return BROKEN_PIPE_STATUS  # the reader left: nothing to say, as yes says nothing
    except Exception as e:
        if _debugging(args):
            raise
        return _report(prefix, _describe(e), 1)


def _describe(e: Exception) -> str:
    """The one line for an exception no command foresaw."""
    if isinstance(e, MemoryError):
        return f"out of memory{f' ({e})' if str(e) else ''}; try smaller sizes"
    if isinstance(e, OSError):
        return f"{e.filename or 'cannot write output'}: {e.strerror or e}"
    message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return (
        f"internal error ({message}); please report it with the output of "
        f"{DEBUG_ENV}=1 chainrule ..."
    )


def _closed(stream: Any) -> bool:
    """True for a standard stream that cannot be written: its descriptor
    closed by the shell (or reused, read-only, by whatever opened a file
    next, as a wrapper script does)."""
    if stream is None:
        return True
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False  # not a file (captured in tests, a notebook): usable
    try:
        import fcntl  # POSIX
    except ImportError:
        return False
    try:
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except OSError:
        return True


def _report(prefix: str, message: str, code: int) -> int:
    """``prefix: message`` on stderr; stdout, if closed or full, is pointed
    at /dev/null so that Python's own flush at exit stays quiet."""
    _silence_stdout()
    with contextlib.suppress(OSError):  # stderr closed too: the exit status is all that is left
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)
    return code


def _silence_stdout(broken: bool = False) -> None:
    """Point stdout at /dev/null if it is closed or full (or ``broken``: its
    reader gone), so that Python's own flush at exit stays quiet."""
    if not broken:
        try:
            sys.stdout.flush()
            return
        except (OSError, ValueError):
            pass
    _to_devnull(sys.stdout)
    if broken:  # stderr may be the pipe whose reader left (2>&1 | head)
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            _to_devnull(sys.stderr)


def _to_devnull(stream: Any) -> None:
    # not a real file (captured in tests): nothing will flush at exit
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
