"""The Tensor engine's fast kernels compute exactly what their plain
NumPy definitions compute (speed is measured in ``chainrule bench``)."""

from __future__ import annotations

import numpy as np
import pytest

from chainrule.tensor import blas
from chainrule.tensor.elementwise import threshold_backward


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threshold_backward_is_a_select(dtype: type) -> None:
    """g where out > 0, 0 where out <= 0, a nan out passing g and an inf or
    nan g dropped where out <= 0 (PyTorch's threshold_backward)."""
    rng = np.random.default_rng(0)
    out = np.maximum(rng.standard_normal((64, 33)), 0.0).astype(dtype)
    g = rng.standard_normal((64, 33)).astype(dtype)
    out[0, :4] = [np.nan, -np.nan, 0.0, -0.0]
    g[1, :4] = [np.inf, np.nan, -np.inf, np.nan]
    out[1, :4] = [0.0, 0.0, 1.0, 2.0]
    expected = np.where(out <= 0.0, dtype(0.0), g)
    got = threshold_backward(g, out)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    # a read-only broadcast gradient (from sum's VJP) and a strided one
    ones = np.broadcast_to(dtype(1.0), out.shape)
    np.testing.assert_array_equal(threshold_backward(ones, out), np.where(out <= 0, 0, ones))
    np.testing.assert_array_equal(threshold_backward(g[:, ::2], out[:, ::2]), expected[:, ::2])
    # mixed dtypes fall back to the plain select
    mixed = threshold_backward(g.astype(np.float64), out.astype(np.float32))
    np.testing.assert_array_equal(mixed, np.where(out <= 0, 0.0, g.astype(np.float64)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threshold_backward_in_row_blocks_and_over_g(
    monkeypatch: pytest.MonkeyPatch, dtype: type
) -> None:
    """The C-ordered select row block by row block (blocks of 3 rows, the
    last one short) is the plain select; with overwrite it is written over
    g, and a read-only g is never written."""
    from chainrule import threads as engine_threads
    from chainrule.tensor import elementwise

    rng = np.random.default_rng(1)
    out = np.maximum(rng.standard_normal((10, 2, 7)), 0.0).astype(dtype)
    g = rng.standard_normal((10, 2, 7)).astype(dtype)
    g[2, 0, :3] = [np.inf, np.nan, -np.inf]
    out[3, 1, :2] = [np.nan, -0.0]
    expected = np.where(out <= 0.0, dtype(0.0), g)
    monkeypatch.setattr(elementwise, "SELECT_BLOCK_BYTES", 3 * g[:1].nbytes)
    monkeypatch.setattr(elementwise, "SPLIT_ELEMENTWISE_BYTES", 1)
    for threads in (1, 2):
        engine_threads.set_num_threads(threads)
        np.testing.assert_array_equal(threshold_backward(g, out), expected)
        mine = g.copy()
        got = threshold_backward(mine, out, overwrite=True)
        assert np.shares_memory(got, mine)
        np.testing.assert_array_equal(got, expected)
        frozen = g.copy()
        frozen.setflags(write=False)
        np.testing.assert_array_equal(threshold_backward(frozen, out, overwrite=True), expected)
        np.testing.assert_array_equal(frozen, g)
    engine_threads.reset_num_threads()


@pytest.mark.parametrize(
    "shapes",
    [((3, 4), (4, 5)), ((600, 64), (64, 64)), ((4, 70, 32), (4, 32, 70)), ((300, 50), (50,))],
)
def test_blas_matmul_is_matmul_and_restores_the_threads(shapes: tuple) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = threadpoolctl.threadpool_info()
        np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-13, atol=1e-13)
        assert threadpoolctl.threadpool_info() == before
