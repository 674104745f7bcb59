"""A grid of small labelled images as a PNG, without matplotlib.

``chainrule digits`` draws the held-out images its model got wrong: each
one enlarged, dark ink on white, with ``true>predicted`` written under it in
a 3 x 5 pixel font (the true class in black, the prediction in red). The
pixels are encoded by :func:`chainrule.explainer.raster.encode_png`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .raster import encode_png

#: 3 x 5 glyphs, one string of 15 bits (rows top to bottom) per character.
GLYPHS = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    ">": "100010001010100",
}
INK = (0, 0, 0)
WRONG = (200, 30, 30)
PAPER = (255, 255, 255)
FRAME = (200, 200, 200)


def _text(
    canvas: np.ndarray, top: int, left: int, text: str, color: tuple[int, ...], scale: int
) -> int:
    """Write ``text`` at ``(top, left)``; returns the column after it."""
    for ch in text:
        bits = np.array([int(b) for b in GLYPHS[ch]], dtype=bool).reshape(5, 3)
        block = np.kron(bits, np.ones((scale, scale), dtype=bool))
        h, w = block.shape
        canvas[top : top + h, left : left + w][block] = color
        left += w + scale
    return left


def _shade(image: np.ndarray) -> np.ndarray:
    """An image ``(C, H, W)`` as gray levels, its largest value darkest."""
    gray = image.mean(axis=0)
    lo, hi = float(gray.min()), float(gray.max())
    ink = (gray - lo) / (hi - lo) if hi > lo else np.zeros_like(gray)
    return np.round(255.0 * (1.0 - ink)).astype(np.uint8)


def labelled_grid(
    images: np.ndarray,
    true: Sequence[int],
    predicted: Sequence[int],
    path: str | Path,
    columns: int = 8,
) -> None:
    """Write a PNG of ``images`` ``(n, C, H, W)`` in a grid, each labelled
    ``true>predicted``. At least one image."""
    n, _, H, W = images.shape
    zoom = max(1, 48 // max(H, W))
    font = 2
    label_h = 5 * font + 4
    cell_w = max(W * zoom, 4 * font * (len(str(max(*true, *predicted))) * 2 + 1)) + 8
    cell_h = H * zoom + label_h + 8
    cols = min(columns, n)
    rows = -(-n // cols)
    canvas = np.full((rows * cell_h, cols * cell_w, 3), PAPER, dtype=np.uint8)
    for k in range(n):
        top, left = (k // cols) * cell_h + 4, (k % cols) * cell_w + 4
        tile = np.kron(_shade(images[k]), np.ones((zoom, zoom), dtype=np.uint8))
        canvas[top : top + H * zoom, left : left + W * zoom] = tile[..., None]
        canvas[top - 1, left - 1 : left + W * zoom + 1] = FRAME
        canvas[top + H * zoom, left - 1 : left + W * zoom + 1] = FRAME
        canvas[top - 1 : top + H * zoom + 1, left - 1] = FRAME
        canvas[top - 1 : top + H * zoom + 1, left + W * zoom] = FRAME
        at = _text(canvas, top + H * zoom + 4, left, f"{true[k]}>", INK, font)
        _text(canvas, top + H * zoom + 4, at, str(predicted[k]), WRONG, font)
    Path(path).write_bytes(encode_png(canvas.tolist()))


__all__ = ["labelled_grid"]
