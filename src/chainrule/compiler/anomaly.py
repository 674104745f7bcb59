"""``detect_anomaly`` through a compiled output's backward pass.

Eagerly, the detector watches every term of the walk (``local * g`` for
one input of one node) and stops at the first that is nan or inf while
its node's incoming gradient ``g`` is finite (a number operand's term
aside). A replay's backward makes the same terms group by group
(:mod:`chainrule.compiler.program`); under an observer, the compiled
output's backward first makes them again, keeping each group's incoming
gradients, and raises the eager error for the first such term in the
eager pass's order (``Program.term_rank``). Without an observer, nothing
of this runs: a replay's backward costs what it did.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..check.anomaly import backward_anomaly
from .program import Group, Program, SumGroup

#: A term the detector stops at: (its place in the eager pass, its group,
#: its input row, its node's column, the term, the node's incoming gradient).
Found = tuple[int, Group, int, int, float, float]


def check_backward(program: Program, val: np.ndarray, root: int, seed: float, call: Any) -> None:
    """Raise the ``AnomalyError`` the eager walk from slot ``root`` (seeded
    with ``seed``) would raise, if any: before any ``.grad`` is touched."""
    seen, grads = program.node_gradients(val, root, seed, call)
    first: Found | None = None
    with np.errstate(all="ignore"):
        for step in program.steps:
            if not isinstance(step, Group):  # a gather passes g on; a recipe has none
                continue
            g = grads.get((step.start, step.stop))
            if g is not None:
                found = _first_in(program, step, val, g, seen[step.start : step.stop])
                if found is not None and (first is None or found[0] < first[0]):
                    first = found
    if first is not None:
        raise _error(val, *first[1:])


def _first_in(
    program: Program, step: Group, val: np.ndarray, g: np.ndarray, reached: np.ndarray
) -> Found | None:
    """The group's first term (by ``term_rank``) that is nan or inf from a
    finite incoming gradient, to an input that is not a number operand."""
    terms = np.empty(step.matrix.shape)
    step.backward(val, g, terms, None if reached.all() else reached)
    bad = ~np.isfinite(terms) & (np.isfinite(g) & reached) & ~program.numbers[step.matrix]
    if not bad.any():
        return None
    rows, columns = np.nonzero(bad)
    ranks = program.term_rank[step.first_term + rows * step.matrix.shape[1] + columns]
    k = int(np.argmin(ranks))
    r, c = int(rows[k]), int(columns[k])
    return int(ranks[k]), step, r, c, float(terms[r, c]), float(g[c])


def _error(val: np.ndarray, step: Group, r: int, c: int, term: float, g: float) -> Exception:
    """The eager message for input row ``r`` of the group's node ``c``: its
    op, inputs and output from the buffer. A running sum's product term is
    eagerly a ``*`` node of its two factors (its gradient the sum's: ``+``
    passes it as it is), a plain term a ``+``."""
    column = step.matrix[:, c]
    if type(step) is SumGroup:
        kinds = step.const[0]
        row = 0
        for kind in kinds:  # the term whose inputs hold row r
            if r < row + kind:
                break
            row += kind
        slots = column[row : row + kind]
        op = "*" if kind == 2 else "+"
        inputs = tuple(val[slots].tolist())
        output = inputs[0] * inputs[1] if kind == 2 else float(val[step.start + c])
        r -= row
    else:
        slots, op = column, step.fn.name
        inputs = tuple(val[slots].tolist())
        output = float(val[step.start + c])
    position = int(np.flatnonzero(slots == slots[r])[0])  # a child's first place, as eagerly
    return backward_anomaly(op, inputs, output, position, term, g)
