"""Checks before work: that an output can be written and that a run fits
in memory, so that a command fails in its first second rather than after
an hour of training or benchmarking.

The memory available is the smallest of what the kernel reports as
available (``MemAvailable``), the cgroup's limit (containers) and the
process's address-space limit (``ulimit -v``), each where the platform
has it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from .options import CommandError


def unwritable_dir(directory: Path) -> str | None:
    """Why no file can be created in ``directory``, or None. Tries it (a
    temporary file, removed at once): permission bits say nothing about a
    read-only mount, an immutable directory or a full disk's inodes."""
    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".chainrule-probe-"):
            pass
    except (OSError, ValueError) as e:
        return f"cannot write there ({getattr(e, 'strerror', None) or e})"
    return None


def output_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None: its directory must exist and
    take new files, and it must not be a directory."""
    if "\x00" in str(path):
        return "not a usable path (contains a NUL byte)"
    try:
        is_dir = path.is_dir()
        parent = path.parent
        parent_ok = parent.is_dir()
    except (OSError, ValueError) as e:
        return f"not a usable path ({e})"
    if is_dir:
        return "is a directory; give a file name"
    if not parent_ok:
        return f"directory {parent} does not exist"
    problem = unwritable_dir(parent)
    if problem is None and path.exists() and not os.access(path, os.W_OK):
        problem = "the file is read-only"
    return problem


def check_output_file(path: Path, option: str) -> None:
    """Raise :class:`CommandError` unless ``path`` can be written (see
    :func:`output_file_problem`)."""
    problem = output_file_problem(path)
    if problem:
        shown = repr(str(path)) if "\x00" in str(path) else str(path)
        raise CommandError(f"{option} {shown}: {problem}")


# ----------------------------------------------------------------------------
# memory
# ----------------------------------------------------------------------------


def _proc_kilobytes(path: str, field: str) -> int | None:
    """A ``Field:   123 kB`` line of a /proc file, in bytes (None: absent)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def _cgroup_available() -> int | None:
    """The cgroup v2 limit minus current use (None: no limit, or no cgroup v2)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/cgroup", encoding="ascii") as f:
            line = next((x for x in f if x.startswith("0::")), None)
        if line is None:
            return None
        base = Path("/sys/fs/cgroup") / line.strip()[3:].lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((base / "memory.current").read_text())
    return None


def _address_space_available() -> int | None:
    """``ulimit -v`` minus the address space already mapped."""
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - (_proc_kilobytes("/proc/self/status", "VmSize") or 0)


def available_memory() -> int | None:
    """Bytes this process can still allocate, as far as can be told (None:
    unknown, e.g. not Linux)."""
    known = [
        x
        for x in (
            _proc_kilobytes("/proc/meminfo", "MemAvailable"),
            _cgroup_available(),
            _address_space_available(),
        )
        if x is not None
    ]
    return max(min(known), 0) if known else None


def format_bytes(n: float) -> str:
    """``1.5 GB``: decimal units, as ``df -H`` and the kernel's sizes in
    bytes read; beyond petabytes, powers of ten."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB", "TB", "PB"):
        n /= 1000
        if n < 1000:
            return f"{n:.1f} {unit}"
    return f"{n * 1e15:.1e} B"


#: Address space that loading a library takes (Linux x86-64, one-thread
#: OpenBLAS, measured as VmSize): NumPy about 85 MB, matplotlib with NumPy
#: and one figure drawn about 165 MB. Short of it, OpenBLAS ends the
#: process with its own message.
LOADING_BYTES = {"numpy": 100e6, "matplotlib": 180e6}


def would_load(module: str) -> bool:
    """False if ``module`` (a key of :data:`LOADING_BYTES`) is not loaded
    yet and the memory left is too little to load it."""
    if module in sys.modules:
        return True
    available = available_memory()
    return available is None or available >= LOADING_BYTES[module]


def check_memory(needed: float, what: str, hint: str, available: int | None = None) -> None:
    """Raise :class:`CommandError` if ``needed`` bytes (an estimate for
    ``what``) exceed the memory available; the message says how much it
    would need and ``hint`` what to change."""
    if available is None:
        available = available_memory()
    if available is not None and needed > available:
        raise CommandError(
            f"{what} would need about {format_bytes(needed)} of memory, "
            f"{format_bytes(available)} is available; {hint}"
        )


def make_out_dir(out: Path) -> str | None:
    """Create ``out`` (and its parents) and make sure files can be written
    in it; a one-line reason if not."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"--out {out}: exists and is not a directory"
    except (OSError, ValueError) as e:
        return f"--out {out}: cannot create directory ({getattr(e, 'strerror', None) or e})"
    problem = unwritable_dir(out)
    return f"--out {out}: {problem}" if problem else None
