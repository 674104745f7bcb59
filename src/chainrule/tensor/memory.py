"""Keep freed memory in the process, for training loops.

A training step allocates and frees the same arrays (activations and
gradients of a few hundred kilobytes each) again and again. glibc's malloc
serves blocks this size with fresh ``mmap`` pages and gives freed memory
back to the system, so every step pays the page faults again; on a virtual
machine they can cost more than the arithmetic (they doubled a GPT step on
this project's machines). Raising the two thresholds keeps that memory in
the heap, where the next step reuses it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_MAX = 32 * 1024 * 1024  # the largest threshold glibc accepts on 64-bit
_TRIM = 1024 * 1024 * 1024

_done = False


def keep_freed_memory() -> bool:
    """Ask malloc to reuse freed memory rather than return it to the system
    (glibc only; elsewhere a no-op). Process-wide: memory the process has
    used stays reserved for it. Returns whether the setting took effect."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM))
    return _done
