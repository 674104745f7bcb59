"""Time every engine on every workload in one process, side by side.

For each (workload, engine): warm-up runs, at least ``warmup`` of them and
at least ``warmup_seconds`` of running (half a second in the full
benchmark: a step of a millisecond is measured as a training loop runs it
after its first few hundred steps, not while caches and allocators still
settle), then ``repeat`` timed runs with :func:`time.perf_counter`, and the
median.

The garbage collector stays on, as a user runs it. A ``gc.collect()``
(outside the timing) before each engine's first run gives every engine the
same clean start; after that its runs follow each other as the steps of a
training loop do, so each run pays for the collections its predecessors'
garbage causes. That matters: micrograd's graphs are reference cycles (a
node's ``_backward`` closure refers to the node), which only the cyclic
collector frees, and a user's loop pays for that on every step. Engines
that need NumPy run after all the others, and those that need PyTorch
last: an imported library's objects stay alive and every later full
collection scans them (PyTorch alone leaves 150,000), which would slow the
pure-Python engines measured after it. An engine
that is not installed, or a run that raises (micrograd's ``RecursionError``
on a deep graph), gives ``None`` and a word that says why.

A workload whose unit is ``"B/op"`` measures memory instead of time: its
runs return bytes per operation, and the median of those is reported.

Each engine (each group of interleaved engines) has the system's 1-minute
load average read just before its first run and just after its last, and,
where the system tells (Linux's ``/proc/stat``), the cores *other
processes* kept busy while it ran: the machine's busy CPU time less this
process's own, per second. A figure taken on a machine already loaded
above :data:`LOAD_LIMIT_PER_CORE` per core before it started, or while
other processes used more than that, measures a crowded machine (their
threads take the cores an engine's threads wait for; PyTorch's suffer
most), not the idle one a user trains on: the table and the JSON mark it
**not representative**. The load average *after* is not the test: a
benchmark that keeps two cores busy raises it by itself. (Where the
system does not tell the others' share, the load after counts too.)
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Untimed set-up for one run: returns the function that is timed (or, for a
#: memory workload, the function whose return value is the measurement).
Arm = Callable[[], Callable[[], Any]]

#: Above this 1-minute load average per core, before or after an engine's
#: runs, its figure is marked not representative.
LOAD_LIMIT_PER_CORE = 0.5

#: Seconds of rest before each timed run of interleaved engines: BLAS and
#: OpenMP threads spin for a while after their work (OpenBLAS's for 2^28
#: cycles, about 0.11 s at 2.4 GHz), and would take the cores from the
#: next engine's threads; after the rest every engine starts on idle cores,
#: runs one untimed step (its threads woken, its data back in the caches,
#: as in a training loop) and then the timed one.
REST_SECONDS = 0.15

#: A model size of the ``gpt-sizes`` sweep: embedding, heads, layers, block
#: (context length) and batch.
GPTSize = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Sizes:
    """How big each workload is. ``FULL`` is the benchmark; ``TINY`` keeps
    the same workloads small enough for the test suite."""

    moons_points: int = 100
    chain_length: int = 100_000
    memory_ops: int = 30_000
    gpt_name: str = "emma"  # gpt-name-step
    gpt_batch: int = 32  # names per gpt-step
    # gpt-sizes: the models are always the sweep's; a cap shortens the
    # context and the batch (the test suite's tiny run)
    gpt_sweep: tuple[GPTSize, ...] = (
        (16, 4, 1, 16, 32),
        (64, 4, 2, 32, 32),
        (128, 4, 4, 64, 32),
        (256, 8, 4, 128, 16),
    )
    gpt_sweep_cap: int | None = None
    gpt_sweep_threads: int = 2  # for both sides, of gpt-sizes and cnn-step
    cnn_batch: int = 64  # images per cnn-step
    loop_names: int = 300  # gpt-names: consecutive names of the shipped list ...
    loop_start: int = 0  # ... from this one


FULL = Sizes()
TINY = Sizes(
    moons_points=8,
    chain_length=3_000,
    memory_ops=1_500,
    gpt_name="ab",
    gpt_batch=2,
    gpt_sweep_cap=3,
    cnn_batch=4,
    loop_names=3,
)


@dataclass(frozen=True)
class Engine:
    """One implementation of a workload. ``make(sizes)`` builds what the
    runs share (data, model, weights) and returns the :data:`Arm`."""

    name: str
    make: Callable[[Sizes], Arm]
    requires: tuple[str, ...] = ()  # importable modules it needs
    versus: str = ""  # the engine its ratio is relative to ("": the workload's baseline)


def built(make: Callable[[Sizes], Callable[[], Any]]) -> Callable[[Sizes], Arm]:
    """An engine's ``make`` for a step built once: ``make(sizes)`` builds the
    step (model, data, optimizer) and every run calls that same step, as a
    training loop does."""

    def arm(sizes: Sizes) -> Arm:
        step = make(sizes)
        return lambda: step

    return arm


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    baseline: str  # the engine the ratios are relative to
    engines: tuple[Engine, ...]
    unit: str = "s"  # "s": median seconds; "B/op": median bytes per operation
    # Round-robin: every engine's n-th run before any (n+1)-th, so a noisy
    # machine's slow spells fall on all engines alike (for paired engines).
    interleave: bool = False
    # A long workload (a whole training loop per run): at most this many
    # timed runs and no warm-up, whatever the settings say.
    runs: int | None = None
    # A workload of steps of a few milliseconds: this many times the
    # settings' timed runs (the median of 7 such steps moves by 10% from run
    # to run; of 35, by a few percent).
    more_runs: int = 1


@dataclass(frozen=True)
class Settings:
    warmup: int  # untimed runs of each engine, at least
    repeat: int  # timed runs
    sizes: Sizes
    label: str
    warmup_seconds: float = 0.0  # and at least this much untimed running (timed workloads)


FULL_SETTINGS = Settings(warmup=1, repeat=7, sizes=FULL, label="full", warmup_seconds=0.5)
QUICK_SETTINGS = Settings(warmup=1, repeat=3, sizes=FULL, label="quick", warmup_seconds=0.2)


@dataclass
class Result:
    workload: str
    engine: str
    value: float | None  # median seconds or bytes/op; None: see note
    note: str = ""  # why there is no value: "not installed", "RecursionError"
    samples: list[float] = field(default_factory=list)
    # the 1-minute load average before the engine's first run and after its
    # last; None where the system does not tell
    load: tuple[float, float] | None = None
    # the cores other processes kept busy while the engine ran (None: untold)
    others: float | None = None
    # False when the load before, or the others' share, was above
    # LOAD_LIMIT_PER_CORE per core
    representative: bool = True


def _missing(engine: Engine) -> list[str]:
    return [m for m in engine.requires if importlib.util.find_spec(m) is None]


def _run_once(result: Result, arm: Arm) -> tuple[float, Any] | None:
    """One run: its seconds and what it returned, or None when it raised
    (the result then notes the error and keeps no samples)."""
    try:
        run = arm()
        start = time.perf_counter()
        out = run()
        elapsed = time.perf_counter() - start
        del run  # what the arm built (a graph) is freed outside the timing
    except Exception as error:  # a workload the engine cannot run
        result.note = type(error).__name__
        result.samples = []
        del error
        gc.collect()
        return None
    return elapsed, out


def timed_runs(workload: Workload, settings: Settings) -> int:
    """How many timed runs each engine of ``workload`` gets: the settings'
    (at most :attr:`Workload.runs` of a long workload, :attr:`Workload.more_runs`
    times them for short steps)."""
    if workload.runs is not None:
        return min(settings.repeat, workload.runs)
    return settings.repeat * workload.more_runs


def runs_apart(workloads: Sequence[Workload], settings: Settings) -> dict[str, int]:
    """The workloads whose timed runs are not the settings' ``repeat``, and
    theirs (:func:`timed_runs`): a long workload's fewer, short steps' more."""
    runs = {w.name: timed_runs(w, settings) for w in workloads}
    return {name: n for name, n in runs.items() if n != settings.repeat}


def measure(workload: Workload, engine: Engine, settings: Settings) -> Result:
    """The median over ``settings.repeat`` runs after ``settings.warmup``."""
    return measure_together(workload, [engine], settings)[0]


def measure_together(
    workload: Workload, engines: Sequence[Engine], settings: Settings
) -> list[Result]:
    """:func:`measure` for several engines of one workload, their runs in
    turn: warm-ups first, then one timed run of each per round."""
    results = [Result(workload.name, e.name, None) for e in engines]
    before = _load_now()
    busy = _busy_now()
    arms: list[tuple[Result, Arm]] = []
    for engine, result in zip(engines, results):
        if _missing(engine):
            result.note = "not installed"
            continue
        try:
            arms.append((result, engine.make(settings.sizes)))
        except Exception as error:  # an engine that cannot be built here
            result.note = type(error).__name__
    timed = workload.unit == "s"
    warmup, repeat = settings.warmup, timed_runs(workload, settings)
    warmup_seconds = settings.warmup_seconds if timed else 0.0
    if workload.runs is not None:
        warmup, warmup_seconds = 0, 0.0
    gc.collect()
    # Warm-up: at least `warmup` runs of each engine and `warmup_seconds` of
    # its running, so a fast step is measured as a training loop runs it
    # after its first few steps (caches, allocators); then the timed runs.
    warm = [(0, 0.0)] * len(arms)
    while True:
        cold = [
            k for k, (runs, seconds) in enumerate(warm) if runs < warmup or seconds < warmup_seconds
        ]
        cold = [k for k in cold if not arms[k][0].note]
        if not cold:
            break
        for k in cold:
            ran = _run_once(*arms[k])
            if ran is not None:
                warm[k] = (warm[k][0] + 1, warm[k][1] + ran[0])
    for _ in range(repeat):
        for result, arm in arms:
            if result.note:
                continue
            if len(arms) > 1 and timed:  # idle cores, then one step to wake them
                time.sleep(REST_SECONDS)
                if _run_once(result, arm) is None:
                    continue
            ran = _run_once(result, arm)
            if ran is not None:
                result.samples.append(ran[0] if timed else float(ran[1]))
    del arms
    after = _load_now()
    others = _others_since(busy)
    gc.collect()
    for result in results:
        if result.samples:
            result.value = statistics.median(result.samples)
        if before is not None and after is not None:
            result.load = (before, after)
            result.others = others
            during = others if others is not None else after
            result.representative = max(before, during) <= load_limit()
    return results


def run(
    workloads: Sequence[Workload],
    settings: Settings,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Every engine of every workload, in this process; the results in
    workload and engine order. The pure-Python engines are measured first,
    then those needing NumPy, then those needing PyTorch; the engines of an
    interleaved workload together, with the heaviest of them."""
    pairs = [(w, e) for w in workloads for e in w.engines]
    results: list[Result | None] = [None] * len(pairs)

    def weight(i: int) -> int:
        workload, engine = pairs[i]
        together = workload.engines if workload.interleave else (engine,)
        return max(_import_weight(e) for e in together)

    for i in sorted(range(len(pairs)), key=weight):
        workload, engine = pairs[i]
        if results[i] is not None:  # measured with its workload
            continue
        if workload.interleave:
            if progress:
                progress(f"{workload.name} / all {len(workload.engines)} engines in turn ...")
            mine = [j for j, (w, _) in enumerate(pairs) if w is workload]
            together = measure_together(workload, workload.engines, settings)
            for j, result in zip(mine, together):
                results[j] = result
            continue
        if progress:
            progress(f"{workload.name} / {engine.name} ...")
        results[i] = measure(workload, engine, settings)
    return [r for r in results if r is not None]


def _import_weight(engine: Engine) -> int:
    """0 for pure Python, 1 if the engine imports NumPy, 2 if PyTorch."""
    return max((_HEAVY.get(m, 0) for m in engine.requires), default=0)


_HEAVY = {"numpy": 1, "torch": 2}


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def load_limit() -> float:
    """The load average above which a figure is not representative:
    :data:`LOAD_LIMIT_PER_CORE` times the number of CPUs."""
    return LOAD_LIMIT_PER_CORE * (os.cpu_count() or 1)


def _load_now() -> float | None:
    """The 1-minute load average now, where the system tells."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _busy_now() -> tuple[float, float, float] | None:
    """The wall clock, the machine's busy CPU seconds (all cores) and this
    process's own CPU seconds, now; None where ``/proc/stat`` is missing."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    busy = (sum(fields[:8]) - idle) / hz  # user .. steal (guest time is in user)
    own = os.times()
    return time.perf_counter(), busy, own.user + own.system


def _others_since(start: tuple[float, float, float] | None) -> float | None:
    """The cores other processes kept busy, on average, since ``start``
    (:func:`_busy_now`)."""
    end = _busy_now()
    if start is None or end is None or end[0] <= start[0]:
        return None
    others = (end[1] - start[1]) - (end[2] - start[2])
    return round(max(others, 0.0) / (end[0] - start[0]), 2)


def _format_load(result: Result) -> str:
    if result.load is None or result.value is None:
        return "-"
    text = f"{result.load[0]:.2f} -> {result.load[1]:.2f}"
    if result.others is not None:
        text += f", others {result.others:.2f}"
    return text if result.representative else text + " not representative"


def _format_value(value: float, unit: str) -> str:
    if unit == "B/op":
        return f"{value:.0f} B/op"
    if value >= 1.0:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} us"


def baseline(workload: Workload, values: dict[str, float | None]) -> str:
    """The engine the workload's ratios are relative to: its baseline, or,
    when that has no value (not installed, or it failed), the first of its
    engines that has one, so the engines measured are still compared."""
    if values.get(workload.baseline) is not None:
        return workload.baseline
    measured = (e.name for e in workload.engines if not e.versus and values.get(e.name) is not None)
    return next(measured, workload.baseline)


def _reference(workload: Workload, engine: Engine, values: dict[str, float | None]) -> str:
    return engine.versus or baseline(workload, values)


def install_hints(workloads: Sequence[Workload], results: Sequence[Result]) -> list[str]:
    """One line per module an engine needed and did not find: how to
    install it, and which workloads' ratios are relative to another engine
    for want of it."""
    noted = {(r.workload, r.engine) for r in results if r.note == "not installed"}
    values = {(r.workload, r.engine): r.value for r in results}
    missing: dict[str, list[str]] = {}
    for w in workloads:
        for e in w.engines:
            if (w.name, e.name) in noted:
                for module in _missing(e):
                    missing.setdefault(module, [])
                    mine = {n: v for (k, n), v in values.items() if k == w.name}
                    if e.name == w.baseline and baseline(w, mine) != w.baseline:
                        missing[module].append(f"{w.name} (against {baseline(w, mine)})")
    lines = []
    for module, moved in missing.items():
        line = f"{module} is not installed: pip install {module}"
        if moved:
            line += f"; ratios relative to another engine instead: {', '.join(moved)}"
        lines.append(line)
    return lines


def _ratio(workload: Workload, engine: Engine, by_engine: dict[str, Result]) -> str:
    result = by_engine[engine.name]
    reference = _reference(workload, engine, {k: r.value for k, r in by_engine.items()})
    base = by_engine.get(reference)
    if result.value is None or base is None or base.value is None:
        return "-"
    if result.engine == reference:
        return "1.0x (baseline)"
    ratio = base.value / result.value
    if workload.unit == "B/op":
        better, worse = "smaller", "larger"
    else:
        better, worse = "faster", "slower"
    if engine.versus:  # a pair: the time ratio itself, to two places
        word = better if ratio >= 1.0 else worse
        return f"{result.value / base.value:.2f} of {reference}'s time ({word})"
    if ratio >= 1.0:
        return f"{ratio:.1f}x {better} than {reference}"
    return f"{1.0 / ratio:.1f}x {worse} than {reference}"


def table(workloads: Sequence[Workload], results: Sequence[Result]) -> str:
    """A plain-text table: workload, engine, median, ratio vs the baseline,
    and, when the results carry them, the load averages before and after
    each engine's runs (``not representative`` above
    :data:`LOAD_LIMIT_PER_CORE` per core)."""
    loads = any(r.load is not None for r in results)
    rows = [("workload", "engine", "median", "ratio", *(("load",) if loads else ()))]
    for workload in workloads:
        mine = {r.engine: r for r in results if r.workload == workload.name}
        first = True
        for engine in workload.engines:
            result = mine.get(engine.name)
            if result is None:
                continue
            shown = (
                result.note if result.value is None else _format_value(result.value, workload.unit)
            )
            rows.append(
                (
                    workload.name if first else "",
                    engine.name,
                    shown,
                    _ratio(workload, engine, mine),
                    *((_format_load(result),) if loads else ()),
                )
            )
            first = False
    last = len(rows[0]) - 1
    widths = [max(len(row[i]) for row in rows) for i in range(last)]
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[last]]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * len(cell) for cell in [*cells[:last], row[last]]))
    return "\n".join(lines)


def load_note(results: Sequence[Result]) -> str | None:
    """The line under the table when some figure is not representative."""
    if all(r.representative for r in results):
        return None
    return (
        f"not representative: load average above {LOAD_LIMIT_PER_CORE:g} per core "
        f"({load_limit():g} on {os.cpu_count()} CPUs) before the engine's runs, or other "
        "processes busy on more cores than that while they ran: they took the cores; "
        "record figures on a quiet machine."
    )


def runs_line(
    label: str,
    warmup: int,
    warmup_seconds: float,
    repeat: int,
    apart: dict[str, int] | None = None,
) -> str:
    """How a run was measured, as the header says it: ``chainrule bench
    (full): 1 warm-up run and 0.5 s, 7 timed runs, median``, and the
    workloads whose timed runs differ (:func:`runs_apart`)."""
    warm = f"{warmup} warm-up"  # (the words of runs before warmup_seconds)
    if warmup_seconds:
        warm += f" run{'s' if warmup != 1 else ''} and {warmup_seconds:g} s"
    timed = f"{repeat} timed run{'s' if repeat != 1 else ''}"
    line = f"chainrule bench ({label}): {warm}, {timed}, median"
    if apart:
        where = ", ".join(f"{name} {n}" for name, n in apart.items())
        line += f" (timed runs, where not {repeat}: {where})"
    return line


def header(settings: Settings, workloads: Sequence[Workload] = ()) -> str:
    """The run's settings (and the timed runs of ``workloads`` where they
    differ) and the machine it ran on: Python, system, CPUs and the load
    averages at the end of the run (ratios move with the load)."""
    load = _load_average()
    return (
        runs_line(
            settings.label,
            settings.warmup,
            settings.warmup_seconds,
            settings.repeat,
            runs_apart(workloads, settings),
        )
        + f"; {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
        + (f", load average {' '.join(map(str, load))}" if load else "")
    )


def to_json(
    workloads: Sequence[Workload], results: Sequence[Result], settings: Settings
) -> dict[str, Any]:
    """``{"workloads": {NAME: {ENGINE: value_or_null}}}`` plus ``notes``
    (why a value is null), ``ratios`` (each engine's value divided by its
    reference's: the workload's baseline, or the engine it is paired with;
    :func:`baseline` when the baseline is missing), ``loads`` (the 1-minute
    load average before and after each engine's runs, the cores other
    processes kept busy meanwhile, and whether the figure is
    ``representative``) and ``meta`` (units, settings, machine, the load
    averages before the first engine and at the end, and
    ``representative``: False when any figure is not)."""
    firsts = [r.load[0] for r in results if r.load is not None]
    before = max(firsts) if firsts else None
    values: dict[str, dict[str, float | None]] = {w.name: {} for w in workloads}
    notes: dict[str, dict[str, str]] = {}
    for r in results:
        values.setdefault(r.workload, {})[r.engine] = r.value
        if r.note:
            notes.setdefault(r.workload, {})[r.engine] = r.note
    loads: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        if r.load is not None:
            loads.setdefault(r.workload, {})[r.engine] = {
                "before": r.load[0],
                "after": r.load[1],
                "others": r.others,
                "representative": r.representative,
            }
    ratios: dict[str, dict[str, float]] = {}
    for w in workloads:
        for e in w.engines:
            value = values[w.name].get(e.name)
            base = values[w.name].get(_reference(w, e, values[w.name]))
            if value is not None and base:
                ratios.setdefault(w.name, {})[e.name] = value / base
    return {
        "workloads": values,
        "notes": notes,
        "ratios": ratios,
        "loads": loads,
        "meta": {
            "units": {
                w.name: ("bytes per operation" if w.unit == "B/op" else "seconds")
                for w in workloads
            },
            "baselines": {w.name: baseline(w, values[w.name]) for w in workloads},
            "settings": settings.label,
            "warmup": settings.warmup,
            "warmup_seconds": settings.warmup_seconds,
            "repetitions": settings.repeat,
            "runs": runs_apart(workloads, settings),
            "statistic": "median",
            "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
            "machine": f"{platform.system()} {platform.machine()}",
            "cpus": os.cpu_count(),
            "gpt_sizes_threads": settings.sizes.gpt_sweep_threads,
            "load_average": _load_average(),  # at the end: the run's own threads included
            "load_average_before": before,
            "load_limit_per_core": LOAD_LIMIT_PER_CORE,
            "representative": all(r.representative for r in results),
        },
    }


def _load_average() -> list[float] | None:
    """The system's 1-, 5- and 15-minute load averages at the end of the run
    (the run's own threads included), where the system tells."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
