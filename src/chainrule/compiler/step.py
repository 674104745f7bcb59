"""A compiled training step: ``chainrule.compile(loss_fn, optimizer=opt)``.

A call is one step of training: ``loss = loss_fn(*args)``, then
``opt.zero_grad()``, ``loss.backward()`` and ``opt.step()``; it returns the
loss. When the loss is a replay, the last three run on arrays: the
program's backward pass gives every leaf's gradient in one array, the
parameters' data come from the replay's buffer, the optimizer updates
them all at once (:meth:`chainrule.optim.Optimizer.step_arrays`), and
each parameter's ``.data`` and ``.grad`` are written once, in one loop.
Reading and writing the parameters one attribute at a time is most of a
replayed step of a model of a few thousand parameters; this does it twice
instead of six times.

The numbers are those of the three calls, bit for bit: the gradients of
``backward()`` (from zero), the update of ``step()`` (the same array
update as its own), each parameter's gradient left in ``.grad`` as
``backward()`` leaves it. Leaves that are not the optimizer's parameters
get their gradient added, as ``backward()`` adds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor.floatpack import to_array
from .program import Program


class Layout:
    """Where an optimizer's parameters are among a program's leaves."""

    def __init__(self, program: Program, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.params = list(optimizer.params)  # what it was made for
        # each parameter's positions (one listed twice has two); Values hash by identity
        self.positions: dict[Any, list[int]] = {}
        for i, p in enumerate(self.params):
            self.positions.setdefault(p, []).append(i)
        slot_of = {leaf: slot for slot, leaf in enumerate(program.live)}
        live = [(i, slot_of[p]) for i, p in enumerate(self.params) if p in slot_of]
        self.where = np.array([i for i, _ in live], dtype=np.intp)  # their positions...
        self.slots = np.array([slot for _, slot in live], dtype=np.intp)  # ...and slots
        # parameters the program does not read: their data read at each step
        self.outside = sorted(set(range(len(self.params))) - set(self.where.tolist()))
        # leaves that are not parameters: gradients added, as backward() does
        self.others = [(leaf, slot) for leaf, slot in slot_of.items() if leaf not in self.positions]

    def holds(self, optimizer: Any) -> bool:
        return self.optimizer is optimizer and self.params == optimizer.params


def train(program: Program, val: np.ndarray, root: int, call: Any, optimizer: Any) -> None:
    """``optimizer.zero_grad()``, the backward pass of ``root`` and
    ``optimizer.step()`` for a replay (``val``: its buffer; ``call``: its
    arguments); every parameter a Value (:meth:`optimizer.on_arrays`)."""
    layout = program.layouts.get(optimizer)
    if layout is None or not layout.holds(optimizer):
        layout = program.layouts[optimizer] = Layout(program, optimizer)
    params = layout.params
    grad = program.leaf_gradients(val, root, 1.0, call)
    data = np.empty(len(params))
    g = np.zeros(len(params))  # zero_grad()
    data[layout.where] = val.take(layout.slots)
    g[layout.where] = 0.0 + grad.take(layout.slots)  # backward(): 0.0 + d, as it adds
    if layout.outside:
        data[layout.outside] = to_array([params[i].data for i in layout.outside])
    # (as Value.backward adds: to a held gradient not zero; a leaf the walk
    # does not reach is left as it is)
    reached = program.reached_leaves(root, call)
    for leaf, slot in layout.others:
        if reached is None or reached[slot]:
            held = leaf.grad
            leaf.grad = held + grad.item(slot) if held != 0.0 else grad.item(slot)
    arg_values = call.values
    n_live = len(program.live)
    for k, (slot, pos) in enumerate(program.arg_leaves):
        v = arg_values[pos]
        at = layout.positions.get(v)
        if at is None:
            if reached is not None and not reached[n_live + k]:
                continue
            held = v.grad
            v.grad = held + grad.item(slot) if held != 0.0 else grad.item(slot)
        else:  # a parameter passed as an argument: its data read above (outside);
            # added, as backward() adds (one slot per Value: its sum in eager's order),
            # at each place the optimizer lists it
            g[at] += grad.item(slot)
    try:
        new = optimizer.step_arrays(data, g)
    except BaseException:  # (eagerly, zero_grad() and backward() ran before step() raised)
        for p, d in zip(params, g.tolist()):
            p.grad = d
        raise
    for p, x, d in zip(params, new.tolist(), g.tolist()):  # one loop: faster than two
        p.data = x
        p.grad = d
