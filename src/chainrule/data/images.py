"""Images to classify: the UCI handwritten digits, or a user's ``.npz``.

The digits are the "Optical Recognition of Handwritten Digits" test set of
the UCI Machine Learning Repository (E. Alpaydin and C. Kaynak, 1998):
1,797 images of 8 x 8 pixels, each pixel the count (0-16) of ink pixels in
a 4 x 4 block of a 32 x 32 bitmap, written by 43 people. scikit-learn
ships them inside its package (``sklearn.datasets.load_digits``), so
nothing is downloaded: install the ``data`` extra (``pip install
'chainrule[data]'``).

A ``.npz`` of one's own holds ``images`` ``(N, H, W)`` or ``(N, C, H, W)``
(any real numbers) and ``labels`` ``(N,)`` (integers from 0). Either way the
pixels are scaled by the largest magnitude, to ``[-1, 1]``, and the classes
are ``0 .. max(labels)``.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from . import DatasetError, read_bytes

#: The install line printed when scikit-learn is missing.
DATA_HINT = "pip install 'chainrule[data]' (scikit-learn, which ships the digits)"

#: Limits on a user's file: bytes read, images, classes, pixels per image.
MAX_NPZ_BYTES = 256 * 2**20
MAX_CLASSES = 1000
MAX_PIXELS = 512 * 512


class MissingExtra(ImportError):
    """The optional package a dataset needs is not installed."""


@dataclass(frozen=True)
class ImageSet:
    """Images ``(N, C, H, W)`` (float64, scaled to ``[-1, 1]``), their
    integer labels ``(N,)``, the number of classes and where they came from."""

    images: np.ndarray
    labels: np.ndarray
    classes: int
    source: str

    def fingerprint(self) -> str:
        """The SHA-256 of the pixels and labels: a checkpoint records it, so
        a resumed run is refused other data."""
        h = hashlib.sha256()
        h.update(repr(self.images.shape).encode())
        h.update(np.ascontiguousarray(self.images).tobytes())
        h.update(np.ascontiguousarray(self.labels, dtype=np.int64).tobytes())
        return h.hexdigest()


def load_digits() -> ImageSet:
    """The 1,797 UCI handwritten digits, ``(1797, 1, 8, 8)``, 10 classes,
    read from scikit-learn's copy (no network). Raises :class:`MissingExtra`
    (with the install line) without scikit-learn."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise MissingExtra(f"the digits need scikit-learn: {DATA_HINT}") from None
    digits = sklearn_digits()
    images = np.asarray(digits.images, dtype=np.float64)[:, None, :, :] / 16.0
    labels = np.asarray(digits.target, dtype=np.int64)
    return ImageSet(images, labels, 10, "UCI handwritten digits (scikit-learn)")


def load_npz(path: str | os.PathLike[str], *, max_bytes: int = MAX_NPZ_BYTES) -> ImageSet:
    """A user's images and labels from a NumPy ``.npz`` (``numpy.savez``)
    with arrays ``images`` and ``labels``; nothing in it is unpickled.

    Raises :class:`~chainrule.data.DatasetError` with a one-line reason for
    a missing, oversized or damaged file, a missing array, and arrays of
    the wrong kind or shape.
    """
    raw = read_bytes(path, max_bytes=max_bytes, kind=".npz file")
    where = str(path)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
            missing = [k for k in ("images", "labels") if k not in archive.files]
            if missing:
                found = ", ".join(archive.files) or "nothing"
                raise DatasetError(f"{where}: needs arrays 'images' and 'labels'; it has {found}")
            images, labels = archive["images"], archive["labels"]
    except DatasetError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise DatasetError(f"{where}: not a NumPy .npz of arrays ({reason})") from None
    return _checked(images, labels, where)


def _checked(images: np.ndarray, labels: np.ndarray, where: str) -> ImageSet:
    if images.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: images must be numbers, got {images.dtype}")
    if images.ndim == 3:
        images = images[:, None]
    if images.ndim != 4:
        raise DatasetError(
            f"{where}: images must be (N, H, W) or (N, C, H, W), got shape {images.shape}"
        )
    n, c, h, w = images.shape
    if h < 4 or w < 4 or h * w * c > MAX_PIXELS:
        raise DatasetError(
            f"{where}: images of {c} x {h} x {w}; need at least 4 x 4 pixels "
            f"(two 2 x 2 poolings) and at most {MAX_PIXELS:,} values each"
        )
    if labels.dtype.kind not in "biu" or labels.shape != (n,):
        raise DatasetError(
            f"{where}: labels must be {n} integers, one per image; got {labels.dtype} "
            f"of shape {labels.shape}"
        )
    if n < 10:
        raise DatasetError(f"{where}: {n} images; need at least 10 to hold some out")
    if labels.min() < 0:
        raise DatasetError(f"{where}: labels must be 0 or more, found {labels.min()}")
    classes = int(labels.max()) + 1
    if not 2 <= classes <= MAX_CLASSES:
        raise DatasetError(f"{where}: {classes} classes; need 2 to {MAX_CLASSES}")
    pixels = images.astype(np.float64)
    if not np.isfinite(pixels).all():
        raise DatasetError(f"{where}: images hold inf or nan")
    scale = float(np.abs(pixels).max())
    if scale > 0:
        pixels /= scale
    return ImageSet(pixels, labels.astype(np.int64), classes, where)


def split(n: int, held_out: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a fixed, seeded split of ``n`` items: training, then the
    held-out fraction (at least one of each)."""
    order = np.random.default_rng(seed).permutation(n)
    n_held = min(max(1, round(held_out * n)), n - 1)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


__all__ = [
    "DATA_HINT",
    "ImageSet",
    "MissingExtra",
    "load_digits",
    "load_npz",
    "split",
]
