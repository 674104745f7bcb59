"""When compiling does not pay: the account that sends a function back to
eager execution.

A trace costs more than an eager call (it runs the function under watch,
then captures its graph); a replay costs much less. Compiling pays when
the traces are replayed often enough. :class:`Budget` keeps the account,
in the units of the function's own eager time (estimated by the traced
runs): the *extra* time that traces cost beyond an eager call, minus what
replays have saved against one. Before a new trace, compile asks
:meth:`Budget.refuse`: it refuses when

* that trace would take the extra beyond :data:`ALLOWANCE` eager calls
  and :data:`SECONDS` (tracing cost not paid back), or
* most of the last :data:`WINDOW` calls were traces (:data:`MOSTLY`) and
  the account is in the red: the arguments give a new graph on most
  calls, as ``torch.compile``'s recompile limit judges.

The function then runs eagerly from then on, with one warning: a loop
whose every call traces costs at most about ``ALLOWANCE`` eager calls
more than running eagerly from the start.
"""

from __future__ import annotations

import collections
import statistics

#: Extra eager calls' worth of tracing that replays have not paid back...
ALLOWANCE = 4.0
#: ... beyond this many seconds, which are never worth a warning.
SECONDS = 0.05
#: The recent calls looked at, and how many of them tracing means "most".
WINDOW = 16
MOSTLY = 12


class Budget:
    """The account of one compiled function (times in seconds)."""

    def __init__(self) -> None:
        self.trace_seconds = 0.0  # every trace, whole
        self.replay_seconds = 0.0  # every replay, forward and backward
        self.extra = 0.0  # traces beyond an eager call, minus replays' savings
        self.run_seconds: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.trace_extra: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.recent: collections.deque[bool] = collections.deque(maxlen=WINDOW)  # traced?

    def eager_estimate(self) -> float:
        """An eager call's time: the median of the traced runs."""
        return statistics.median(self.run_seconds) if self.run_seconds else 0.0

    def traced(self, seconds: float, run_seconds: float) -> None:
        """A trace took ``seconds``, of which ``fn`` ran ``run_seconds``."""
        self.trace_seconds += seconds
        self.run_seconds.append(run_seconds)
        self.trace_extra.append(max(seconds - run_seconds, 0.0))
        self.extra += seconds - run_seconds
        self.recent.append(True)

    def replayed(self, seconds: float, eager_seconds: float) -> None:
        """A replay's forward took ``seconds``; eagerly it took about
        ``eager_seconds`` (its trace's run)."""
        self.replay_seconds += seconds
        self.extra -= eager_seconds - seconds
        self.recent.append(False)

    def backward(self, seconds: float) -> None:
        """A replay's backward took ``seconds`` (time only: the eager
        backward it replaces is not measured, so it earns nothing)."""
        self.replay_seconds += seconds

    def refuse(self) -> str | None:
        """Why the next trace should not happen (None: trace)."""
        if not self.run_seconds:
            return None
        eager = self.eager_estimate()
        next_extra = statistics.median(self.trace_extra)
        if self.extra + next_extra > ALLOWANCE * eager + SECONDS:
            return (
                f"tracing has cost {self.trace_seconds:.3g} s, which the replays have not "
                f"paid back (an eager call takes about {eager:.3g} s)"
            )
        traced = sum(self.recent)
        if len(self.recent) == WINDOW and traced >= MOSTLY and self.extra > SECONDS:
            return f"{traced} of the last {WINDOW} calls traced again"
        return None
