"""The Tensor and PyTorch engines of the benchmark compute what the scalar
engines compute: the same losses and the same parameters after each step
(no timing here)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest

from chainrule.bench import TINY, gpt, moons
from chainrule.bench.batched_gpt import _names_map, names_problem, tensor_step, torch_step
from chainrule.bench.moons import TensorMoonsStep


def test_batch_is_spread_over_the_shipped_names() -> None:
    names = gpt.batch_names(32)
    assert len(names) == len(set(names)) == 32
    assert names[0] == "aaron" and names[-1] > "t"  # from a to the end of the list


def _scalar_parameters(step: gpt.GPTStep) -> dict[str, np.ndarray]:
    names = _names_map(step.config.n_layer)
    return {
        names[k]: np.array([[p.data for p in row] for row in rows])
        for k, rows in step.model.state.items()
    }


def test_tensor_gpt_step_is_the_scalar_step() -> None:
    """Two Adam steps on the same two names: the scalar engine (one name at
    a time) and the Tensor engine (padded batch) agree in float64."""
    scalar = gpt.GPTStep(gpt.FusedOps, gpt.chainrule_adam, gpt.batch_names(TINY.gpt_batch))
    tensor = tensor_step(names_problem(TINY), "float64")
    for _ in range(2):
        assert math.isclose(scalar(), tensor(), rel_tol=1e-12)
    ours = dict(tensor.model.named_parameters())
    for name, value in _scalar_parameters(scalar).items():
        np.testing.assert_allclose(ours[name].data, value, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_gpt_step_is_the_tensor_step(torch: Any, dtype: str) -> None:
    ours, theirs = tensor_step(names_problem(TINY), dtype), torch_step(names_problem(TINY), dtype)
    rtol = 1e-12 if dtype == "float64" else 1e-5
    for _ in range(2):
        assert math.isclose(ours(), theirs(), rel_tol=rtol)
    params = dict(theirs.model.named_parameters())
    for name, p in ours.model.named_parameters():
        assert p.data.dtype == np.dtype(dtype)
        np.testing.assert_allclose(
            p.data, params[name].detach().numpy(), rtol=rtol * 100, atol=1e-6, err_msg=name
        )


def test_tensor_moons_step_is_the_scalar_step() -> None:
    scalar, tensor = moons.ChainruleStep(TINY), TensorMoonsStep(TINY)
    for _ in range(3):
        assert math.isclose(scalar.graph().data, tensor.graph().item(), rel_tol=1e-12)
        scalar()
        tensor()
    flat = np.concatenate(
        [np.concatenate([w.data, b.data[:, None]], axis=1).ravel() for w, b in tensor.layers]
    )
    np.testing.assert_allclose(flat, [p.data for p in scalar.params], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("index", range(len(TINY.gpt_sweep)))
def test_gpt_sizes_pairs_compute_the_same_step(torch: Any, index: int) -> None:
    """Each gpt-sizes pair, at the sweep's model size (context and batch
    capped): the same weights, batch and losses over two Adam steps."""
    from chainrule.bench.batched_gpt import sweep_problem

    problem = sweep_problem(TINY.gpt_sweep[index], TINY.gpt_sweep_cap)
    assert problem.config.n_embd == TINY.gpt_sweep[index][0]
    assert problem.x.shape == (3, 3) and (problem.x[:, 1:] == problem.y[:, :-1]).all()
    ours, theirs = tensor_step(problem, "float64"), torch_step(problem, "float64")
    for _ in range(2):
        assert math.isclose(ours(), theirs(), rel_tol=1e-10)


@pytest.mark.parametrize(
    "before,others,representative",
    [(0.1, 0.4, True), (0.1, 1.0, True), (0.1, 5.2, False), (1.6, 0.0, False)],
)
def test_a_run_under_load_is_marked_not_representative(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    before: float,
    others: float,
    representative: bool,
) -> None:
    """The load average is read before and after each engine's runs, and
    the cores other processes kept busy meanwhile; above 0.5 per core (1.0
    on 2 CPUs) before, or from others, the figure is marked in the table and
    in the JSON written. The load after (2.5 here) is the run's own: it does
    not count. (Loads and CPU times are faked: no timing here.)"""
    import json
    import os

    from chainrule.bench import (
        Engine,
        Settings,
        Workload,
        harness,
        load_note,
        measure,
        table,
        to_json,
    )
    from chainrule.bench import write_json as write

    readings = iter([before, 2.5])  # before the engine's runs, after them

    def getloadavg() -> tuple[float, float, float]:
        value = next(readings, 2.5)
        return (value, value, value)

    # wall clock, the machine's busy CPU seconds, this process's: 10 s of
    # wall time in which this process used 20 CPU seconds (two cores)
    busy = iter([(0.0, 100.0, 1.0), (10.0, 120.0 + 10 * others, 21.0)])
    monkeypatch.setattr(harness, "_busy_now", lambda: next(busy))
    monkeypatch.setattr(os, "getloadavg", getloadavg)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    engine = Engine("e", lambda sizes: lambda: lambda: None)
    w = Workload("w", "a test workload", baseline="e", engines=(engine,))
    result = measure(w, engine, Settings(warmup=0, repeat=1, sizes=TINY, label="test"))
    assert result.load == (before, 2.5) and result.others == others
    assert result.representative is representative
    path = tmp_path / "run.json"
    write(path, to_json([w], [result], Settings(warmup=0, repeat=1, sizes=TINY, label="test")))
    data = json.loads(path.read_text())
    assert data["loads"] == {
        "w": {
            "e": {
                "before": before,
                "after": 2.5,
                "others": others,
                "representative": representative,
            }
        }
    }
    assert data["meta"]["representative"] is representative
    assert data["meta"]["load_limit_per_core"] == 0.5
    assert data["meta"]["load_average_before"] == before
    row = table([w], [result]).splitlines()[-1]
    shown = f"{before:.2f} -> 2.50, others {others:.2f}"
    assert row.endswith(shown + ("" if representative else " not representative"))
    note = load_note([result])
    assert (note is None) is representative
    if note:
        assert note.startswith("not representative: load average above 0.5 per core (1 on 2 CPUs)")


def test_other_processes_cpu_is_read_from_the_system() -> None:
    """The others' share is the machine's busy CPU time less this
    process's: the machine's busy time includes this process's own, so a
    busy loop here shows up in both."""
    from chainrule.bench import harness

    start = harness._busy_now()
    if start is None:
        pytest.skip("no /proc/stat on this system")
    deadline = time.perf_counter() + 30.0
    end = start
    while end[2] - start[2] < 0.2 and time.perf_counter() < deadline:  # 0.2 s of our CPU
        for _ in range(10_000):
            pass
        now = harness._busy_now()
        assert now is not None
        end = now
    own = end[2] - start[2]
    assert own >= 0.2
    assert end[1] - start[1] >= own - 0.05  # (clock ticks of 10 ms)
    assert end[0] > start[0]
