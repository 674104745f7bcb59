"""Checkpoints of the scalar engine's models: a JSON file.

JSON, never pickle: loading a checkpoint runs no code, and a person can
read it. The file names its format and version, carries the SHA-256 of its
own bytes (``chainrule.io.sealed``: every byte is covered, the metadata and
the whitespace included), describes the architecture (``model.config()``)
and lists every parameter by name::

    {"format": "chainrule-checkpoint", "version": 2, "file_sha256": "...",
     "architecture": {"type": "MLP", "nin": 2, "nouts": [16, 16, 1], "activation": "relu"},
     "parameters": {"layers.0.neurons.0.w.0": 0.2355..., ...},
     "metadata": {...}}

Saving is atomic: the JSON goes to a temporary file beside the target,
which is flushed to disk and then renamed over it, so a crash leaves either
the old file or the new one, never half of one. Loading checks everything
before it touches the model; on any problem it raises
:class:`CheckpointError` and the model is unchanged. Reading is bounded: a
FIFO, a device, a file over 64 MiB, deep nesting, a non-finite or
400-digit number, or an architecture whose parameters (their number, names
and values) are not the ones listed is refused before the model is built.

Version 1 files (written before the digest covered the whole file) still
load: their architecture and parameters are checked by the digest they
carry, and their metadata, which it did not cover, is not read back.

Tensor models (the GPT) are saved as safetensors by
:mod:`chainrule.tensor.checkpoint`, with the same guarantees.

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

import hashlib
import itertools
import json
import math
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .io.sealed import (
    DIGEST_KEY,
    PLACEHOLDER,
    CheckpointError,
    loads_json,
    read_regular_file,
    seal,
    sealed_digest,
    verify,
    write_atomically,
)
from .module import BaseModule
from .nn import MLP

__all__ = ["FORMAT", "VERSION", "CheckpointError", "load", "load_model", "read", "save"]

#: The ``format`` field of every checkpoint file.
FORMAT = "chainrule-checkpoint"
#: The file layout's version; a file with another one is refused on load.
VERSION = 2
#: The largest JSON checkpoint read (a scalar MLP of a million parameters
#: takes about 30 MB).
MAX_BYTES = 64 << 20


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
        DIGEST_KEY: PLACEHOLDER,
        "architecture": architecture,
        "parameters": parameters,
        "metadata": metadata or {},
    }
    write_atomically((Path(path), seal(_layout(document).encode("utf-8"))))


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


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked contents of a checkpoint file: a dict with
    ``architecture``, ``parameters`` and ``metadata``.

    Raises :class:`CheckpointError` for a missing, unreadable or oversized
    file, one that is not a regular file, text that is not bounded JSON (a
    truncated file), another format or version, and any change made after
    saving (the digest no longer matches).
    """
    p = Path(path)
    data = read_regular_file(p, MAX_BYTES)
    sealed = sealed_digest(data) is not None
    if sealed:
        verify(data, str(p))  # before parsing: a damaged file is never parsed
    doc = loads_json(data, str(p))
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a chainrule checkpoint (no format {FORMAT!r})")
    version = doc.get("version")
    if version not in (1, VERSION):
        raise CheckpointError(
            f"{p}: checkpoint version {version!r} is not supported (expected {VERSION})"
        )
    if (version == VERSION) != sealed:
        raise CheckpointError(f"{p}: checkpoint is damaged (its {DIGEST_KEY} is missing)")
    architecture = doc.get("architecture")
    parameters = doc.get("parameters")
    metadata = doc.get("metadata", {}) if version == VERSION else {}
    if not isinstance(architecture, dict) or not isinstance(parameters, dict):
        raise CheckpointError(f"{p}: checkpoint lacks its architecture or parameters")
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{p}: checkpoint metadata must be an object")
    if version == 1 and doc.get("sha256") != _v1_digest(architecture, parameters):
        raise CheckpointError(
            f"{p}: checkpoint was modified or damaged after saving (sha256 does not match)"
        )
    return {"architecture": architecture, "parameters": parameters, "metadata": metadata}


def _v1_digest(architecture: Any, parameters: Any) -> str:
    """Version 1's digest: of the architecture and parameters only."""
    canonical = json.dumps(
        {"architecture": architecture, "parameters": parameters},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    size = _mlp_size(arch)
    params = ckpt["parameters"]
    if size is not None:
        # checked before building: an architecture of 10^9 units, or one that
        # has as many parameters as the file lists under other names (an
        # MLP of 100,000 layers), is never allocated
        if size != len(params):
            raise CheckpointError(
                f"{path}: architecture {_describe(arch)} has {size:,} parameters, "
                f"the checkpoint lists {len(params):,}"
            )
        for name in mlp_parameter_names(arch["nin"], arch["nouts"]):
            value = params.get(name)
            if value is None:
                raise CheckpointError(f"{path}: the checkpoint lacks {name!r}, which the MLP has")
            if type(value) not in (int, float):
                raise CheckpointError(f"{path}: {name!r} is not a number ({value!r:.40})")
    try:
        # Its own generator: the weights are overwritten, and the global
        # random stream should not move.
        model = MLP(arch["nin"], arch["nouts"], activation=arch["activation"], rng=random.Random(0))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad MLP architecture {arch!r} ({e})") from None
    _apply(ckpt, model, path)
    return model


def mlp_parameter_names(nin: int, nouts: list[int]) -> Iterator[str]:
    """The names ``MLP(nin, nouts).named_parameters()`` gives, in order,
    without building it: each neuron's weights, then its bias."""
    for k, (n_in, n_out) in enumerate(itertools.pairwise([nin, *nouts])):
        for j in range(n_out):
            for i in range(n_in):
                yield f"layers.{k}.neurons.{j}.w.{i}"
            yield f"layers.{k}.neurons.{j}.b"


def _mlp_size(arch: dict[str, Any]) -> int | None:
    """The number of parameters of an MLP architecture; None when its sizes
    are not positive whole numbers (MLP itself then says what is wrong)."""
    nin, nouts = arch.get("nin"), arch.get("nouts")
    sizes = [nin, *nouts] if isinstance(nouts, list) and nouts else []
    if not sizes or not all(type(n) is int and n >= 1 for n in sizes):
        return None
    return sum((a + 1) * b for a, b in itertools.pairwise(sizes))


def _describe(architecture: dict[str, Any]) -> str:
    kind = architecture.get("type", "?")
    rest = ", ".join(f"{k}={v!r}" for k, v in architecture.items() if k != "type")
    return f"{kind}({rest})"
