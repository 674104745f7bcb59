"""The standard-library PNG: it decodes back to the pixels, and the picture
shows the regions and points where they are."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from chainrule.explainer.raster import (
    BOUNDARY,
    NEGATIVE_POINT,
    NEGATIVE_REGION,
    POSITIVE_POINT,
    POSITIVE_REGION,
    decision_boundary_png,
    encode_png,
)


def decode_png(data: bytes) -> list[list[tuple[int, int, int]]]:
    """A minimal decoder for what encode_png writes (8-bit RGB, filter 0)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert (depth, color) == (8, 2)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = 1 + 3 * width
    rows = []
    for r in range(height):
        line = raw[r * stride : (r + 1) * stride]
        assert line[0] == 0
        rows.append([tuple(line[1 + 3 * c : 4 + 3 * c]) for c in range(width)])
    return rows  # type: ignore[return-value]


def test_encode_png_round_trips() -> None:
    pixels = [[(r * 40, c * 30, 7) for c in range(5)] for r in range(3)]
    assert decode_png(encode_png(pixels)) == pixels


def test_decision_boundary_picture(tmp_path: Path) -> None:
    points = [[-1.0, 0.0], [1.0, 0.0]]
    path = tmp_path / "b.png"
    # positive right of x = 0
    decision_boundary_png(lambda x, y: x, points, [-1, 1], path, size=200, grid=50)
    img = decode_png(path.read_bytes())
    assert len(img) == 200 and len(img[0]) == 200
    # the view spans x in [-1.5, 1.5]: far left negative, far right positive
    assert img[10][5] == NEGATIVE_REGION
    assert img[10][195] == POSITIVE_REGION
    # the boundary runs down the middle column
    assert all(BOUNDARY in row[95:105] for row in img[:150:10])
    # the points sit at 1/6 and 5/6 of the width, halfway down
    assert img[100][33] == NEGATIVE_POINT
    assert img[100][166] == POSITIVE_POINT
