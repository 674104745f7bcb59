"""The Tensor engine on several threads: ``chainrule.set_num_threads``, the
split of stacked products by batch (bit for bit the one-thread products),
and a product's routing that does not depend on the machine's load. Speed
is measured in ``chainrule bench``, not here."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import threads
from chainrule.tensor import Tensor, blas, nn_ops


@pytest.fixture(autouse=True)
def _default_threads() -> Iterator[None]:
    threads.reset_num_threads()
    yield
    threads.reset_num_threads()


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stack of two or more products, and every attention's softmax,
    split (tiny sizes in tests)."""
    monkeypatch.setattr(blas, "SPLIT_WORK", 1)
    monkeypatch.setattr(nn_ops, "SPLIT_SCORE_BYTES", 1)


def _count_parts(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> list[int]:
    """The thread counts ``run_parts`` is called with, through ``modules``'
    reference to it, in a list that grows as they are called."""
    calls: list[int] = []
    split = blas.run_parts

    def counted(rows: int, threads: int, part: Any) -> None:
        calls.append(threads)
        split(rows, threads, part)

    for module in modules:
        monkeypatch.setattr(module, "run_parts", counted)
    return calls


# ----------------------------------------------------------------------------
# set_num_threads / get_num_threads
# ----------------------------------------------------------------------------


def test_set_num_threads_is_what_get_num_threads_gives() -> None:
    chainrule.set_num_threads(3)
    assert chainrule.get_num_threads() == 3
    chainrule.set_num_threads(1)
    assert chainrule.get_num_threads() == 1


@pytest.mark.parametrize("bad,error", [(0, ValueError), (-2, ValueError), (2.0, TypeError),
                                       (True, TypeError), ("2", TypeError)])  # fmt: skip
def test_set_num_threads_checks_its_argument(bad: Any, error: type) -> None:
    with pytest.raises(error, match="set_num_threads"):
        chainrule.set_num_threads(bad)
    assert threads._state.requested is None


def test_the_default_follows_threadpoolctls_limit_of_numpys_blas() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if blas.blas_threads() is None:
        pytest.skip("threadpoolctl cannot drive NumPy's BLAS here")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert chainrule.get_num_threads() == 1
    chainrule.set_num_threads(2)  # an explicit count wins over BLAS's
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert chainrule.get_num_threads() == 2


@pytest.mark.parametrize("env,expected", [("3", 3), ("4,2", 4), ("0", None), ("x", None)])
def test_without_threadpoolctl_the_default_is_omp_num_threads_or_the_cpus(
    monkeypatch: pytest.MonkeyPatch, env: str, expected: int | None
) -> None:
    monkeypatch.setattr(threads._state, "blas_threads", None)
    monkeypatch.setenv("OMP_NUM_THREADS", env)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 6)
    assert chainrule.get_num_threads() == (expected or 6)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert chainrule.get_num_threads() == 6


# ----------------------------------------------------------------------------
# the split: the same products
# ----------------------------------------------------------------------------


def _one_thread(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    chainrule.set_num_threads(1)
    try:
        return blas.matmul(a, b)
    finally:
        threads.reset_num_threads()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_threads", [2, 3])
def test_split_attention_products_are_the_one_thread_products_bit_for_bit(
    dtype: type, n_threads: int
) -> None:
    """q @ k^T, weights @ v and the backward's products of a (B, H, T, d)
    attention, from the (B, T, H, d) layout the GPT makes them in."""
    rng = np.random.default_rng(0)
    B, H, T, d = 5, 8, 128, 32  # 5 rows over 2 or 3 threads: uneven parts
    q, k, v = (rng.standard_normal((B, T, H, d)).astype(dtype).transpose(0, 2, 1, 3)
               for _ in range(3))  # fmt: skip
    s = np.ascontiguousarray(rng.standard_normal((B, H, T, T)).astype(dtype))
    pairs = [(q, k.swapaxes(-1, -2)), (s, v), (s.swapaxes(-1, -2), q), (s, k)]
    chainrule.set_num_threads(n_threads)
    for a, b in pairs:
        stack = blas._stack(a, b)
        assert stack is not None and stack[0] == (B, H)
        assert stack[1] * B * H >= blas.SPLIT_WORK  # large enough to be split
        got = blas.matmul(a, b)
        assert got.dtype == dtype and got.shape == (a @ b).shape
        assert np.array_equal(got, _one_thread(a, b))
        # (not a @ b on BLAS's threads: OpenBLAS on two threads may round
        # a product of this size differently from one thread)
        assert np.array_equal(blas.split_matmul(a, b, (B, H), n_threads), got)
        chainrule.set_num_threads(n_threads)


@pytest.mark.parametrize(
    "shapes",
    [
        ((6, 10, 7), (7, 9)),  # a stack times one matrix
        ((10, 7), (6, 7, 9)),  # one matrix times a stack
        ((6, 3, 10, 7), (1, 3, 7, 9)),  # broadcast along the split axis
        ((1, 3, 10, 7), (6, 3, 7, 9)),
        ((6, 10, 7), (7,)),  # a stack of matrix-vector products
        ((2, 10, 7), (2, 7, 9)),
    ],
)
def test_split_broadcasting_stacks_are_numpys_products(
    split_everything: None, shapes: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    chainrule.set_num_threads(2)
    assert np.array_equal(blas.matmul(a, b), a @ b)
    assert np.array_equal(blas.matmul(a, b), _one_thread(a, b))


def test_the_parts_run_on_the_pool_and_the_blas_threads_come_back(
    monkeypatch: pytest.MonkeyPatch, split_everything: None
) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen: list[str] = []
    rows = blas._rows

    def record(x: np.ndarray, batch_ndim: int, lo: int, hi: int) -> np.ndarray:
        seen.append(threading.current_thread().name)
        return rows(x, batch_ndim, lo, hi)

    monkeypatch.setattr(blas, "_rows", record)
    a = np.arange(4 * 3 * 5, dtype=np.float64).reshape(4, 3, 5)
    chainrule.set_num_threads(3)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = threadpoolctl.threadpool_info()
        assert np.array_equal(blas.matmul(a, a.swapaxes(-1, -2)), a @ a.swapaxes(-1, -2))
        assert threadpoolctl.threadpool_info() == before
    # three parts (rows 0, 1-2, 3; each operand's part read once): the
    # caller's and two on the pool's workers
    caller = threading.current_thread().name
    assert len(seen) == 6 and seen.count(caller) == 2
    assert all(name.startswith("chainrule") for name in seen if name != caller)


def test_one_thread_or_a_small_stack_is_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> np.ndarray:
        raise AssertionError("split")

    monkeypatch.setattr(blas, "split_matmul", refuse)
    rng = np.random.default_rng(2)
    big = rng.standard_normal((8, 4, 64, 64))
    chainrule.set_num_threads(1)
    assert np.array_equal(blas.matmul(big, big), big @ big)  # one thread: never
    chainrule.set_num_threads(2)
    small = big[:, :, :8, :8]  # 8 * 4 * 512 multiply-adds: below SPLIT_WORK
    assert np.array_equal(blas.matmul(small, small), small @ small)
    ints = np.ones((8, 4, 64, 64), dtype=np.int64)  # not BLAS: NumPy's own loop
    assert np.array_equal(blas.matmul(ints, ints), ints @ ints)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_splits_on_a_pool_of_its_own(split_everything: None) -> None:
    """The parent's pool threads do not exist in a forked child; a split
    there makes its own pool instead of waiting for them forever."""
    import multiprocessing

    chainrule.set_num_threads(2)
    a = np.arange(4 * 3 * 5, dtype=np.float64).reshape(4, 3, 5)
    expected = a @ a.swapaxes(-1, -2)
    assert np.array_equal(blas.matmul(a, a.swapaxes(-1, -2)), expected)  # the parent's pool
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(blas.matmul, (a, a.swapaxes(-1, -2))).get(timeout=60)
    assert np.array_equal(got, expected)


def test_an_error_in_a_part_reaches_the_caller(split_everything: None) -> None:
    chainrule.set_num_threads(2)
    with pytest.raises(ValueError):
        blas.matmul(np.ones((4, 3, 5)), np.ones((4, 6, 2)))  # 5 columns against 6 rows


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    ts = [Tensor(x, requires_grad=True) for x in (q, k, v)]
    out = nn_ops.attention(*ts, causal=True)
    out.backward(g)
    return [out.data] + [t.grad for t in ts]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("underflow", [False, True])
def test_split_attention_is_the_one_thread_attention_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, dtype: type, underflow: bool
) -> None:
    """Its output and the gradients of q, k and v, with the attention
    (scores, softmax, products, and the backward pass) done per part of the
    batch on two threads (scores of 512 KB and more; every size in
    float32). A row far below the others needs its own shift: its batch
    entry gets one per row, whichever part it is in."""
    if dtype == np.float32:
        monkeypatch.setattr(nn_ops, "SPLIT_SCORE_BYTES", 1)
    calls = _count_parts(monkeypatch, nn_ops)
    rng = np.random.default_rng(3)
    B, H, T, d = 4, 8, 128, 32
    q, k, v = (rng.standard_normal((B, T, H, d)).astype(dtype).transpose(0, 2, 1, 3)
               for _ in range(3))  # fmt: skip
    if underflow:
        q[1, 2, 5] *= 1e4  # one query's scores spread far: exp underflows against the global max
    g = rng.standard_normal((B, H, T, d)).astype(dtype)
    if dtype == np.float64:
        assert B * H * T * T * 8 >= nn_ops.SPLIT_SCORE_BYTES
    chainrule.set_num_threads(1)
    one = _attention(q, k, v, g)
    assert calls == [1, 1]
    chainrule.set_num_threads(2)
    two = _attention(q, k, v, g)
    assert calls == [1, 1, 2, 2]  # forward and backward, one hand-off each
    for a, b in zip(one, two):
        assert a.dtype == dtype and np.array_equal(a, b)
    assert np.isfinite(two[0]).all()
    softmax = nn_ops.softmax(
        Tensor(np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d))
        + nn_ops._additive_mask(T, T, np.dtype(dtype))
    ).data
    reference = np.einsum("bhqk,bhkd->bhqd", softmax, v)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(two[0], reference, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_softmax_shifts_an_entry_by_rows_only_when_a_row_lies_far_below(
    dtype: type,
) -> None:
    """The attention's softmax (nn_ops._softmax_entries) of causal scores:
    entry 0 shifted by its heads' maxima, entry 1 (a row 40 below the rest)
    and entry 2 (an inf) row by row; each equal to a softmax shifted per
    row, each entry the same alone as in the stack."""
    rng = np.random.default_rng(5)
    T = 16
    s = rng.standard_normal((3, 2, T, T)).astype(dtype)
    s[1, 1, 3] -= 40.0
    s[2, 0, 7, 2] = np.inf
    s += nn_ops._additive_mask(T, T, np.dtype(dtype))
    with np.errstate(invalid="ignore"):
        shifted = s - s.max(axis=-1, keepdims=True)
        expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    got = s.copy()
    nn_ops._softmax_entries(got, 0)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got[:2], expected[:2], rtol=tol, atol=tol)
    assert np.isnan(got[2, 0, 7]).all() and np.isfinite(np.delete(got[2], 0, axis=0)).all()
    np.testing.assert_allclose(got[2, 1], expected[2, 1], rtol=tol, atol=tol)
    for b in range(3):
        alone = s[b : b + 1].copy()
        nn_ops._softmax_entries(alone, 0)
        np.testing.assert_array_equal(alone[0], got[b])


# ----------------------------------------------------------------------------
# the machine's load does not change what a product does
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("load", [0.0, 50.0])
def test_a_big_product_gets_the_engines_threads_whatever_the_load(
    monkeypatch: pytest.MonkeyPatch, load: float
) -> None:
    calls: list[tuple[int, ...]] = []

    def record(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        calls.append(a.shape)
        return a @ b

    monkeypatch.setattr(blas, "_single_threaded", record)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    chainrule.set_num_threads(2)
    n = 256  # 256^3 multiply-adds: blas.MULTITHREAD_WORK
    big = np.ones((n, n))
    np.testing.assert_array_equal(blas.matmul(big, big), np.full((n, n), float(n)))
    assert calls == []
    small = np.ones((100, 64))
    blas.matmul(small, small.T)  # 640,000 multiply-adds: OpenBLAS would thread it
    assert calls == [(100, 64)]


# ----------------------------------------------------------------------------
# a whole step: the same losses and gradients on 1 and 2 threads
# ----------------------------------------------------------------------------


def _gpt_step(dtype: str) -> tuple[float, dict[str, np.ndarray]]:
    from chainrule.bench import TINY
    from chainrule.bench.batched_gpt import sweep_problem, tensor_step

    step = tensor_step(sweep_problem(TINY.gpt_sweep[2], 8), dtype)  # 128/4/4, block and batch 8
    _, loss = step.model(step.x, step.y)
    loss.backward()
    return float(loss.item()), {n: p.grad.copy() for n, p in step.model.named_parameters()}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gpt_step_on_two_threads_is_the_one_thread_step_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    calls = _count_parts(monkeypatch, nn_ops)
    monkeypatch.setattr(blas, "SPLIT_WORK", 1)
    monkeypatch.setattr(nn_ops, "SPLIT_SCORE_BYTES", 1)
    # single products on BLAS's threads may round differently, as in any BLAS
    monkeypatch.setattr(blas, "MULTITHREAD_WORK", 1 << 60)
    chainrule.set_num_threads(1)
    loss1, grads1 = _gpt_step(dtype)
    assert set(calls) <= {1}
    chainrule.set_num_threads(2)
    loss2, grads2 = _gpt_step(dtype)
    assert calls.count(2) >= 4 * 2  # per layer: the attention forward and backward, split
    assert loss1 == loss2
    assert grads1.keys() == grads2.keys()
    for name in grads1:
        assert np.array_equal(grads1[name], grads2[name]), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_split_gpt_step_is_pytorchs(
    torch: Any, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    """Two Adam steps with every stack split, against PyTorch float32/float64
    (the benchmark's tolerances)."""
    from chainrule.bench import TINY
    from chainrule.bench.batched_gpt import sweep_problem, tensor_step, torch_step

    monkeypatch.setattr(blas, "SPLIT_WORK", 1)
    monkeypatch.setattr(nn_ops, "SPLIT_SCORE_BYTES", 1)
    chainrule.set_num_threads(2)
    problem = sweep_problem(TINY.gpt_sweep[3], 8)  # 256/8/4, block and batch 8
    ours, theirs = tensor_step(problem, dtype), torch_step(problem, dtype)
    rtol = 1e-12 if dtype == "float64" else 1e-5
    for _ in range(2):
        a, b = ours(), theirs()
        assert abs(a - b) <= rtol * abs(b), (a, b)


# ----------------------------------------------------------------------------
# a linear layer's gradient pair, a large product cut by rows, Adam's update
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_pair_of_products_is_the_one_thread_pair_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, dtype: Any
) -> None:
    parts: list[int] = []
    run_parts = blas.run_parts

    def counted(rows: int, n: int, part: Any) -> None:
        parts.append(rows)
        run_parts(rows, n, part)

    monkeypatch.setattr(blas, "run_parts", counted)
    monkeypatch.setattr(blas, "POOL_WORK", 1 << 22)
    rng = np.random.default_rng(0)
    g, w, x = (rng.standard_normal(s).astype(dtype) for s in [(512, 128), (128, 80), (512, 80)])
    chainrule.set_num_threads(1)
    one = blas.matmul_pair(g, w, g.T, x)
    assert parts == []
    chainrule.set_num_threads(2)
    two = blas.matmul_pair(g, w, g.T, x)  # 5.2 million multiply-adds each: over POOL_WORK
    assert parts == [2]
    for a, b in zip(one, two):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)


def test_a_large_product_is_cut_by_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    cuts: list[tuple[int, ...]] = []
    split_rows = blas.split_rows

    def counted(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
        cuts.append(a.shape)
        return split_rows(a, b, n)

    monkeypatch.setattr(blas, "split_rows", counted)
    monkeypatch.setattr(blas, "MULTITHREAD_WORK", 1 << 19)
    monkeypatch.setattr(blas, "POOL_WORK", 1 << 19)
    monkeypatch.setattr(blas, "MIN_THREADED_SIDE", 1)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((300, 70)), rng.standard_normal((70, 50))
    chainrule.set_num_threads(3)
    # (sums of 70 products of size 1: a cut's kernel may round them otherwise,
    # by ~1e-15 absolute, which is far from 1e-12 relative next to 0)
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blas.matmul(b.T, a.T), b.T @ a.T, rtol=1e-12, atol=1e-12)
    assert cuts == [(300, 70)]  # 50 rows are too few to cut in 3
    chainrule.set_num_threads(1)
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)  # not cut
    assert cuts == [(300, 70)]


def test_adam_on_threads_is_the_one_thread_update_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chainrule import optim

    monkeypatch.setattr(optim, "SPLIT_PARAMETER_BYTES", 1)
    rng = np.random.default_rng(2)
    shapes = [(40, 30), (7,), (30, 30), (5, 3, 2)]
    data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    results = []
    for n in (1, 2, 3):
        chainrule.set_num_threads(n)
        params = [Tensor(d.copy()) for d in data]
        adam = optim.Adam(params, lr=0.01)
        for step in grads:
            for p, g in zip(params[:-1], step):  # the last gets no gradient
                p.grad = g
            adam.step()
        results.append([p.data for p in params])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][-1], data[-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_and_its_backward_on_threads_are_the_one_thread_ones(
    monkeypatch: pytest.MonkeyPatch, dtype: Any
) -> None:
    from chainrule.tensor import elementwise

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4, 3)).astype(dtype)
    x[0, 0, :] = [np.nan, np.inf, -np.inf]
    g = rng.standard_normal(x.shape).astype(dtype)
    g[1, 1, :] = [np.nan, np.inf, -np.inf]
    results = []
    for n, min_bytes in ((1, 1 << 30), (2, 1), (3, 1)):
        chainrule.set_num_threads(n)
        monkeypatch.setattr(elementwise, "SPLIT_ELEMENTWISE_BYTES", min_bytes)
        t = Tensor(x.copy())
        y = t.relu()
        y.backward(g)
        results.append((y.data, t.grad))
    for y, grad in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        np.testing.assert_array_equal(grad, results[0][1])
    np.testing.assert_array_equal(results[0][0], np.maximum(x, 0.0))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_feed_forward_is_its_three_nodes_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, n_threads: int
) -> None:
    """One node, each thread its rows through fc1, the ReLU and fc2 (every
    product cut by rows here): the numbers of fc2(relu(fc1(x)))."""
    from chainrule.tensor import feed_forward
    from chainrule.tensor.nn import FeedForward

    monkeypatch.setattr(blas, "POOL_WORK", 1)
    monkeypatch.setattr(blas, "MULTITHREAD_WORK", 1)
    monkeypatch.setattr(blas, "MIN_THREADED_SIDE", 1)
    calls = _count_parts(monkeypatch, feed_forward)
    chainrule.set_num_threads(n_threads)
    rng = np.random.default_rng(12)
    ff = FeedForward(32, rng=rng, dtype=np.float32)  # products of a million multiply-adds
    x = rng.normal(size=(4, 64, 32)).astype(np.float32)
    x[0, 0] = -1.0  # a row all zeros after the ReLU
    g = rng.normal(size=(4, 64, 32)).astype(np.float32)
    results = []
    for fused in (True, False):
        xt = Tensor(x, requires_grad=True)
        y = ff(xt) if fused else ff.fc2(ff.fc1(xt).relu())
        assert (y._vjp is feed_forward._feed_forward_vjp) == fused
        y.backward(g)
        results.append([y.data, xt.grad, ff.fc1.weight.grad, ff.fc2.weight.grad])
        ff.zero_grad()
    assert calls == ([2] if n_threads == 2 else [])  # the fused forward's one hand-off
    for a, b in zip(*results):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
