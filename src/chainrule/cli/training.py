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
