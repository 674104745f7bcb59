"""When tracing does not pay: the account that decides when to trace.

A trace costs more than an eager call (it runs the function under watch,
then captures its graph: a few eager calls' time for a large graph, fifty
for a graph of a few nodes); a replay costs much less than an eager call of
a large graph, and more than one of a tiny graph (its NumPy calls have a
fixed cost). Compiling pays when traces are replayed often enough and each
replay saves time. :class:`Budget` decides, in seconds:

* **The first call runs eagerly, timed** (as a JIT warms up): an eager
  call's true time, before any trace is paid for.
* **A function too small to gain runs eagerly**: an eager call under
  :data:`MIN_CALL` (a replay's fixed cost leaves nothing to save); it is
  reconsidered if :data:`LONG_CALLS` later calls in a row take longer.
* **A graph is traced when its replays to come should repay the
  trace.** The replays to come are the times it was met before (or, if
  more, the times the function's average graph was met again), scaled up
  while the function has been called fewer than :data:`HORIZON` times:
  met in 2 of the first 4 calls, 25 to come; met 7 times in 150 calls, 6;
  a new graph in a loop whose every call so far was new, none (a loop
  whose every call is new pays nothing for tracing). What a replay saves
  and what a trace costs are those measured on this function, before any
  :data:`SAVED` of a call and :data:`TRACE_FIXED` plus
  :data:`TRACE_PER_CALL` calls. A training loop's graphs are traced when
  first met, or met again; a function cycling through graphs each met a
  few times, whose trace costs tens of its calls, runs eagerly (one
  warning).
* **A new graph is traced at once while tracing has paid** (to within
  what one replay saves, and if it repays its trace); while the traces
  made are further from paid back, a graph is traced only the second
  time it is met.
* **The account** (:meth:`Budget.refuse`): the *extra* time traces cost
  beyond an eager call, minus what replays saved against one. A trace is
  refused when the extra exceeds :data:`ALLOWANCE` eager calls (with their
  backward), whatever a trace costs against a call, or when most of the
  last :data:`WINDOW` calls traced at a loss (``torch.compile``'s recompile
  limit).

Refused, the call runs eagerly (one warning, the first time, naming the
argument that changes and how it was used); the traces kept still replay.
A function that settles later gets a second chance: after an eager streak
of :data:`STREAK` times the account's deficit, one more trace is allowed
(at most :data:`CHANCES` times, each streak twice as long as the one
before). With ``ALLOWANCE`` infinite (the tests of tracing itself) every
new graph is traced at once and nothing runs eagerly for the budget; so
with ``chainrule.compile(fn, budget=False)``.
"""

from __future__ import annotations

import collections
import math
import statistics
from typing import Any

#: Extra eager calls' worth of tracing that replays have not paid back.
ALLOWANCE = 2.0
#: An eager call (forward) shorter than this cannot gain from a replay: a
#: replay's NumPy calls cost about 50 us forward and as much backward (and a
#: trace of a graph that small about 0.5 ms), measured here; such a function
#: runs eagerly.
MIN_CALL = 2e-4
#: Calls longer than :data:`MIN_CALL`, one after another, that end "too
#: small": its graph grew (one is a pause: a garbage collection, another
#: thread holding the interpreter for its 5 ms switch interval).
LONG_CALLS = 3
#: The graphs met once and not traced that are remembered (their keys).
SEEN = 64
#: The graphs without a trace whose sightings are counted (their keys).
SEEN_COUNTS = 1024
#: How many times slower a traced run is than an eager call, until an eager
#: call is timed (watching every operation; measured 3 to 9 on small functions).
WATCHED = 4.0
#: An eager backward pass's time per second of its forward (the engine's
#: walk and chain rule: about twice, on micrograd's and microgpt's graphs).
BACKWARD = 2.0
#: A trace's cost beyond an eager call, before any trace is measured: this
#: many seconds plus :data:`TRACE_PER_CALL` eager calls (measured here: a
#: graph of tanh and products, 30 to 9,000 nodes, 0.7 ms plus 13 to 16
#: calls; microgpt's graph of a name, 2 to 10 calls).
TRACE_FIXED = 1e-3
TRACE_PER_CALL = 15.0
#: The share of an eager call with its backward that a replay saves,
#: before any replay is measured.
SAVED = 0.5
#: Calls ahead a function is expected to be called at least (a graph's
#: sightings so far scaled to it, while it has been called fewer times).
HORIZON = 100
#: The recent calls looked at, and how many of them tracing means "most".
WINDOW = 16
MOSTLY = 12
#: A second chance after an eager streak this many times the deficit...
STREAK = 20.0
#: ... at most this many times.
CHANCES = 3


class Budget:
    """The account of one compiled function (times in seconds)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # False: compile(budget=False), every graph traced at once
        self.trace_seconds = 0.0  # every trace, whole
        self.replay_seconds = 0.0  # every replay, forward and backward
        self.extra = 0.0  # traces beyond an eager call, minus replays' savings
        self.run_seconds: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.trace_extra: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.recent: collections.deque[bool] = collections.deque(maxlen=WINDOW)  # traced?
        self.streak = 0.0  # eager seconds since tracing was refused
        # a replay against an eager call (not a traced run, which the watching
        # slows), its backward pass against eager's once it runs: a function
        # that does not gain runs eagerly
        self.replays: collections.deque[float] = collections.deque(maxlen=WINDOW)  # per eager
        self._last: list[float] | None = None  # the latest replay's seconds and eager's
        self.traced_runs: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.eager_backwards: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.eager_runs: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._ratio: float | None = None  # backward_ratio(), until an eager call is timed
        self.chances = 0  # second chances given
        self.refusing = False
        # a function too small to gain whose call grew: its next trace waits
        # for a graph met twice, as one in the red does
        self.grew = False
        # per call: a graph met once, run eagerly (True), or traced or replayed
        self.met_once: collections.deque[bool] = collections.deque(maxlen=WINDOW)
        # graphs met once while tracing had not paid, traced when met again
        # (key -> its eager call's seconds)
        self.seen: collections.OrderedDict[Any, float | None] = collections.OrderedDict()
        self.calls = 0  # calls the budget saw: replays and calls without a trace
        self.graphs = 0  # the graphs among them (each counted when first met)
        # how often each graph without a trace was met (the last SEEN_COUNTS)
        self.sightings: collections.OrderedDict[Any, int] = collections.OrderedDict()
        # each trace's cost beyond an eager call, per second of that call
        self.trace_per_call: collections.deque[float] = collections.deque(maxlen=WINDOW)

    def active(self) -> bool:
        """Whether the budget decides (enabled, and ``ALLOWANCE`` finite)."""
        return self.enabled and math.isfinite(ALLOWANCE)

    def first_sight(self, key: Any) -> str:
        """What a call whose graph has no trace does: ``"trace"``,
        ``"eager"`` (timed, its key remembered), ``"rare"`` (the same: met
        too rarely to repay a trace) or ``"small"`` (too small to gain:
        eagerly from now on)."""
        if not self.active():
            return "trace"
        self.calls += 1
        met = self.sightings.pop(key, 0) + 1
        self.sightings[key] = met
        if met == 1:
            self.graphs += 1
        if len(self.sightings) > SEEN_COUNTS:
            self.sightings.popitem(last=False)
        if not self.eager_runs:
            self.remember(key)
            return "eager"  # the first call: an eager call's time
        if self.eager_estimate() < MIN_CALL:
            return "small"
        if (self.grew or self.extra > self.next_saving()) and key not in self.seen:
            self.remember(key)
            self.met_once.append(True)
            return "eager"  # tracing has not paid yet: trace it when met again
        if not self.repays(key, met):
            self.remember(key)
            self.met_once.append(True)
            return "rare" if met > 1 else "eager"  # (a graph met once: not seen before)
        return "trace"

    def repays(self, key: Any, met: int) -> bool:
        """Whether the replays to come of the graph of ``key``, met ``met``
        times so far (this time too), should save more than its trace
        would cost."""
        eager = self.seen.get(key) or self.eager_estimate()
        whole = eager * (1.0 + self.backward_ratio())
        saved = max(0.0, 1.0 - statistics.median(self.replays)) if self.replays else SAVED
        # met again so far: this graph, or (if more) the average graph
        again = max(met - 1, (self.calls - self.graphs) / self.graphs)
        if again <= 0.0:  # (no graph met twice yet: no trace would be replayed)
            return False
        to_come = again * max(1.0, HORIZON / self.calls)
        return to_come * whole * saved >= self.trace_estimate(eager)

    def trace_estimate(self, eager: float) -> float:
        """A trace's cost beyond an eager call, for a graph whose eager
        call takes ``eager``: as the traces made so far (per second of
        their eager call), before any :data:`TRACE_FIXED` plus
        :data:`TRACE_PER_CALL` calls."""
        if self.trace_per_call:  # (at least the fixed part: a slow eager call timed
            # beside a fast trace would make it nothing)
            return max(statistics.median(self.trace_per_call) * eager, TRACE_FIXED)
        return TRACE_FIXED + TRACE_PER_CALL * eager

    def mostly_met_once(self) -> bool:
        """Whether most of the last :data:`WINDOW` calls met a graph for the
        first time and ran eagerly (compiling does not help: warn)."""
        return len(self.met_once) == WINDOW and sum(self.met_once) >= MOSTLY

    def remember(self, key: Any) -> None:
        self.seen[key] = self.seen.get(key)
        self.seen.move_to_end(key)
        if len(self.seen) > SEEN:
            self.seen.popitem(last=False)

    def next_saving(self) -> float:
        """What the next replay should save: an eager call with its backward,
        less the replays' share of it so far (0 before any replay)."""
        if not self.replays:
            return 0.0
        return self.whole_call() * max(0.0, 1.0 - statistics.median(self.replays))

    def whole_call(self) -> float:
        """An eager call with its backward (seconds)."""
        return self.eager_estimate() * (1.0 + self.backward_ratio())

    def eager_estimate(self) -> float:
        """An eager call's time: the median of the calls run eagerly, else
        of the traced runs over :data:`WATCHED` (watching slows a run)."""
        if self.eager_runs:
            return statistics.median(self.eager_runs)
        return statistics.median(self.traced_runs) / WATCHED if self.traced_runs else 0.0

    def calibration(self) -> float:
        """An eager call's time per second of a traced run."""
        if self.eager_runs and self.traced_runs:
            return statistics.median(self.eager_runs) / statistics.median(self.traced_runs)
        return 1.0 / WATCHED

    def eager_of(self, key: Any, run_seconds: float) -> float:
        """An eager call's time for the graph of ``key``, traced in a run
        of ``run_seconds``: its own eager call's, if it ran eagerly when
        first met, else the traced run's over the calibration; never more
        than the traced run (which does an eager call's work and more: one
        slow eager call, a process's first, made traces look free)."""
        seen = self.seen.get(key)
        return min(seen, run_seconds) if seen is not None else run_seconds * self.calibration()

    def traced(self, seconds: float, run_seconds: float, eager: float, once: float = 0.0) -> None:
        """A trace took ``seconds``, of which ``fn`` ran ``run_seconds``;
        an eager call of its graph takes ``eager`` (the extra: all of the
        trace but that). ``once`` of it was spent once for good (copying the
        functions it ran: the next trace does not): in the account, not in
        the estimate of what the next trace costs."""
        self.trace_seconds += seconds
        self.run_seconds.append(run_seconds)
        self.traced_runs.append(run_seconds)
        extra = seconds - eager
        self.trace_extra.append(max(extra, 0.0))
        if eager > 0.0:
            self.trace_per_call.append(max(extra - once, 0.0) / eager)
        self.extra += extra
        self.grew = False
        self.recent.append(True)
        self.met_once.append(False)

    def replayed(self, seconds: float, eager_seconds: float) -> None:
        """A replay's forward took ``seconds``; an eager call of its graph
        takes about ``eager_seconds`` (:meth:`eager_of`)."""
        self.replay_seconds += seconds
        self.extra -= eager_seconds - seconds
        self.calls += 1
        self.recent.append(False)
        self.met_once.append(False)
        self.replays.append(seconds / eager_seconds if eager_seconds > 0.0 else math.inf)
        self._last = [seconds, eager_seconds]

    def replays_lose(self) -> str | None:
        """Why replays should stop (they take longer than eager calls, their
        backward passes included), or None."""
        if len(self.replays) < 3 or max(self.replays) < 1.0 or not self.active():
            return None  # (every replay faster: so is the median)
        ratio = statistics.median(self.replays)
        if ratio < 1.0:
            return None
        long = "about as long as" if ratio < 1.05 else f"{ratio:.2g} times as long as"
        return (
            f"a replay, with its backward pass, takes {long} an eager "
            "call of the same graph: the graph is too small to gain from compiling, or the "
            "replay reads and writes many Values the call does not use (a large table picked "
            "by an int argument)"
        )

    def backward(self, seconds: float, eager_seconds: float) -> None:
        """A replay's backward took ``seconds``; the eager backward it
        replaces is estimated as :data:`BACKWARD` times the eager forward
        (``eager_seconds``: :meth:`eager_of`). The latest replay's ratio
        then counts its backward pass too."""
        self.replay_seconds += seconds
        eager_backward = eager_seconds * self.backward_ratio()
        self.extra -= eager_backward - seconds
        last = self._last
        if last is not None and self.replays:
            last[0] += seconds
            last[1] += eager_backward
            self.replays[-1] = last[0] / last[1] if last[1] > 0.0 else math.inf

    def ran_backward_eagerly(self, seconds: float) -> None:
        """An eager call's backward (and update) took ``seconds``."""
        self.eager_backwards.append(seconds)
        self._ratio = None

    def backward_ratio(self) -> float:
        """An eager backward's time per second of an eager forward (kept
        until an eager call is timed again: read at every replay)."""
        ratio = self._ratio
        if ratio is None:
            ratio = BACKWARD
            if self.eager_backwards and self.eager_runs:
                ratio = statistics.median(self.eager_backwards) / statistics.median(self.eager_runs)
            self._ratio = ratio
        return ratio

    def forget_eager_runs(self) -> None:
        """The eager calls timed so far no longer tell a call's time."""
        self.eager_runs.clear()
        self._ratio = None

    def ran_eagerly(self, seconds: float, key: Any = None) -> None:
        """A call ran eagerly in ``seconds``: an eager call's true time (of
        the graph of ``key``, if it is remembered), and a step of the streak
        towards a second chance."""
        if key is not None and key in self.seen:
            self.seen[key] = seconds
        self.run_seconds.append(seconds)
        self.eager_runs.append(seconds)
        self._ratio = None
        self.streak += seconds

    def refuse(self) -> str | None:
        """Why the next trace should not happen (None: trace)."""
        if not self.run_seconds or not self.active():
            return None
        eager = self.eager_estimate()
        next_extra = statistics.median(self.trace_extra) if self.trace_extra else 0.0
        if self.refusing and self.chances < CHANCES:
            deficit = max(self.extra + next_extra, next_extra, eager)
            if self.streak >= STREAK * 2**self.chances * deficit:
                self.chances += 1  # a second chance: one trace, on a clean slate
                self.extra = 0.0
                self.streak = 0.0
                self.recent.clear()
                self.refusing = False
                return None
        reason = None
        whole = self.whole_call()
        if self.extra > ALLOWANCE * whole:
            reason = (
                f"tracing has cost {self.trace_seconds:.3g} s, which the replays have not "
                f"paid back (an eager call and its backward take about {whole:.3g} s)"
            )
        traced = sum(self.recent)
        if reason is None and len(self.recent) == WINDOW and traced >= MOSTLY and self.extra > 0:
            reason = f"{traced} of the last {WINDOW} calls traced again"
        if reason is not None and not self.refusing:
            self.refusing = True
            self.streak = 0.0
        return reason
