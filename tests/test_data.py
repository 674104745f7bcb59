"""chainrule.data: the generated datasets' geometry and seeding, and the
text-file loader's errors."""

from __future__ import annotations

import doctest
import itertools
import math
import random
import statistics
from pathlib import Path

import pytest

import chainrule.data
from chainrule.data import DatasetError, load_lines, make_blobs, make_circles, make_moons


def test_moons_without_noise_lie_on_their_arcs() -> None:
    X, y = make_moons(101, shuffle=False)
    assert y == [0] * 50 + [1] * 51  # the odd point goes to the lower moon
    for (a, b), label in zip(X, y):
        if label == 0:  # upper half circle around (0, 0)
            assert math.isclose(math.hypot(a, b), 1.0) and b >= -1e-15
        else:  # lower half circle around (1, 0.5)
            assert math.isclose(math.hypot(a - 1.0, b - 0.5), 1.0) and b <= 0.5 + 1e-15
    # evenly spaced from one end of each arc to the other
    assert X[0] == [1.0, 0.0] and X[49][0] == -1.0
    assert X[50] == [0.0, 0.5] and X[100][0] == 2.0


def test_moons_noise_has_the_requested_spread() -> None:
    clean, _ = make_moons(4000, shuffle=False)
    noisy, _ = make_moons(4000, noise=0.1, shuffle=False, seed=3)
    residuals = [n - c for p, q in zip(noisy, clean) for n, c in zip(p, q)]
    assert abs(statistics.fmean(residuals)) < 0.01
    assert statistics.stdev(residuals) == pytest.approx(0.1, rel=0.05)


def test_same_seed_same_data_other_seed_other_data() -> None:
    a = make_moons(50, noise=0.1, seed=1)
    assert make_moons(50, noise=0.1, seed=1) == a
    assert make_moons(50, noise=0.1, seed=2) != a
    assert make_moons(50, noise=0.1, seed=random.Random(1)) == a


def test_shuffle_keeps_points_with_their_labels() -> None:
    X, y = make_moons(40, seed=0)
    assert y != sorted(y)
    clean, labels = make_moons(40, shuffle=False)
    truth = {tuple(p): t for p, t in zip(clean, labels)}
    assert all(truth[tuple(p)] == t for p, t in zip(X, y))


def test_circles_radii() -> None:
    X, y = make_circles(21, factor=0.5, shuffle=False)
    assert y.count(0) == 10 and y.count(1) == 11
    for (a, b), label in zip(X, y):
        assert math.isclose(math.hypot(a, b), 1.0 if label == 0 else 0.5)
    # evenly spaced, the end point left out so no point repeats
    angles = sorted(math.atan2(b, a) % (2 * math.pi) for (a, b), t in zip(X, y) if t == 0)
    assert angles[0] == 0.0
    assert all(math.isclose(q - p, 2 * math.pi / 10) for p, q in itertools.pairwise(angles))


def test_blobs_share_points_out_and_centre_them() -> None:
    X, y = make_blobs(10, centers=3, seed=0)
    assert sorted(y) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    X, y = make_blobs(3000, centers=[[0.0, 0.0], [5.0, -5.0]], cluster_std=0.5, seed=1)
    second = [p for p, t in zip(X, y) if t == 1]
    assert statistics.fmean(p[0] for p in second) == pytest.approx(5.0, abs=0.05)
    assert statistics.stdev(p[1] for p in second) == pytest.approx(0.5, rel=0.05)


def test_blobs_random_centres_lie_in_the_box() -> None:
    X, _ = make_blobs(30, centers=3, n_features=4, cluster_std=0.0, center_box=(2.0, 3.0), seed=0)
    assert all(len(p) == 4 and all(2.0 <= c <= 3.0 for c in p) for p in X)


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_moons(1),
        lambda: make_moons(10, noise=-0.1),
        lambda: make_circles(10, factor=1.0),
        lambda: make_blobs(0),
        lambda: make_blobs(10, centers=[]),
        lambda: make_blobs(10, centers=[[0.0], [1.0, 2.0]]),
    ],
)
def test_bad_arguments_raise_value_error(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_load_lines(tmp_path: Path) -> None:
    path = tmp_path / "names.txt"
    path.write_text("\ufeffemma\n  olivia \n\nava\r\n", encoding="utf-8")
    assert load_lines(path) == ["emma", "olivia", "ava"]
    assert load_lines(str(path)) == ["emma", "olivia", "ava"]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        (b"", "is empty"),
        (b"\n  \n\t\n", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (b"caf\xe9\n", "not UTF-8"),
    ],
)
def test_load_lines_errors(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "docs.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as info:
        load_lines(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_load_lines_on_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="directory"):
        load_lines(tmp_path)


def test_docstring_examples() -> None:
    result = doctest.testmod(chainrule.data)
    assert result.attempted > 0 and result.failed == 0
