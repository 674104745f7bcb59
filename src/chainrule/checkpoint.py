"""Checkpoints: a model's parameters in a JSON file.

JSON, never pickle: loading a checkpoint runs no code, and a person can
read it. The file names its format and version, describes the
architecture (``model.config()``), lists every parameter by name, and
carries a SHA-256 digest of the architecture and parameters so that a
truncated or edited file is recognised::

    {"format": "chainrule-checkpoint", "version": 1,
     "architecture": {"type": "MLP", "nin": 2, "nouts": [16, 16, 1], "activation": "relu"},
     "parameters": {"layers.0.neurons.0.w.0": 0.2355..., ...},
     "sha256": "...", "metadata": {...}}

Saving is atomic: the JSON goes to a temporary file beside the target,
which is flushed to disk and then renamed over it, so a crash leaves either
the old file or the new one, never half of one. Loading checks everything
before it touches the model; on any problem it raises
:class:`CheckpointError` and the model is unchanged.

>>> import random, tempfile, os
>>> from chainrule.nn import MLP
>>> from chainrule import checkpoint
>>> random.seed(0)
>>> model = MLP(2, [4, 1])
>>> path = os.path.join(tempfile.mkdtemp(), "model.json")
>>> checkpoint.save(model, path, metadata={"step": 10})
>>> restored = checkpoint.load_model(path)
>>> restored.state_dict() == model.state_dict()
True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from .module import BaseModule
from .nn import MLP

__all__ = ["FORMAT", "VERSION", "CheckpointError", "load", "load_model", "read", "save"]

FORMAT = "chainrule-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded, with the reason in one line."""


def _digest(architecture: Any, parameters: Any) -> str:
    canonical = json.dumps(
        {"architecture": architecture, "parameters": parameters},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _plain(x: Any) -> Any:
    """A parameter value as JSON data: a float, or nested lists for an array."""
    tolist = getattr(x, "tolist", None)
    return tolist() if tolist is not None else x


def _finite(x: Any) -> bool:
    if isinstance(x, list):
        return all(_finite(e) for e in x)
    return math.isfinite(x)


def save(
    model: BaseModule, path: str | os.PathLike[str], *, metadata: dict[str, Any] | None = None
) -> None:
    """Write ``model``'s architecture and parameters to ``path`` atomically.

    ``metadata`` (JSON-ready: step, loss, seed, ...) is stored alongside and
    returned by :func:`read`. Raises ``ValueError`` for a parameter that is
    nan or infinite (JSON has no such numbers), ``OSError`` if the file
    cannot be written; in both cases an existing file at ``path`` is left
    as it was.
    """
    architecture = model.config()
    parameters = {name: _plain(p.data) for name, p in model.named_parameters()}
    for name, value in parameters.items():
        if not _finite(value):
            raise ValueError(f"cannot save: parameter {name!r} is not finite ({value!r:.40})")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "architecture": architecture,
        "parameters": parameters,
        "sha256": _digest(architecture, parameters),
        "metadata": metadata or {},
    }
    _write_atomically(Path(path), _layout(document))


def _layout(document: dict[str, Any]) -> str:
    """JSON with one top-level key a line and one parameter a line: easy to
    read and to diff."""

    def compact(x: Any) -> str:
        return json.dumps(x, allow_nan=False)

    lines = []
    for key, value in document.items():
        if key == "parameters":
            entries = [f"  {compact(n)}: {compact(v)}" for n, v in value.items()]
            lines.append(' "parameters": {\n' + ",\n".join(entries) + "\n }")
        else:
            lines.append(f" {compact(key)}: {compact(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _write_atomically(path: Path, text: str) -> None:
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file private (0600); a checkpoint is an ordinary file.
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # Make the rename itself durable (POSIX; directories cannot be opened on Windows).
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked contents of a checkpoint file: a dict with
    ``architecture``, ``parameters`` and ``metadata``.

    Raises :class:`CheckpointError` for a missing or unreadable file, text
    that is not JSON (a truncated file), another format or version, and
    any change made after saving (the digest no longer matches).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{p}: no such checkpoint") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{p}: cannot read checkpoint ({e})") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as e:
        raise CheckpointError(f"{p}: not a valid checkpoint, corrupt or truncated ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a chainrule checkpoint (no format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise CheckpointError(
            f"{p}: checkpoint version {doc.get('version')!r} is not supported (expected {VERSION})"
        )
    architecture = doc.get("architecture")
    parameters = doc.get("parameters")
    metadata = doc.get("metadata", {})
    if not isinstance(architecture, dict) or not isinstance(parameters, dict):
        raise CheckpointError(f"{p}: checkpoint lacks its architecture or parameters")
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{p}: checkpoint metadata must be an object")
    if doc.get("sha256") != _digest(architecture, parameters):
        raise CheckpointError(
            f"{p}: checkpoint was modified or damaged after saving (sha256 does not match)"
        )
    return {"architecture": architecture, "parameters": parameters, "metadata": metadata}


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def load(path: str | os.PathLike[str], model: BaseModule) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``model`` and return its metadata.

    The checkpoint must describe the same architecture as ``model``
    (``model.config()``) and hold exactly its parameters; otherwise
    :class:`CheckpointError` explains the difference and ``model`` is
    unchanged.
    """
    return _apply(read(path), model, path)


def _apply(ckpt: dict[str, Any], model: BaseModule, path: str | os.PathLike[str]) -> dict[str, Any]:
    expected = model.config()
    if ckpt["architecture"] != expected:
        raise CheckpointError(
            f"{path}: checkpoint is for {_describe(ckpt['architecture'])}, "
            f"but the model is {_describe(expected)}"
        )
    try:
        model.load_state_dict(ckpt["parameters"])
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
    return dict(ckpt["metadata"])


def load_model(path: str | os.PathLike[str]) -> MLP:
    """Build the ``MLP`` a checkpoint describes and load its parameters."""
    ckpt = read(path)
    arch = ckpt["architecture"]
    if arch.get("type") != "MLP":
        raise CheckpointError(f"{path}: load_model builds MLPs, checkpoint holds {_describe(arch)}")
    try:
        # Its own generator: the weights are overwritten, and the global
        # random stream should not move.
        model = MLP(arch["nin"], arch["nouts"], activation=arch["activation"], rng=random.Random(0))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad MLP architecture {arch!r} ({e})") from None
    _apply(ckpt, model, path)
    return model


def _describe(architecture: dict[str, Any]) -> str:
    kind = architecture.get("type", "?")
    rest = ", ".join(f"{k}={v!r}" for k, v in architecture.items() if k != "type")
    return f"{kind}({rest})"
