"""Files that carry the SHA-256 of their own bytes, written atomically and
read with bounds. The mechanism under both checkpoint formats (JSON and
safetensors).

A sealed file holds, once, the text ``"file_sha256": "<64 hex digits>"``
(inside its JSON, or inside a safetensors header's metadata). The digest is
the SHA-256 of the whole file with those 64 digits written as zeros, so it
covers every other byte: a flipped byte anywhere (a parameter, an
optimizer moment, the random state, a space between two JSON tokens) no
longer matches, and a flipped digit of the digest itself does not match
either.

The check comes before any parsing, and reading is bounded: only regular
files (not a FIFO or ``/dev/zero``), at most a given size, and JSON without
non-finite numbers, huge integers or deep nesting. The digest guards
against damage, not against an attacker (who can recompute it): what is
read is also checked for sense by its reader.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .interrupts import held_interrupts

__all__ = [
    "DIGEST_KEY",
    "PLACEHOLDER",
    "CheckpointError",
    "loads_json",
    "read_regular_file",
    "replace_file",
    "seal",
    "sealed_digest",
    "verify",
    "write_atomically",
]

DIGEST_KEY = "file_sha256"
#: What a writer puts where the digest goes; :func:`seal` fills it in.
PLACEHOLDER = "0" * 64

_DIGEST = re.compile(rb'"' + DIGEST_KEY.encode() + rb'"\s*:\s*"([0-9a-f]{64})"')

#: Integers longer than this in a checkpoint's JSON are refused: NumPy's
#: PCG64 random state holds 128-bit integers (39 digits); Python would parse
#: a 4,000-digit one, slowly.
MAX_INT_DIGITS = 40


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded, with the reason in one line."""


def seal(data: bytes, end: int | None = None) -> bytes:
    """``data`` with its one ``PLACEHOLDER`` digest (looked for before
    ``end``) replaced by the SHA-256 of ``data`` (placeholder included):
    the bytes to write."""
    end = len(data) if end is None else end
    match = _DIGEST.search(data, 0, end)
    if (
        match is None
        or match.group(1) != PLACEHOLDER.encode()
        or _DIGEST.search(data, match.end(), end)
    ):
        raise ValueError(f"seal: data must hold one {DIGEST_KEY!r} placeholder")
    digest = hashlib.sha256(data).hexdigest().encode()
    return data[: match.start(1)] + digest + data[match.end(1) :]


def sealed_digest(data: bytes, end: int | None = None) -> str | None:
    """The digest a sealed file claims (before ``end``), or None."""
    match = _DIGEST.search(data, 0, len(data) if end is None else end)
    return match.group(1).decode() if match else None


def verify(data: bytes, where: str, end: int | None = None) -> str:
    """Check that ``data`` is a sealed file whose bytes are as written, and
    return its digest; the digest is looked for before ``end`` (a header).
    Raises :class:`CheckpointError` otherwise."""
    end = len(data) if end is None else end
    match = _DIGEST.search(data, 0, end)
    if match is None or _DIGEST.search(data, match.end(), end) is not None:
        raise CheckpointError(f"{where}: checkpoint is damaged (its file_sha256 is missing)")
    # the digest of the bytes with the claimed one zeroed, hashed in place
    # (no copy of a file that may be gigabytes)
    view = memoryview(data)
    zeroed = hashlib.sha256(view[: match.start(1)])
    zeroed.update(PLACEHOLDER.encode())
    zeroed.update(view[match.end(1) :])
    claimed = match.group(1).decode()
    if zeroed.hexdigest() != claimed:
        raise CheckpointError(
            f"{where}: checkpoint was modified or damaged after saving (sha256 does not match)"
        )
    return claimed


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    A FIFO, a device (``/dev/zero``), a directory or a larger file is
    refused before anything is read; opening does not block on a FIFO.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise CheckpointError(f"{p}: no such checkpoint") from None
    except OSError as e:
        raise CheckpointError(f"{p}: cannot read checkpoint ({e.strerror or e})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{p}: not a regular file, refusing to read it as a checkpoint")
        if info.st_size > limit:
            raise CheckpointError(
                f"{p}: {info.st_size:,} bytes, more than a checkpoint may have ({limit:,})"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(info.st_size + 1)  # one more: a file that grew is noticed
    except OSError as e:
        raise CheckpointError(f"{p}: cannot read checkpoint ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) != info.st_size:
        raise CheckpointError(f"{p}: changed while it was read, try again")
    return data


def loads_json(text: str | bytes, where: str) -> Any:
    """JSON as a checkpoint may hold it: finite numbers, integers of at
    most ``MAX_INT_DIGITS`` digits, nesting within Python's recursion limit.
    Raises :class:`CheckpointError`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(f"{where}: not a valid checkpoint, not UTF-8 ({e})") from None
    try:
        return json.loads(text, parse_float=_finite, parse_int=_short_int, parse_constant=_no)
    except RecursionError:
        # The parser stops at Python's recursion limit (about 1,000 levels),
        # long before the stack or memory is at risk.
        raise CheckpointError(f"{where}: not a valid checkpoint, nested too deep") from None
    except ValueError as e:
        raise CheckpointError(
            f"{where}: not a valid checkpoint, corrupt or truncated ({e})"
        ) from None


def _finite(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise ValueError(f"{s[:40]} is not a finite float64")
    return x


def _short_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(s)} digits")
    return int(s)


def _no(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def write_atomically(*files: tuple[Path, bytes]) -> None:
    """Write each ``(path, data)`` to a temporary file beside ``path``, flush
    them all to disk, then rename each over its target, in order: a crash
    leaves each file old or new, never half of one. Ctrl-C during the
    renames is held until the last one is done, so files that belong
    together (a model and its optimizer state) are not left one old and one
    new by an interrupt (a power cut between two renames still can; the
    reader notices)."""
    temps: list[str] = []
    for path, _ in files:
        remove_stale_temporaries(path)
    try:
        for path, data in files:
            with _naming(path):
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                temps.append(tmp)
                # mkstemp makes the file private (0600); a checkpoint is an ordinary file.
                os.chmod(tmp, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        with held_interrupts():
            for (path, _), tmp in zip(files, temps):
                with _naming(path):
                    os.replace(tmp, path)
    except BaseException:
        for tmp in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    for directory in {path.parent for path, _ in files}:
        _sync_directory(directory)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError inside the block names ``path``, the file being written,
    not its temporary file (or no file, as a failed write does)."""
    try:
        yield
    except OSError as e:
        if e.errno is not None:  # an error of the system's, which names its file
            e.filename, e.filename2 = str(path), None
        raise


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` with :func:`write_atomically`: a full disk
    or a crash leaves the old file (or none), never an empty or half one.
    A ``path`` that exists and is not a regular file (``/dev/stdout``, a
    FIFO) is written in place: it cannot be replaced, and must not be."""
    p = Path(path)
    try:
        special = not stat.S_ISREG(os.stat(p).st_mode)
    except OSError:  # absent (or unreadable: the write says why)
        special = False
    if special:
        with open(p, "wb") as f:
            f.write(data)
    else:
        write_atomically((p, data))


def remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary files that writes of ``path`` interrupted by a
    crash or ``kill -9`` left behind (``.NAME.XXXXXXXX.tmp``, mkstemp's
    names): the next save cleans up after them."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.{'[a-z0-9_]' * 8}.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _sync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable (POSIX; directories cannot be
    opened on Windows)."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
