"""When tracing does not pay: the account that stops new traces.

A trace costs more than an eager call (it runs the function under watch,
then captures its graph); a replay costs much less. Compiling pays when
the traces are replayed often enough. :class:`Budget` keeps the account in
seconds: the *extra* time that traces cost beyond an eager call, minus
what replays have saved against one. Before a new trace, compile asks
:meth:`Budget.refuse`: it refuses when that trace would take the extra
beyond :data:`ALLOWANCE` eager calls, whatever a trace costs against a
call (a cheap function whose trace costs fifty calls is refused as soon as
it does not pay, a dear one likewise), or when most of the last
:data:`WINDOW` calls traced at a loss (``torch.compile``'s recompile limit).

Refused, the call runs eagerly (one warning, the first time, naming the
argument that changes and how it was used); the traces kept still replay.
So a loop whose every call traces costs at most about ``ALLOWANCE`` eager
calls more than running eagerly from the start. A function that settles
later gets a second chance: after an eager streak of :data:`STREAK` times
the account's deficit, one more trace is allowed (at most
:data:`CHANCES` times, each streak twice as long as the one before).
"""

from __future__ import annotations

import collections
import math
import statistics

#: Extra eager calls' worth of tracing that replays have not paid back.
ALLOWANCE = 2.0
#: How many times slower a traced run is than an eager call, until an eager
#: call is timed (watching every operation; measured 3 to 9 on small functions).
WATCHED = 4.0
#: An eager backward pass's time per second of its forward (the engine's
#: walk and chain rule: about twice, on micrograd's and microgpt's graphs).
BACKWARD = 2.0
#: The recent calls looked at, and how many of them tracing means "most".
WINDOW = 16
MOSTLY = 12
#: A second chance after an eager streak this many times the deficit...
STREAK = 20.0
#: ... at most this many times.
CHANCES = 3


class Budget:
    """The account of one compiled function (times in seconds)."""

    def __init__(self) -> None:
        self.trace_seconds = 0.0  # every trace, whole
        self.replay_seconds = 0.0  # every replay, forward and backward
        self.extra = 0.0  # traces beyond an eager call, minus replays' savings
        self.run_seconds: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.trace_extra: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.recent: collections.deque[bool] = collections.deque(maxlen=WINDOW)  # traced?
        self.streak = 0.0  # eager seconds since tracing was refused
        # a replay's forward against an eager call's (not a traced run's, which
        # the watching slows): a function too small to gain runs eagerly
        self.replays: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.traced_runs: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.eager_backwards: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.eager_runs: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.chances = 0  # second chances given
        self.refusing = False

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

    def needs_sample(self) -> bool:
        """Whether a call with a new graph should run eagerly, timed, before
        the account decides on another trace (once: no eager call timed yet)."""
        return bool(self.traced_runs) and not self.eager_runs and math.isfinite(ALLOWANCE)

    def traced(self, seconds: float, run_seconds: float) -> None:
        """A trace took ``seconds``, of which ``fn`` ran ``run_seconds``
        (the extra: all of it but an eager call's worth)."""
        self.trace_seconds += seconds
        self.run_seconds.append(run_seconds)
        self.traced_runs.append(run_seconds)
        extra = seconds - run_seconds * self.calibration()
        self.trace_extra.append(max(extra, 0.0))
        self.extra += extra
        self.recent.append(True)

    def replayed(self, seconds: float, eager_seconds: float) -> None:
        """A replay's forward took ``seconds``; eagerly it took about
        ``eager_seconds`` (its trace's run)."""
        self.replay_seconds += seconds
        self.extra -= eager_seconds * self.calibration() - seconds
        self.recent.append(False)
        self.replays.append(seconds)

    def wants_eager_sample(self) -> bool:
        """Whether the next call should run eagerly to time it: replays are
        not clearly faster than the traced runs' estimate, and no eager
        call has been timed yet."""
        return (
            not self.eager_runs
            and len(self.replays) >= 2
            and math.isfinite(ALLOWANCE)
            and statistics.median(self.replays) > 0.5 * self.eager_estimate()
        )

    def replays_lose(self) -> str | None:
        """Why replays should stop (they take longer than eager calls), or None."""
        if len(self.eager_runs) < 1 or len(self.replays) < 3:
            return None
        replay, eager = statistics.median(self.replays), statistics.median(self.eager_runs)
        if replay < eager:
            return None
        return (
            f"a replay takes {replay * 1e6:.0f} us, an eager call {eager * 1e6:.0f} us: "
            "the function is too small to gain from compiling"
        )

    def backward(self, seconds: float, eager_seconds: float) -> None:
        """A replay's backward took ``seconds``; the eager backward it
        replaces is estimated as :data:`BACKWARD` times the eager forward
        (``eager_seconds``: its trace's run)."""
        self.replay_seconds += seconds
        self.extra -= eager_seconds * self.calibration() * self.backward_ratio() - seconds

    def ran_backward_eagerly(self, seconds: float) -> None:
        """An eager call's backward (and update) took ``seconds``."""
        self.eager_backwards.append(seconds)

    def backward_ratio(self) -> float:
        """An eager backward's time per second of an eager forward."""
        if self.eager_backwards and self.eager_runs:
            return statistics.median(self.eager_backwards) / statistics.median(self.eager_runs)
        return BACKWARD

    def ran_eagerly(self, seconds: float) -> None:
        """A call ran eagerly (tracing refused) in ``seconds``: an eager
        call's true time, and a step of the streak towards a second chance."""
        self.run_seconds.append(seconds)
        self.eager_runs.append(seconds)
        self.streak += seconds

    def refuse(self) -> str | None:
        """Why the next trace should not happen (None: trace)."""
        if not self.run_seconds:
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
        whole = eager * (1.0 + self.backward_ratio())  # an eager call with its backward
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
