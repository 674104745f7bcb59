"""Built-in datasets, generated in pure Python, and a loader for text files.

The three generators draw the same distributions as scikit-learn's
``make_moons``, ``make_circles`` and ``make_blobs`` (without needing it) and
return ``(X, y)``: ``X`` a list of ``[x1, x2, ...]`` points, ``y`` a list of
int class labels. ``seed`` is an int (the same int, the same data), a
``random.Random`` to draw from, or None for fresh randomness.

>>> from chainrule.data import make_moons
>>> X, y = make_moons(100, noise=0.1, seed=0)
>>> len(X), sorted(set(y))
(100, [0, 1])
>>> make_moons(100, noise=0.1, seed=0) == (X, y)
True

Part of the training API: it imports the standard library only (NumPy
and scikit-learn where a dataset needs them), no other layer.
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path
from typing import BinaryIO

__all__ = ["DatasetError", "load_lines", "make_blobs", "make_circles", "make_moons", "read_bytes"]

Points = list[list[float]]
Labels = list[int]


def _rng(seed: int | random.Random | None) -> random.Random:
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def _check_n(n_samples: int, least: int = 1) -> None:
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < least:
        raise ValueError(f"n_samples must be an int >= {least}, got {n_samples!r}")


def _check_noise(noise: float) -> None:
    if not noise >= 0.0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")


def _linspace(start: float, stop: float, n: int, endpoint: bool = True) -> list[float]:
    if n == 1:
        return [start]
    step = (stop - start) / (n - 1 if endpoint else n)
    return [start + i * step for i in range(n)]


def _finish(
    X: Points, y: Labels, noise: float, shuffle: bool, rng: random.Random
) -> tuple[Points, Labels]:
    if shuffle:
        order = list(range(len(X)))
        rng.shuffle(order)
        X = [X[i] for i in order]
        y = [y[i] for i in order]
    if noise:
        X = [[c + rng.gauss(0.0, noise) for c in point] for point in X]
    return X, y


def make_moons(
    n_samples: int = 100,
    *,
    noise: float = 0.0,
    shuffle: bool = True,
    seed: int | random.Random | None = None,
) -> tuple[Points, Labels]:
    """Two interleaving half circles in 2-D: class 0 the upper moon (centre
    (0, 0)), class 1 the lower one (centre (1, 0.5)), each sampled evenly
    along its arc, plus Gaussian ``noise`` (a standard deviation).

    An odd ``n_samples`` gives the lower moon one point more.
    """
    _check_n(n_samples, 2)
    _check_noise(noise)
    rng = _rng(seed)
    n_upper = n_samples // 2
    n_lower = n_samples - n_upper
    X = [[math.cos(t), math.sin(t)] for t in _linspace(0.0, math.pi, n_upper)]
    X += [[1.0 - math.cos(t), 0.5 - math.sin(t)] for t in _linspace(0.0, math.pi, n_lower)]
    y = [0] * n_upper + [1] * n_lower
    return _finish(X, y, noise, shuffle, rng)


def make_circles(
    n_samples: int = 100,
    *,
    factor: float = 0.8,
    noise: float = 0.0,
    shuffle: bool = True,
    seed: int | random.Random | None = None,
) -> tuple[Points, Labels]:
    """A unit circle (class 0) around a smaller one of radius ``factor``
    (class 1), points evenly spaced on each, plus Gaussian ``noise``.

    An odd ``n_samples`` gives the inner circle one point more.
    """
    _check_n(n_samples, 2)
    _check_noise(noise)
    if not 0.0 <= factor < 1.0:
        raise ValueError(f"factor must be in [0, 1), got {factor!r}")
    rng = _rng(seed)
    n_outer = n_samples // 2
    n_inner = n_samples - n_outer
    X = [[math.cos(t), math.sin(t)] for t in _linspace(0.0, 2 * math.pi, n_outer, False)]
    X += [
        [factor * math.cos(t), factor * math.sin(t)]
        for t in _linspace(0.0, 2 * math.pi, n_inner, False)
    ]
    y = [0] * n_outer + [1] * n_inner
    return _finish(X, y, noise, shuffle, rng)


def make_blobs(
    n_samples: int = 100,
    *,
    centers: int | list[list[float]] = 3,
    n_features: int = 2,
    cluster_std: float = 1.0,
    center_box: tuple[float, float] = (-10.0, 10.0),
    shuffle: bool = True,
    seed: int | random.Random | None = None,
) -> tuple[Points, Labels]:
    """Gaussian clusters: ``centers`` is a number of clusters (their centres
    drawn uniformly from ``center_box`` in every coordinate) or a list of
    centre points; each point's label is its cluster's index. The points
    are shared out evenly, the first clusters taking one more when
    ``n_samples`` does not divide.
    """
    _check_n(n_samples)
    if not cluster_std >= 0.0:
        raise ValueError(f"cluster_std must be >= 0, got {cluster_std!r}")
    rng = _rng(seed)
    if isinstance(centers, bool):
        raise ValueError("make_blobs: centers must be a count or a list of points")
    if isinstance(centers, int):
        if centers < 1 or n_features < 1:
            raise ValueError("make_blobs: centers and n_features must be >= 1")
        low, high = center_box
        points = [[rng.uniform(low, high) for _ in range(n_features)] for _ in range(centers)]
    else:
        points = [[float(c) for c in centre] for centre in centers]
        if not points or len({len(c) for c in points}) != 1 or not points[0]:
            raise ValueError("make_blobs: centers must be non-empty points of one dimension")
    k = len(points)
    X: Points = []
    y: Labels = []
    for label, centre in enumerate(points):
        count = n_samples // k + (1 if label < n_samples % k else 0)
        for _ in range(count):
            X.append([c + rng.gauss(0.0, cluster_std) for c in centre])
            y.append(label)
    return _finish(X, y, 0.0, shuffle, rng)


class DatasetError(ValueError):
    """A data file that cannot be used: missing, empty, binary, unreadable."""


def _open_without_waiting(path: Path) -> BinaryIO:
    """``open(path, "rb")``, except that a FIFO nobody writes to reads as
    empty instead of blocking the open forever; one with a writer (``--data
    <(command)``) is read as it comes."""
    nonblock = getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, os.O_RDONLY | nonblock | getattr(os, "O_BINARY", 0))
    try:
        import fcntl  # POSIX, as O_NONBLOCK

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~nonblock)
    except ImportError:
        pass
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_bytes(
    path: str | os.PathLike[str], *, max_bytes: int | None = None, kind: str = "text file"
) -> bytes:
    """The bytes of the file at ``path``, at most ``max_bytes`` of them.

    Raises :class:`DatasetError` with a one-line reason when the file is
    missing, a directory (``kind`` names what was expected), unreadable or
    longer than ``max_bytes`` (then only ``max_bytes + 1`` bytes are read:
    ``/dev/zero`` or a pipe cannot exhaust memory).
    """
    p = Path(path)
    try:
        with _open_without_waiting(p) as f:
            raw = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except FileNotFoundError:
        raise DatasetError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise DatasetError(f"{p}: is a directory, not a {kind}") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        raise DatasetError(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise DatasetError(f"{p}: larger than the limit of {max_bytes:,} bytes")
    return raw


def load_lines(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped: one document per
    line (a name, a sentence, ...).

    Raises :class:`DatasetError` with a one-line reason when the file is
    missing, not a file, empty (or only blank lines), binary / not UTF-8,
    or longer than ``max_bytes`` (:func:`read_bytes`).
    """
    p = Path(path)
    raw = read_bytes(p, max_bytes=max_bytes)
    if b"\x00" in raw:
        raise DatasetError(f"{p}: looks binary (contains NUL bytes), expected a text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DatasetError(
            f"{p}: not UTF-8 text (bad byte at offset {e.start}), expected a text file"
        ) from None
    lines = [line.strip() for line in text.splitlines()]
    docs = [line for line in lines if line]
    if not docs:
        raise DatasetError(f"{p}: is empty, expected one document per line")
    return docs
