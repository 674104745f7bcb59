"""What a gradient check found: each mismatch, the report, the error it raises."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mismatch:
    """One derivative where the engine and finite differences disagree.

    ``index`` is ``(i,)`` for ``df/dx_i`` and ``(i, j)`` for
    ``d²f/dx_i dx_j``. For Tensor inputs ``element`` holds the element of
    each of those inputs (``((1, 2),)``: ``df/dx0[1, 2]``).
    """

    order: int
    index: tuple[int, ...]
    analytic: float
    numeric: float
    element: tuple[tuple[int, ...], ...] = ()

    @property
    def name(self) -> str:
        """The derivative's name, ``df/dx0`` (for an array with the element, ``df/dx0[1, 2]``)."""
        parts = [
            f"dx{i}" + (f"[{', '.join(map(str, self.element[n]))}]" if self.element else "")
            for n, i in enumerate(self.index)
        ]
        return ("df/" if self.order == 1 else "d²f/") + "".join(parts)

    def __str__(self) -> str:
        return f"{self.name}: analytic {self.analytic!r}, numeric {self.numeric!r}"


class GradcheckReport:
    """What :func:`gradcheck` found: every mismatch, and how many
    derivatives it checked. True when everything agreed.

    >>> from chainrule import gradcheck
    >>> report = gradcheck(lambda x, y: x * y.exp(), [2.0, 0.5])
    >>> bool(report), report.checked, report.mismatches
    (True, 2, [])
    """

    def __init__(
        self,
        mismatches: list[Mismatch],
        checked: int,
        order: int,
        op: str | None = None,
        culprit: str = "",
    ) -> None:
        self.mismatches = mismatches
        self.checked = checked
        self.order = order
        #: For Tensor functions, the first op whose VJP disagrees with finite
        #: differences on its own (None when none was singled out), and why.
        self.op = op
        self.culprit = culprit

    @property
    def worst(self) -> Mismatch | None:
        """The mismatch with the largest error, if any."""
        return max(self.mismatches, key=_error, default=None)

    @property
    def ok(self) -> bool:
        """True when every derivative agreed (also the report's truth value)."""
        return not self.mismatches

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        noun = "derivative" if self.checked == 1 else "derivatives"
        head = f"gradcheck (order {self.order}): {self.checked} {noun} checked, "
        if self.ok:
            return head + "all agree with finite differences"
        count = len(self.mismatches)
        verb = "disagrees" if count == 1 else "disagree"
        lines = [head + f"{count} {verb} with finite differences:"]
        lines.extend(f"  {m}" for m in self.mismatches[:_SHOWN])
        if count > _SHOWN:
            lines.append(f"  ... and {count - _SHOWN} more; worst: {self.worst}")
        if self.culprit:
            lines.append(self.culprit)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<GradcheckReport order={self.order} checked={self.checked} "
            f"mismatches={self.mismatches!r}>"
        )


_SHOWN = 10  # mismatches a report prints


def _error(m: Mismatch) -> float:
    error = abs(m.analytic - m.numeric)
    return error if error == error else float("inf")  # nan: the worst


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck(..., raise_exception=True)``; ``.report`` has
    the details."""

    def __init__(self, report: GradcheckReport) -> None:
        super().__init__(str(report))
        self.report = report


def _agree(analytic: float, numeric: float, atol: float, rtol: float) -> bool:
    # torch.allclose's rule; nan never agrees, not even with nan.
    return abs(analytic - numeric) <= atol + rtol * abs(numeric)
