"""``chainrule bench``: the harness, the workloads' correctness, the command.

No test here measures time: the command runs on tiny sizes and only its
output's shape and the workloads' numbers (losses, gradients, bytes) are
checked.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from chainrule import Value
from chainrule.bench import (
    TINY,
    WORKLOADS,
    Engine,
    Result,
    Settings,
    Workload,
    chain,
    install_hints,
    measure,
    memory,
    moons,
    table,
    to_json,
)
from chainrule.cli import main

ENGINES = {
    "moons-step": ["micrograd", "microgpt", "chainrule-compat", "chainrule", "compiled", "tensor"],
    "backward-only": [
        "micrograd",
        "microgpt",
        "chainrule-compat",
        "chainrule",
        "compiled",
        "tensor",
    ],
    "deep-chain": ["micrograd", "chainrule"],
    "gpt-step": [
        "chainrule-compat",
        "chainrule",
        "tensor-float64",
        "tensor-float32",
        "torch-float64",
        "torch-float32",
    ],
    "gpt-name-step": ["microgpt", "chainrule-compat", "chainrule", "compiled"],
    "gpt-names": [
        "microgpt",
        "chainrule-compat",
        "compiled",
        "compiled-optim",
        "compiled-step",
        "compiled-step-nogc",
    ],
    "memory": ["micrograd", "chainrule"],
    "gpt-sizes": [
        f"{size} {side}-{dtype}"
        for size in ("16/4/1/16/32", "64/4/2/32/32", "128/4/4/64/32", "256/8/4/128/16")
        for dtype in ("float32", "float64")
        for side in ("tensor", "torch")
    ],
    "cnn-step": ["tensor-float32", "torch-float32", "tensor-float64", "torch-float64"],
}

TINY_SETTINGS = Settings(warmup=0, repeat=1, sizes=TINY, label="test")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
        code = main(["bench", "--quick", "--tiny", "--repeat", "1", "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text()), buffer.getvalue()


def test_json_has_every_workload_and_engine(tiny_run: tuple[dict[str, Any], str]) -> None:
    data, _ = tiny_run
    assert set(data) >= {"workloads", "meta"}
    assert {name: list(engines) for name, engines in data["workloads"].items()} == ENGINES
    for name, engines in data["workloads"].items():
        for engine, value in engines.items():
            if (name, engine) == ("deep-chain", "micrograd"):
                assert value is None
            else:
                assert isinstance(value, float) and value > 0, (name, engine, value)
    assert data["notes"] == {"deep-chain": {"micrograd": "RecursionError"}}
    assert data["meta"]["units"]["memory"] == "bytes per operation"
    assert data["meta"]["repetitions"] == 1


def test_memory_chainrule_needs_at_most_a_quarter(tiny_run: tuple[dict[str, Any], str]) -> None:
    mem = tiny_run[0]["workloads"]["memory"]
    assert mem["chainrule"] * 4 <= mem["micrograd"]
    assert 64 < mem["chainrule"] < 400  # a node, its float and two small tuples


def test_table_lists_everything(tiny_run: tuple[dict[str, Any], str]) -> None:
    _, text = tiny_run
    for name, engines in ENGINES.items():
        assert name in text
        for engine in engines:
            assert engine in text
    assert "RecursionError" in text
    assert "B/op" in text
    assert "1.0x (baseline)" in text


def test_workload_selection_and_bad_repeat(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tiny", "--repeat", "1", "--warmup", "0", "--workload", "memory"]) == 0
    out = capsys.readouterr().out
    assert "memory" in out and "moons-step" not in out
    assert main(["bench", "--repeat", "0"]) == 2


def test_benchmarks_run_script_exists() -> None:
    root = Path(__file__).resolve().parent.parent
    assert (root / "benchmarks" / "run.py").is_file()
    results = json.loads((root / "benchmarks" / "results.json").read_text())
    # gpt-sizes, cnn-step and gpt-names have their own runs (benchmarks/gpt-sizes.json,
    # benchmarks/cnn-step.json, benchmarks/compile.json): the full run of everything
    # else takes minutes already
    own = ("gpt-sizes", "cnn-step", "gpt-names")
    assert list(results["workloads"]) == [name for name in ENGINES if name not in own]


# --------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------


def _workload(*engines: Engine, unit: str = "s") -> Workload:
    return Workload("w", "a test workload", baseline=engines[0].name, engines=engines, unit=unit)


def test_missing_engine_is_not_installed() -> None:
    engine = Engine("ghost", lambda sizes: lambda: lambda: None, requires=("no_such_module_xyz",))
    result = measure(_workload(engine), engine, TINY_SETTINGS)
    assert result.value is None and result.note == "not installed"


def test_a_missing_baseline_gives_a_hint_and_ratios_against_the_next_engine() -> None:
    ghost = Engine("ghost", lambda sizes: lambda: lambda: None, requires=("no_such_module_xyz",))
    slow = Engine("slow", lambda sizes: lambda: lambda: None)
    fast = Engine("fast", lambda sizes: lambda: lambda: None)
    w = _workload(ghost, slow, fast)  # ghost is the baseline
    results = [Result("w", "ghost", None, "not installed"), Result("w", "slow", 2.0),
               Result("w", "fast", 0.5)]  # fmt: skip
    text = table([w], results)
    assert "4.0x faster than slow" in text and "1.0x (baseline)" in text
    assert install_hints([w], results) == [
        "no_such_module_xyz is not installed: pip install no_such_module_xyz; "
        "ratios relative to another engine instead: w (against slow)"
    ]
    data = to_json([w], results, TINY_SETTINGS)
    assert data["ratios"] == {"w": {"slow": 1.0, "fast": 0.25}}
    assert data["meta"]["baselines"] == {"w": "slow"}


def test_bench_without_micrograd_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "micrograd", None)  # not installed, as far as find_spec sees
    code = main(["bench", "--tiny", "--repeat", "1", "--warmup", "0", "--workload", "moons-step"])
    out = capsys.readouterr().out
    assert code == 0
    rows = {}
    for line in out.splitlines():
        words = line.removeprefix("moons-step").split()
        if words and words[0] in ENGINES["moons-step"] and " is not " not in line:
            # without the load column: its load averages, or "-"
            rows[words[0]] = re.sub(
                r"  +(-|\S+ -> \S+(, others \S+)?( not representative)?)$", "", line
            )
    assert "not installed" in rows["micrograd"] and rows["micrograd"].split()[-1] == "-"
    assert rows["microgpt"].endswith("1.0x (baseline)")
    assert re.search(r"\d+\.\dx (faster|slower) than microgpt$", rows["chainrule"])
    assert out.splitlines()[-1] == (
        "micrograd is not installed: pip install micrograd; "
        "ratios relative to another engine instead: moons-step (against microgpt)"
    )


def test_failing_engine_is_named_by_its_error() -> None:
    def boom() -> None:
        raise ZeroDivisionError

    engine = Engine("bad", lambda sizes: lambda: boom)
    ok = Engine("ok", lambda sizes: lambda: lambda: None)
    w = _workload(ok, engine)
    results = [measure(w, ok, TINY_SETTINGS), measure(w, engine, TINY_SETTINGS)]
    assert results[1].value is None and results[1].note == "ZeroDivisionError"
    assert "ZeroDivisionError" in table([w], results)
    assert to_json([w], results, TINY_SETTINGS)["workloads"] == {
        "w": {"ok": results[0].value, "bad": None}
    }


def test_median_of_the_runs_and_warmup_is_not_counted() -> None:
    calls: list[int] = []
    values = iter([1000.0, 3.0, 1.0, 2.0])

    def make(sizes: Any) -> Any:
        def arm() -> Any:
            calls.append(1)
            value = next(values)
            return lambda: value

        return arm

    engine = Engine("m", make)
    settings = Settings(warmup=1, repeat=3, sizes=TINY, label="test")
    result = measure(_workload(engine, unit="B/op"), engine, settings)
    assert len(calls) == 4
    assert result.samples == [3.0, 1.0, 2.0]
    assert result.value == 2.0


def test_a_workload_of_short_steps_gets_more_timed_runs() -> None:
    """``more_runs``: a workload of steps of a few milliseconds (cnn-step)
    gets that many times the settings' timed runs; the JSON's meta says so;
    a long workload's ``runs`` still caps them."""
    import dataclasses

    from chainrule.bench import CNN_STEP, header, to_json
    from chainrule.bench.harness import timed_runs

    calls: list[int] = []
    engine = Engine("m", lambda sizes: lambda: lambda: calls.append(1))
    short = dataclasses.replace(_workload(engine), more_runs=3)
    settings = Settings(warmup=0, repeat=2, sizes=TINY, label="test")
    result = measure(short, engine, settings)
    assert len(result.samples) == 6 and len(calls) == 6
    long = dataclasses.replace(_workload(engine), name="long", runs=1)
    assert timed_runs(long, settings) == 1
    meta = to_json([short, long], [result], settings)["meta"]
    assert meta["runs"] == {"w": 6, "long": 1} and meta["repetitions"] == 2
    assert "2 timed runs, median (timed runs, where not 2: w 6, long 1);" in header(
        settings, [short, long]
    )
    assert CNN_STEP.more_runs == 5


def test_warmup_lasts_its_seconds() -> None:
    """With ``warmup_seconds``, warm-up runs go on until the engine has run
    that long (and at least ``warmup`` times); the timed runs follow."""
    import time

    calls: list[float] = []

    def make(sizes: Any) -> Any:
        def run() -> None:
            calls.append(time.perf_counter())
            time.sleep(0.01)

        return lambda: run

    engine = Engine("m", make)
    settings = Settings(warmup=1, repeat=2, sizes=TINY, label="test", warmup_seconds=0.2)
    result = measure(_workload(engine), engine, settings)
    assert len(result.samples) == 2 and all(s >= 0.01 for s in result.samples)
    warmups = len(calls) - 2
    assert warmups >= 2  # one 10 ms run is not 0.2 s of warm-up
    assert calls[warmups] - calls[0] >= 0.2  # the timed runs start after it


def test_ratios_in_the_table() -> None:
    from chainrule.bench import Result

    a = Engine("slow", lambda sizes: lambda: lambda: None)
    b = Engine("fast", lambda sizes: lambda: lambda: None)
    w = _workload(a, b)
    text = table([w], [Result("w", "slow", 2.0), Result("w", "fast", 0.004)])
    assert "2.000 s" in text and "4.00 ms" in text
    assert "500.0x faster than slow" in text


# --------------------------------------------------------------------------
# The workloads compute what they claim, identically across engines
# --------------------------------------------------------------------------


def test_moons_data_is_seeded_and_balanced() -> None:
    X, y = moons.make_moons(100)
    assert (X, y) == moons.make_moons(100)
    assert len(X) == 100 and sorted(set(y)) == [-1, 1] and sum(y) == 0
    assert all(len(row) == 2 and all(isinstance(v, float) for v in row) for row in X)


def test_moons_initial_weights_follow_micrograd_layout() -> None:
    w = moons.initial_weights()
    assert len(w) == 2 * 16 + 16 + 16 * 16 + 16 + 16 + 1  # 337
    assert w[2] == 0.0 and w[336] == 0.0  # the first and last biases
    assert all(-1.0 <= v <= 1.0 for v in w)


def _moons_engines() -> list[Any]:
    engines: list[Any] = [moons._compat(TINY), moons.ChainruleStep(TINY)]
    pytest.importorskip("micrograd")
    return [moons._micrograd(TINY), *engines]


def test_moons_engines_compute_the_same_loss_and_step() -> None:
    steps = _moons_engines()
    losses = [s.graph().data for s in steps]
    assert max(losses) - min(losses) < 1e-12
    for s in steps:
        s()
        s()
    params = [[p.data for p in s.model.parameters()] for s in steps]
    for other in params[1:]:
        assert max(abs(a - b) for a, b in zip(params[0], other)) < 1e-12
    assert params[0] != moons.initial_weights()  # the steps moved the weights


def test_moons_gradients_match_across_engines() -> None:
    steps = _moons_engines()
    grads = []
    for s in steps:
        loss = s.graph()
        loss.backward()
        grads.append([p.grad for p in s.model.parameters()])
    for other in grads[1:]:
        assert max(abs(a - b) for a, b in zip(grads[0], other)) < 1e-12
    assert any(g != 0 for g in grads[0])


def test_deep_chain_backpropagates_in_chainrule() -> None:
    x, y = chain.chain(Value, 10_000)
    y.backward()
    assert math.isclose(x.grad, 1.0001**5_000, rel_tol=1e-12)


def test_deep_chain_micrograd_raises_recursion_error_under_default_limit() -> None:
    pytest.importorskip("micrograd")
    from micrograd.engine import Value as MicrogradValue

    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        _, y = chain.chain(MicrogradValue, 3_000)
        with pytest.raises(RecursionError), chain.default_recursion_limit():
            assert sys.getrecursionlimit() == 1000
            y.backward()
        assert sys.getrecursionlimit() == 50_000
    finally:
        sys.setrecursionlimit(saved)


def test_memory_chain_counts_every_op() -> None:
    y = memory.build(Value, 6)  # *, +, relu, *, +, relu
    assert y._op == "ReLU"
    assert math.isclose(y.data, (0.5 * 1.0001 + 0.001) * 1.0001 + 0.001)
    per_op = memory.bytes_per_op(Value, 3_000)
    assert 64 < per_op < 400


def test_every_workload_is_registered() -> None:
    assert {w.name: [e.name for e in w.engines] for w in WORKLOADS} == ENGINES


def test_a_slower_engine_is_called_slower() -> None:
    from chainrule.bench import Result

    a = Engine("base", lambda sizes: lambda: lambda: None)
    b = Engine("other", lambda sizes: lambda: lambda: None)
    text = table([_workload(a, b)], [Result("w", "base", 1.0), Result("w", "other", 4.0)])
    assert "4.0x slower than base" in text


def test_benchmarks_readme_table_is_the_run_in_results_json() -> None:
    """benchmarks/README.md's table is the output of the run whose JSON is
    benchmarks/results.json."""
    from chainrule.bench.harness import _format_value

    root = Path(__file__).resolve().parent.parent
    results = json.loads((root / "benchmarks" / "results.json").read_text())
    units = results["meta"]["units"]
    for readme in (root / "benchmarks" / "README.md",):
        text = readme.read_text()
        table_start = text.index("chainrule bench (full)")
        block = text[table_start : text.index("```", table_start)]
        rows = [line.split() for line in block.splitlines()]
        for name, engines in results["workloads"].items():
            unit = "B/op" if units[name] == "bytes per operation" else "s"
            for engine, value in engines.items():
                shown = results["notes"][name][engine] if value is None else None
                shown = shown or _format_value(value, unit)
                assert any(engine in row and shown in " ".join(row) for row in rows), (
                    readme.name,
                    name,
                    engine,
                    shown,
                )
        assert f"{results['meta']['repetitions']} timed runs" in block


def test_readme_table_is_one_run_of_the_command_above_it() -> None:
    """The README's table is what ``chainrule bench --workload moons-step``
    prints, pasted whole: the command right above it, the machine, Python
    and load average in its header, every engine of the workload, and each
    ratio the baseline's median over the engine's as printed."""
    from chainrule.bench import WORKLOADS

    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text()
    command = "chainrule bench --workload moons-step\n```\n\n```\n"
    start = text.index(command) + len(command)
    block = text[start : text.index("```", start)].splitlines()
    head = block[0]
    assert head.startswith(
        "chainrule bench (full): 1 warm-up run and 0.5 s, 7 timed runs, median; "
    )
    assert "CPUs, load average " in head
    moons = next(w for w in WORKLOADS if w.name == "moons-step")
    rows = [line.split() for line in block if line.split()[:1] != [] and "  " in line]
    medians = {}
    for row in rows:
        cells = row[1:] if row[0] == "moons-step" else row
        if cells[0] in {e.name for e in moons.engines}:
            value, unit = float(cells[1]), cells[2]
            medians[cells[0]] = value * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]
            ratio = cells[3]
            if cells[0] != moons.baseline:
                expected = medians[moons.baseline] / medians[cells[0]]
                # the ratio to one decimal, from medians printed to 4-5 digits
                assert ratio.endswith("x")
                assert abs(float(ratio[:-1]) - expected) <= 0.05 + 0.002 * expected
    assert set(medians) == {e.name for e in moons.engines}
