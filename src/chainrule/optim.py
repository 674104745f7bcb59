"""Optimizers: ``SGD`` and ``Adam``, and a linear learning-rate decay.

An optimizer holds a list of parameters (anything with ``.data`` and
``.grad``) and updates ``.data`` from ``.grad`` in ``step()``. The updates
are plain arithmetic, so they work the same whether ``data`` and ``grad``
are floats (``Value``) or NumPy arrays (``Tensor``), and they follow
PyTorch's ``torch.optim`` step for step: from the same parameters and
gradients, one step gives the same numbers.

>>> from chainrule import Value
>>> from chainrule.optim import SGD
>>> w = Value(1.0)
>>> opt = SGD([w], lr=0.1)
>>> (w * w).backward()  # grad 2.0
>>> opt.step()
>>> w.data
0.8
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["SGD", "Adam", "LinearDecay", "Optimizer"]


class _Flat:
    """The parameters of a scalar model as float64 arrays: one NumPy update
    of all of them instead of a Python loop (when NumPy is installed and
    every parameter is a ``Value``). ``.data`` is read and written back
    and ``.grad`` read at every step (as arrays by
    :mod:`chainrule.tensor.floatpack`), so what the user sees is as the loop
    leaves it; the elementwise formulas are the loop's,
    operation for operation, so the numbers are the same bit for bit."""

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        self.n = len(params)

    @property
    def floatpack(self) -> Any:
        """:mod:`chainrule.tensor.floatpack` (NumPy is there); looked up, not
        held: a module in the state would keep ``copy.deepcopy`` and
        ``pickle`` of an optimizer from working."""
        from .tensor import floatpack

        return floatpack

    @staticmethod
    def of(params: list[Any]) -> _Flat | None:
        if sys.modules.get("numpy") is None:  # not imported yet (or blocked: None)
            try:
                import numpy  # noqa: F401
            except ImportError:  # the loop, as without NumPy
                return None
        from .value.engine import Value

        if not all(type(p) is Value for p in params):
            return None
        return _Flat(params)

    def grads(self) -> Any:
        """Every ``.grad`` as an array, or None when one is not a float or an
        int (a Value, after ``backward(create_graph=True)``; an int too big
        for a float): the loop then. Packing refuses them itself (see
        :mod:`chainrule.tensor.floatpack`), so the floats are read once."""
        grads = [p.grad for p in self.params]
        try:
            return self.floatpack.to_array(grads)
        except self.floatpack.NOT_A_NUMBER:
            return None

    def data(self) -> Any:
        return self.floatpack.to_array([p.data for p in self.params])

    def write(self, data: Any) -> None:
        for p, x in zip(self.params, data.tolist()):  # a plain loop: faster than map
            p.data = x

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = 0.0


def _np() -> Any:
    import numpy  # there whenever the flat path or a compiled step runs

    return numpy


def _gradient(p: Any) -> Any:
    """``p.grad`` as numbers. After ``backward(create_graph=True)`` it is a
    Value (or Tensor) with a graph of its own: the update takes its values,
    as PyTorch's does (its ``step`` runs under ``no_grad``), so ``p.data``
    stays a number (or an array)."""
    g = p.grad
    return g.data if isinstance(g, type(p)) else g


def _check_nonnegative(name: str, x: float) -> None:
    if not x >= 0.0:  # also rejects nan
        raise ValueError(f"{name} must be >= 0, got {x!r}")


def _is_parameter(x: Any) -> bool:
    return hasattr(x, "data") and hasattr(x, "grad")


def _parameter_list(params: Iterable[Any], name: str) -> list[Any]:
    """``params`` as a list of parameters, or a TypeError saying what to
    pass. A lone Tensor is refused, not iterated: its rows are copies, and
    updating them would leave the weights as they were."""
    if _is_parameter(params):
        what = type(params).__name__
        raise TypeError(f"{name}: pass a list of parameters, {name}([w], ...), not a single {what}")
    if hasattr(params, "parameters") and callable(params.parameters):
        raise TypeError(f"{name}: pass model.parameters(), not the model itself")
    try:
        out = list(params)
    except TypeError:
        raise TypeError(
            f"{name}: params must be a list of Values or Tensors, got {type(params).__name__}"
        ) from None
    if not out:
        raise ValueError(f"{name}: no parameters to optimize")
    for i, p in enumerate(out):
        if not _is_parameter(p):
            raise TypeError(
                f"{name}: parameter {i} is a {type(p).__name__}, not a Value or Tensor "
                "(something with .data and .grad)"
            )
    return out


#: Bytes of a model's parameter arrays from which an update parameter by
#: parameter runs on :func:`chainrule.get_num_threads` threads.
SPLIT_PARAMETER_BYTES = 1 << 20


def _each_parameter(params: list[Any], update: Any) -> None:
    """``update(i)`` for every parameter index: on the Tensor engine's
    threads at once when the parameters are arrays of
    :data:`SPLIT_PARAMETER_BYTES` or more in all (each parameter's update is
    its own, the same operations whichever thread runs it: the same bits),
    else one after the other."""
    sizes = [getattr(p.data, "nbytes", 0) for p in params]
    if len(params) > 1 and sum(sizes) >= SPLIT_PARAMETER_BYTES:
        from .threads import get_num_threads

        threads = get_num_threads()
        if threads > 1:
            from .tensor.blas import run_parts

            # the parameters in groups of about equal bytes, the largest first
            groups: list[list[int]] = [[] for _ in range(min(threads, len(params)))]
            loads = [0] * len(groups)
            for i in sorted(range(len(params)), key=lambda i: -sizes[i]):
                k = loads.index(min(loads))
                groups[k].append(i)
                loads[k] += sizes[i]

            def part(lo: int, hi: int) -> None:
                for group in groups[lo:hi]:
                    for i in group:
                        update(i)

            run_parts(len(groups), threads, part)
            return
    for i in range(len(params)):
        update(i)


class Optimizer:
    """The shared part: the parameter list, the learning rate ``lr`` (which
    a schedule may change between steps) and ``zero_grad()``."""

    def __init__(self, params: Iterable[Any], lr: float) -> None:
        self.params = _parameter_list(params, type(self).__name__)
        _check_nonnegative("lr", lr)
        self.lr = lr
        self._flat = _Flat.of(self.params)

    @property
    def params(self) -> list[Any]:
        """The parameters, in the order the optimizer's state (momentum,
        moments) is kept."""
        return self._params

    @params.setter
    def params(self, params: list[Any]) -> None:
        if "_params" in self.__dict__:  # (set once, by __init__)
            name = type(self).__name__
            raise AttributeError(
                f"{name}.params cannot be rebound: its state is kept per parameter, in "
                f"this order; make a new {name} for another set of parameters"
            )
        self._params = params

    def zero_grad(self) -> None:
        """Reset every parameter's gradient before the next backward, as its
        engine does: a Tensor's to ``None`` (``Tensor.zero_grad``, as
        PyTorch), a Value's to ``0.0`` (as micrograd)."""
        if self._flat is not None:
            self._flat.zero_grad()
            return
        for p in self.params:
            reset = getattr(p, "zero_grad", None)
            if reset is None:
                p.grad = 0.0
            else:
                reset()

    def step(self) -> None:
        """Update every parameter from its gradient (the subclass's rule):
        as one array update when every parameter is a Value holding a float
        gradient, else parameter by parameter."""
        self._advance()
        flat = self._flat
        if flat is not None:
            g = flat.grads()
            if g is not None:
                flat.write(self._updated(flat.data(), g))
                return
        self._loop()

    def on_arrays(self) -> bool:
        """Whether :meth:`step_arrays` can stand for :meth:`step` (and the
        compiled step's own zeroing for :meth:`zero_grad`): every parameter
        is a Value, NumPy is installed, and the optimizer is one of this
        module's classes. A subclass of the user's (its own ``step``,
        ``zero_grad``, an update that reads ``.grad``) gets its methods
        called, as eagerly."""
        cls = type(self)
        own = cls.__module__ == __name__ and cls._updated is not Optimizer._updated
        return (
            own
            and cls.step is _STEP
            and cls.zero_grad is _ZERO_GRAD
            and self._flat is not None
            # (a method set on the object itself: opt.step = clipped, a notebook's)
            and self.__dict__.keys().isdisjoint(_ARRAY_METHODS)
        )

    def step_arrays(self, data: Any, grad: Any) -> Any:
        """One :meth:`step` on arrays: the parameters' new data from their
        data and gradients, float64 arrays in the order of ``params`` (a
        compiled training step's update, :func:`chainrule.compile`). The
        optimizer's state advances as in :meth:`step`."""
        self._advance()
        return self._updated(data, grad)

    def _advance(self) -> None:
        """Count a step (Adam's bias correction)."""

    def _updated(self, data: Any, g: Any) -> Any:
        """The new data of all parameters, as arrays (the loop's numbers)."""
        raise NotImplementedError

    def _loop(self) -> None:
        """The update parameter by parameter."""
        raise NotImplementedError


#: Optimizer's own step and zeroing, as defined (a patch on the class is not them),
#: and the methods a compiled step's update on arrays stands for or calls
_STEP = Optimizer.step
_ZERO_GRAD = Optimizer.zero_grad
_ARRAY_METHODS = frozenset(("step", "zero_grad", "step_arrays", "_updated", "_advance"))


class SGD(Optimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD``.

    For each parameter: ``g = grad + weight_decay * data``; with momentum
    the velocity ``buf`` is ``g`` on the first step and
    ``momentum * buf + g`` after it, and ``g`` becomes ``buf`` (or
    ``g + momentum * buf`` with ``nesterov``); then ``data = data - lr * g``.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        _check_nonnegative("momentum", momentum)
        _check_nonnegative("weight_decay", weight_decay)
        if nesterov and momentum == 0.0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.nesterov = nesterov
        self._buffers: list[Any] = [None] * len(self.params)
        self._velocity: Any = None  # the buffers as one array, on the flat path

    @property
    def buffers(self) -> list[Any]:
        """Each parameter's velocity (None before its first step with a
        gradient), also after steps on the flat path."""
        if self._velocity is not None:  # the flat path's: as the loop keeps them
            self._buffers, self._velocity = self._velocity.tolist(), None
        return self._buffers

    @buffers.setter
    def buffers(self, value: list[Any]) -> None:
        self._buffers, self._velocity = value, None

    def _loop(self) -> None:
        lr, momentum, decay = self.lr, self.momentum, self.weight_decay
        buffers = self.buffers
        for i, p in enumerate(self.params):
            g = _gradient(p)
            if g is None:  # no gradient reached it: left alone, as PyTorch
                continue
            if decay:
                g = g + decay * p.data
            if momentum:
                # The first step starts the velocity at the gradient itself
                # (not at zero), as PyTorch does.
                # g * 1.0 copies an array gradient, so a later in-place update
                # of .grad cannot reach into the velocity.
                buf = g * 1.0 if buffers[i] is None else momentum * buffers[i] + g
                buffers[i] = buf
                g = g + momentum * buf if self.nesterov else buf
            p.data = p.data - lr * g

    def _updated(self, data: Any, g: Any) -> Any:
        if self.weight_decay:
            g = g + self.weight_decay * data
        if self.momentum:  # the velocity of all parameters, one array
            buf = self._velocity
            if buf is not None:
                buf = self.momentum * buf + g
            elif any(b is not None for b in self._buffers):  # the loop ran before
                np = _np()
                started = np.array([b is not None for b in self._buffers])
                before = np.array([0.0 if b is None else b for b in self._buffers], dtype=float)
                buf = np.where(started, self.momentum * before + g, g)
            else:
                buf = g * 1.0
            self._velocity = buf
            g = g + self.momentum * buf if self.nesterov else buf
        return data - self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction, as ``torch.optim.Adam``::

        m = m + (1 - beta1) * (g - m)          running mean of g
        v = beta2 * v + (1 - beta2) * g * g    running mean of g**2
        m_hat = m / (1 - beta1**t), v_hat = v / (1 - beta2**t)
        data = data - lr * m_hat / (sqrt(v_hat) + eps)

    ``weight_decay`` adds ``weight_decay * data`` to the gradient (L2, not
    AdamW's decoupled decay).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        beta1, beta2 = betas
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {beta!r}")
        _check_nonnegative("eps", eps)
        _check_nonnegative("weight_decay", weight_decay)
        self.betas = (beta1, beta2)
        self.eps = eps
        self.weight_decay = weight_decay
        self.t = 0
        # Scalar zeros: the first update broadcasts them to the gradient's
        # own type (a float, or an array of its shape and dtype).
        self.m: list[Any] = [0.0] * len(self.params)
        self.v: list[Any] = [0.0] * len(self.params)

    def _advance(self) -> None:
        self.t += 1

    def _corrections(self) -> tuple[float, float]:
        """The step size and the square root of the second bias correction,
        grouped as PyTorch groups them, so the roundings agree too."""
        beta1, beta2 = self.betas
        return self.lr / (1 - beta1**self.t), (1 - beta2**self.t) ** 0.5

    def _loop(self) -> None:
        beta1, beta2 = self.betas
        decay, eps = self.weight_decay, self.eps
        step_size, correction2_sqrt = self._corrections()
        m, v = self.m, self.v

        def update(i: int) -> None:
            p = self.params[i]
            g = _gradient(p)
            if g is None:  # no gradient reached it: left alone, as PyTorch
                return
            if decay:
                g = g + decay * p.data
            if _own_moments(p.data, g, m[i], v[i]):
                p.data = _adam_in_place(self, p.data, g, m[i], v[i], step_size, correction2_sqrt)
                return
            m[i] = m[i] + (1 - beta1) * (g - m[i])
            v[i] = v[i] * beta2 + (1 - beta2) * g * g
            denom = v[i] ** 0.5 / correction2_sqrt + eps
            p.data = p.data - step_size * m[i] / denom

        _each_parameter(self.params, update)

    def _updated(self, data: Any, g: Any) -> Any:
        """The loop's update on arrays, operation for operation (``np.power``
        is C's ``pow``, as Python's ``**``)."""
        np = _np()
        beta1, beta2 = self.betas
        step_size, correction2_sqrt = self._corrections()
        if self.weight_decay:
            g = g + self.weight_decay * data
        m: Any = np.asarray(self.m, dtype=float)  # lists until the first flat step
        v: Any = np.asarray(self.v, dtype=float)
        # The loop's operations in its order, each into a fresh array or in
        # place into a temporary one (the same numbers, fewer arrays made):
        # m + (1 - beta1) * (g - m)
        dm = np.subtract(g, m)
        dm *= 1 - beta1
        m = np.add(m, dm, out=dm)
        # v * beta2 + (1 - beta2) * g * g
        gg = np.multiply(1 - beta2, g)
        gg *= g
        v = np.multiply(v, beta2)
        v += gg
        # v ** 0.5 / correction2_sqrt + eps
        denom = np.power(v, 0.5, out=gg)
        denom /= correction2_sqrt
        denom += self.eps
        # data - step_size * m / denom
        update = np.multiply(step_size, m)
        update /= denom
        self.m, self.v = m, v
        return np.subtract(data, update, out=update)


def _own_moments(data: Any, g: Any, m: Any, v: Any) -> bool:
    """Whether Adam's moments ``m`` and ``v`` are arrays it may update in
    place (after the first step, which makes them): writeable, of the
    gradient's shape and dtype, as the parameter's data is."""
    arrays = (data, g, m, v)
    if not all(hasattr(a, "flags") for a in arrays):  # floats, or a first step's zeros
        return False
    same = all(a.dtype == g.dtype and a.shape == g.shape for a in arrays)
    return same and m.flags.writeable and v.flags.writeable


def _adam_in_place(
    adam: Adam, data: Any, g: Any, m: Any, v: Any, step_size: float, correction2_sqrt: float
) -> Any:
    """The loop's update of one array parameter, operation for operation
    (the same numbers), with ``m`` and ``v`` updated in place and two
    temporaries instead of a new array per operation: the new data (a new
    array, as the loop's)."""
    np = _np()
    beta1, beta2 = adam.betas
    t = np.subtract(g, m)  # m + (1 - beta1) * (g - m)
    t *= 1 - beta1
    m += t
    v *= beta2  # v * beta2 + (1 - beta2) * g * g
    np.multiply(1 - beta2, g, out=t)
    t *= g
    v += t
    denom = np.sqrt(v, out=t)  # v ** 0.5 / correction2_sqrt + eps
    denom /= correction2_sqrt
    denom += adam.eps
    update = np.multiply(step_size, m)  # data - step_size * m / denom
    update /= denom
    return np.subtract(data, update, out=update)


class LinearDecay:
    """Lower an optimizer's learning rate linearly, from its value when the
    schedule is made down to ``end_factor`` times that over ``total_steps``
    calls to ``step()``, then hold it.

    After ``k`` steps the rate is ``lr0 * (1 - (1 - end_factor) * k / total_steps)``;
    with ``lr0 = 1``, ``end_factor = 0.1`` and 100 steps that is micrograd's
    demo schedule ``1.0 - 0.9 * k / 100``.

    >>> from chainrule import Value
    >>> opt = SGD([Value(0.0)], lr=1.0)
    >>> schedule = LinearDecay(opt, total_steps=100, end_factor=0.1)
    >>> for _ in range(50):
    ...     schedule.step()
    >>> opt.lr
    0.55
    """

    def __init__(self, optimizer: Optimizer, total_steps: int, end_factor: float = 0.1) -> None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
            raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")
        if not 0.0 <= end_factor <= 1.0:
            raise ValueError(f"end_factor must be in [0, 1], got {end_factor!r}")
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.total_steps = total_steps
        self.end_factor = end_factor
        self.steps_done = 0

    def lr_at(self, k: int) -> float:
        """The learning rate after ``k`` steps."""
        k = min(k, self.total_steps)
        return self.base_lr * (1.0 - (1.0 - self.end_factor) * k / self.total_steps)

    def step(self) -> None:
        """Count one step and set the optimizer's ``lr`` to ``lr_at(steps done)``."""
        self.steps_done += 1
        self.optimizer.lr = self.lr_at(self.steps_done)
