"""What the Tensor training commands (``gpt``, ``digits``) share: the
libraries they need, the settings a resumed run must keep, the checkpoint
a new run must not overwrite, and checks of a checkpoint's run state."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import CommandError
from .preflight import LOADING_BYTES, check_memory, would_load


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not x > 0.0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return x


def require_tensor(extras: str) -> Any:
    """NumPy (returned) and safetensors, or a :class:`CommandError` saying
    how to install them (``extras``: the checkout's extras, ``tensor``...)."""
    if not would_load("numpy"):
        check_memory(LOADING_BYTES["numpy"], "loading NumPy", "raise the memory limit (ulimit -v)")
    try:
        import numpy
    except ImportError:
        raise CommandError(
            f"needs NumPy: pip install numpy (in a checkout: pip install -e '.[{extras}]')"
        ) from None
    try:
        import safetensors  # noqa: F401  (the checkpoints)
    except ImportError:
        raise CommandError(
            "needs safetensors for its checkpoints: pip install safetensors "
            f"(in a checkout: pip install -e '.[{extras}]')"
        ) from None
    return numpy


def check_overwrite(args: argparse.Namespace, path: Path) -> None:
    """A new run does not silently replace another run's checkpoint."""
    if not args.resume and not args.force and path.exists():
        raise CommandError(
            f"{path} exists (another run's checkpoint): --resume continues it, "
            "--force overwrites it, or choose another --out"
        )


def settings_from(
    names: Any, args: argparse.Namespace, saved: dict[str, Any] | None, defaults: dict[str, Any]
) -> dict[str, Any]:
    """The run's settings ``names``: the command line's, else the
    checkpoint's (on resume), else ``defaults``. On resume a setting given
    on the command line must agree with the checkpoint."""
    values = {}
    for name in names:
        given = getattr(args, name)
        if saved is not None:
            if given is not None and given != saved[name]:
                flag = "--" + name.replace("_", "-")
                raise CommandError(
                    f"{flag} {given} differs from the checkpoint's {saved[name]}; "
                    "leave it out to resume"
                )
            values[name] = saved[name]
        else:
            values[name] = defaults[name] if given is None else given
    return values


def whole(x: Any, least: int) -> bool:
    """``x`` is an int (not a bool, not a float) of at least ``least``."""
    return type(x) is int and x >= least


def moment(saved: dict[str, Any], name: str, param: Any, dtype: str) -> Any:
    """An Adam moment from a checkpoint, of its parameter's shape."""
    import numpy as np

    m = np.array(saved[name], dtype=dtype)
    if m.shape != param.data.shape:
        raise ValueError(f"{name}: shape {m.shape}, the parameter's {param.data.shape}")
    return m


def add_checkpoint_options(
    parser: argparse.ArgumentParser, checkpoint: str, out_help: str, until: str
) -> None:
    """``--out DIR``, ``--resume`` and ``--force`` for a command that keeps
    its run in ``DIR/checkpoint``; ``until`` names the option that counts
    the whole run (``--steps``, ``--epochs``)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("out"),
        metavar="DIR",
        help=f"directory for {out_help} (default out)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"continue from DIR/{checkpoint} up to {until} in total",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"start a new run even if DIR/{checkpoint} exists, overwriting it",
    )


def adam_state(optimizer: Any, names: list[str]) -> dict[str, Any]:
    """An Adam optimizer's state for a checkpoint: the step count and each
    parameter's moments by name."""
    return {
        "t": optimizer.t,
        "m": dict(zip(names, optimizer.m)),
        "v": dict(zip(names, optimizer.v)),
    }


def restore_adam(optimizer: Any, state: dict[str, Any], names: list[str], dtype: str) -> None:
    """:func:`adam_state` put back; KeyError, TypeError or ValueError for a
    state that does not fit the parameters (nothing is changed then)."""
    params = optimizer.params
    m = [moment(state["m"], n, p, dtype) for n, p in zip(names, params)]
    v = [moment(state["v"], n, p, dtype) for n, p in zip(names, params)]
    optimizer.m, optimizer.v, optimizer.t = m, v, state["t"]


def save_checkpoint(model: Any, path: Path, metadata: dict[str, Any], optimizer: Any) -> None:
    """:func:`chainrule.tensor.checkpoint.save`, a failure as one line."""
    from ..tensor import checkpoint

    try:
        checkpoint.save(model, path, metadata=metadata, optimizer=optimizer)
    except OSError as e:  # the file that failed: the model's or the optimizer's
        raise CommandError(f"cannot write {e.filename or path} ({e.strerror or e})") from None
    except (ValueError, ImportError) as e:
        raise CommandError(f"cannot write {path} ({e})") from None


# ----------------------------------------------------------------------------
# a checkpoint checked as a whole before a resumed run starts
# ----------------------------------------------------------------------------

#: PCG64's state: two 128-bit words (the increment odd) and a buffered 32-bit half.
_PCG64_FIELDS = {"state": 128, "inc": 128, "uinteger": 32}


def random_state_problem(state: Any) -> str | None:
    """What is wrong with a saved ``numpy.random.PCG64`` state (the batch
    sampler's), as ``rng.FIELD = VALUE, must be ...``; None when it is one
    numpy itself could have written."""
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        return f"rng = {_short(state)}, must be a numpy PCG64 state"
    inner = state.get("state")
    if not isinstance(inner, dict) or set(inner) != {"state", "inc"}:
        return f"rng.state = {_short(inner)}, must hold 'state' and 'inc'"
    for key, bits in _PCG64_FIELDS.items():
        value = state.get(key) if key == "uinteger" else inner[key]
        where = f"rng.{key}" if key == "uinteger" else f"rng.state.{key}"
        if not (whole(value, 0) and value < 2**bits):
            return f"{where} = {_short(value)}, must be an int in [0, 2**{bits})"
    if inner["inc"] % 2 == 0:
        return f"rng.state.inc = {inner['inc']}, must be odd (PCG64's increment)"
    if state.get("has_uint32") not in (0, 1) or type(state.get("has_uint32")) is not int:
        return f"rng.has_uint32 = {_short(state.get('has_uint32'))}, must be 0 or 1"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _exactly(array: Any, like: Any, field: str) -> tuple[Any, bool]:
    """``array`` in the dtype of ``like`` (the model's array), and whether it
    had to be converted; a ValueError naming ``field`` when it has another
    shape, is not finite, is of another kind (an int where the model holds
    floats), or would be changed by the conversion."""
    import numpy as np

    a = np.asarray(array)
    like = np.asarray(like)
    dtype = like.dtype
    if a.shape != like.shape:
        raise ValueError(f"{field}: shape {a.shape}, the model's {like.shape}")
    if a.dtype.kind != dtype.kind or a.dtype.kind not in "fiu":
        raise ValueError(f"{field} is {a.dtype}, the model holds {dtype}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError(f"{field} is not finite (it holds nan or inf)")
    if a.dtype == dtype:
        return a, False
    with np.errstate(all="ignore"):
        converted = a.astype(dtype)
    same = np.array_equal(converted.astype(a.dtype), a)
    if not same or (dtype.kind == "f" and not np.isfinite(converted).all()):
        raise ValueError(f"{field} is {a.dtype}, and {dtype} (the model's) cannot hold it exactly")
    return converted, True


def check_resumed(
    saved: dict[str, Any], rng: Any, model: Any, names: list[str], dtype: str, path: Path
) -> None:
    """A checkpoint checked as a whole before training resumes from it, in
    place: every tensor (parameters, buffers, Adam's moments) finite and of
    the dtype the model holds, or converted to it exactly (a note says so);
    Adam's second moments not negative; the batch sampler's random state
    one numpy could have written. Anything else is one line naming the
    field (a CommandError): a run never starts from a file it would
    diverge on or misread."""
    import sys

    import numpy as np

    def refuse(problem: str) -> CommandError:
        return CommandError(f"--resume: {path}: {problem}")

    problem = random_state_problem(rng)
    if problem:
        raise refuse(f"bad random state ({problem})")
    converted: list[str] = []
    parameters = saved["parameters"]
    try:
        held = model.state_dict()
        for name, like in held.items():
            if name in parameters:
                array, changed = _exactly(parameters[name], like, repr(name))
                parameters[name] = array
                converted += [name] * changed
        for group in ("m", "v"):
            moments = saved["optimizer"][group]
            for name in names:
                if name not in moments:
                    continue
                field = f"Adam's {group} of {name!r}"
                like = np.empty(np.shape(held[name]), dtype=dtype)
                array, changed = _exactly(moments[name], like, field)
                if group == "v" and (array < 0).any():
                    raise ValueError(f"{field} is negative (a second moment is a mean of squares)")
                moments[name] = array
                converted += [f"{group}.{name}"] * changed
    except ValueError as e:
        raise refuse(str(e)) from None
    if converted:
        print(
            f"note: {path}: {len(converted)} tensor(s) ({_short(', '.join(converted))}) "
            f"converted exactly to the model's dtype",
            file=sys.stderr,
        )
