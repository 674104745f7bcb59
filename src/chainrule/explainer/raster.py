"""A decision-boundary picture with the standard library only.

matplotlib draws the nicer figure (the ``plot`` extra); without it,
``chainrule moons`` still writes a PNG: the model's two regions, the
boundary between them and the points, rasterised here and encoded with
``zlib``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

RGB = tuple[int, int, int]

NEGATIVE_REGION: RGB = (246, 195, 195)
POSITIVE_REGION: RGB = (195, 215, 246)
BOUNDARY: RGB = (0, 0, 0)
NEGATIVE_POINT: RGB = (192, 57, 43)
POSITIVE_POINT: RGB = (33, 85, 166)


def encode_png(pixels: Sequence[Sequence[RGB]]) -> bytes:
    """PNG bytes of an image given as rows of (r, g, b) tuples (8-bit RGB)."""
    height, width = len(pixels), len(pixels[0])

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    # Each scanline starts with filter type 0 (none).
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def decision_boundary_png(
    score: Callable[[float, float], float],
    points: Sequence[Sequence[float]],
    labels: Sequence[int],
    path: Path,
    size: int = 400,
    grid: int = 100,
) -> None:
    """Write the regions ``score > 0`` / ``score <= 0`` and the points.

    ``score`` is evaluated on a ``grid`` x ``grid`` lattice, and each
    lattice cell is drawn as a block of ``size / grid`` pixels.
    """
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs) - 0.5, max(xs) + 0.5
    y0, y1 = min(ys) - 0.5, max(ys) + 0.5
    # Row 0 is the top of the picture: largest y first.
    signs = [
        [
            score(x0 + (x1 - x0) * (i + 0.5) / grid, y1 - (y1 - y0) * (j + 0.5) / grid) > 0.0
            for i in range(grid)
        ]
        for j in range(grid)
    ]
    cell = max(1, size // grid)
    side = cell * grid
    pixels = [
        [POSITIVE_REGION if signs[r // cell][c // cell] else NEGATIVE_REGION for c in range(side)]
        for r in range(side)
    ]
    for j in range(grid):
        for i in range(grid):
            right = i + 1 < grid and signs[j][i] != signs[j][i + 1]
            below = j + 1 < grid and signs[j][i] != signs[j + 1][i]
            if right or below:
                pixels[j * cell + cell - 1][i * cell + cell - 1] = BOUNDARY
                if right:
                    for r in range(cell):
                        pixels[j * cell + r][i * cell + cell - 1] = BOUNDARY
                if below:
                    for c in range(cell):
                        pixels[j * cell + cell - 1][i * cell + c] = BOUNDARY
    radius = max(2, side // 120)
    for (px, py), label in zip(points, labels):
        cx = int((px - x0) / (x1 - x0) * side)
        cy = int((y1 - py) / (y1 - y0) * side)
        color = POSITIVE_POINT if label > 0 else NEGATIVE_POINT
        for r in range(max(0, cy - radius - 1), min(side, cy + radius + 2)):
            for c in range(max(0, cx - radius - 1), min(side, cx + radius + 2)):
                d2 = (r - cy) ** 2 + (c - cx) ** 2
                if d2 <= radius * radius:
                    pixels[r][c] = color
                elif d2 <= (radius + 1) ** 2:
                    pixels[r][c] = BOUNDARY
    Path(path).write_bytes(encode_png(pixels))
