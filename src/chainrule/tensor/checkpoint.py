"""Checkpoints of Tensor models: safetensors files that PyTorch reads.

``save(model, "gpt.safetensors")`` writes the parameters (and buffers, such
as BatchNorm's running statistics) under their names,
which are PyTorch's too (:mod:`chainrule.interop`), so the file loads into
the model's torch twin as it is::

    from safetensors.torch import load_file
    twin = chainrule.interop.to_torch(model)
    twin.load_state_dict(load_file("gpt.safetensors"), strict=True)

The safetensors header's metadata (strings) holds the format, the
architecture (``model.config()``, JSON), the caller's metadata (JSON: step,
settings, random state ...) and the SHA-256 of the file's own bytes
(``chainrule.io.sealed``), checked before anything is parsed. An optimizer's
state goes to a sidecar, ``gpt.optim.safetensors`` beside it (its moments
as tensors, the rest as JSON), sealed the same way; the model file records
the sidecar's digest, so a sidecar from another save is refused too. The
sidecar keeps the model file loadable with ``strict=True``.

Saving is atomic: both files are written and flushed to temporary files,
then renamed over the old ones (the sidecar first) with Ctrl-C held until
both are in place.
Reading is bounded: only regular files, the header at most 100 MB, and a
GPT architecture whose weight names and shapes disagree with the file's
header is refused before any tensor is read or a model is built: loading
takes at most the file twice (its bytes and its arrays, not at once with
the model) plus the model itself.

Needs the ``safetensors`` package (``pip install safetensors``; in a
checkout, ``pip install -e '.[tensor]'``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..io import sealed
from ..io.sealed import CheckpointError

__all__ = [
    "FORMAT",
    "VERSION",
    "CheckpointError",
    "load",
    "load_model",
    "optimizer_path",
    "read",
    "save",
]

#: The ``format`` field of a model file's metadata.
FORMAT = "chainrule-checkpoint"
OPTIMIZER_FORMAT = "chainrule-optimizer-state"
#: The layout's version, in the metadata; a file with another one is refused.
VERSION = "2"
#: The largest checkpoint read into memory.
MAX_BYTES = 16 << 30
#: safetensors' own limit on the JSON header.
MAX_HEADER = 100 << 20


def _safetensors() -> Any:
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            "Tensor checkpoints need safetensors: pip install safetensors "
            "(in a checkout: pip install -e '.[tensor]')"
        ) from None
    return safetensors.numpy


def optimizer_path(path: str | os.PathLike[str]) -> Path:
    """Where the optimizer state of the checkpoint at ``path`` goes:
    ``gpt.safetensors`` -> ``gpt.optim.safetensors``."""
    p = Path(path)
    return p.with_name(p.name.removesuffix(".safetensors") + ".optim.safetensors")


# ----------------------------------------------------------------------------
# writing
# ----------------------------------------------------------------------------


def save(
    model: Any,
    path: str | os.PathLike[str],
    *,
    metadata: dict[str, Any] | None = None,
    optimizer: Mapping[str, Any] | None = None,
) -> None:
    """Write ``model``'s parameters, architecture and ``metadata`` (JSON-ready)
    to ``path``, and ``optimizer`` (if given) to :func:`optimizer_path`.

    ``optimizer`` maps names to either JSON-ready values (a step count) or
    ``{parameter name: array}`` (a moment), e.g. ``{"t": 10, "m": {...},
    "v": {...}}``. Raises ValueError for a non-finite parameter, OSError if
    a file cannot be written; a file not yet replaced is left as it was.
    """
    p = Path(path)
    # the parameters and the buffers (BatchNorm's running statistics)
    tensors = {name: np.asarray(array) for name, array in model.state_dict().items()}
    for name, array in tensors.items():
        if not np.isfinite(array).all():
            raise ValueError(f"cannot save: parameter {name!r} is not finite")
    header = {
        "architecture": model.config(),
        "metadata": metadata or {},
    }
    sidecar = None
    if optimizer is not None:
        moments, rest = _split(optimizer)
        sidecar = _sealed(OPTIMIZER_FORMAT, moments, {"state": rest})
        header["optimizer_sha256"] = _digest_of(sidecar)
    data = _sealed(FORMAT, tensors, header)
    # the sidecar first: the model file names its digest
    files = [(optimizer_path(p), sidecar)] if sidecar is not None else []
    sealed.write_atomically(*files, (p, data))


def _split(optimizer: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """An optimizer state as tensors ``"m.wte.weight"`` and JSON for the rest."""
    moments: dict[str, np.ndarray] = {}
    rest: dict[str, Any] = {}
    for key, value in optimizer.items():
        if isinstance(value, Mapping):
            for name, array in value.items():
                moments[f"{key}.{name}"] = np.asarray(array)
        else:
            rest[key] = value
    return moments, rest


def _sealed(fmt: str, tensors: Mapping[str, np.ndarray], fields: dict[str, Any]) -> bytes:
    """A safetensors file of ``tensors`` whose metadata holds the format, the
    version, ``fields`` (each as JSON) and the file's digest."""
    meta = {"format": fmt, "version": VERSION, sealed.DIGEST_KEY: sealed.PLACEHOLDER}
    meta.update({k: json.dumps(v, allow_nan=False) for k, v in fields.items()})
    # (ascontiguousarray alone would make a 0-d array, a step count, 1-d)
    contiguous = {k: np.ascontiguousarray(v).reshape(np.shape(v)) for k, v in tensors.items()}
    data: bytes = _safetensors().save(contiguous, metadata=meta)
    return sealed.seal(data, end=8 + _header_size(data))


def _digest_of(data: bytes) -> str:
    return sealed.verify(data, "sidecar", end=8 + _header_size(data))


def _header_size(data: bytes) -> int:
    return int.from_bytes(data[:8], "little")


# ----------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------


def _open(path: Path, fmt: str) -> tuple[bytes, dict[str, Any], dict[str, Any], str]:
    """The bytes, the tensor header (name -> dtype, shape, offsets), the
    metadata (JSON fields decoded) and the digest of the sealed safetensors
    file at ``path``; no tensor is read yet (:func:`_tensors`)."""
    where = str(path)
    data = sealed.read_regular_file(path, MAX_BYTES)
    n = _header_size(data) if len(data) >= 8 else -1
    if not 0 < n <= min(MAX_HEADER, len(data) - 8):
        raise CheckpointError(f"{where}: not a safetensors checkpoint, damaged or truncated")
    digest = sealed.verify(data, where, end=8 + n)  # before parsing anything
    header = sealed.loads_json(data[8 : 8 + n], where)
    meta = header.pop("__metadata__", None) if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise CheckpointError(f"{where}: not a chainrule checkpoint (no format {fmt!r})")
    if meta.get("version") != VERSION:
        raise CheckpointError(
            f"{where}: checkpoint version {meta.get('version')!r} is not supported "
            f"(expected {VERSION})"
        )
    fields = {
        k: sealed.loads_json(v, where)
        for k, v in meta.items()
        if k not in ("format", "version", sealed.DIGEST_KEY)
    }
    return data, header, fields, digest


def _tensors(data: bytes, where: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file's bytes."""
    try:
        tensors: dict[str, np.ndarray] = _safetensors().load(data)
    except Exception as e:  # safetensors' SafetensorError derives from Exception only
        raise CheckpointError(f"{where}: not a valid safetensors file ({e})") from None
    return tensors


def _shapes(header: dict[str, Any]) -> dict[str, Any]:
    """Each tensor's shape as the header declares it (whatever it holds:
    the checks compare it, the safetensors reader validates it)."""
    return {
        name: tuple(info["shape"])
        if isinstance(info, dict) and isinstance(info.get("shape"), list)
        else None
        for name, info in header.items()
    }


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked contents of a checkpoint: ``architecture``,
    ``parameters`` (name -> array), ``metadata``, and ``optimizer`` (as
    given to :func:`save`, moments as arrays; None when none was saved).

    Raises :class:`CheckpointError` for a missing, unreadable, oversized or
    non-regular file, another format or version, any byte changed after
    saving (in either file), and an architecture that does not fit the
    parameters: a GPT's weight names and shapes are checked against the
    file's header before any tensor is read.
    """
    p = Path(path)
    data, header, fields, _ = _open(p, FORMAT)
    architecture, metadata = fields.get("architecture"), fields.get("metadata", {})
    if not isinstance(architecture, dict) or not isinstance(metadata, dict):
        raise CheckpointError(f"{p}: checkpoint lacks its architecture or metadata")
    if architecture.get("type") == "GPT":
        gpt_config(architecture, _shapes(header), p)
    tensors = _tensors(data, p)
    del data  # the arrays are copies: the file's bytes can go
    optimizer = None
    if "optimizer_sha256" in fields:
        optimizer = _read_optimizer(p, fields["optimizer_sha256"])
    return {
        "architecture": architecture,
        "parameters": tensors,
        "metadata": metadata,
        "optimizer": optimizer,
    }


def _read_optimizer(path: Path, expected: Any) -> dict[str, Any]:
    side = optimizer_path(path)
    try:
        data, _, fields, digest = _open(side, OPTIMIZER_FORMAT)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: its optimizer state: {e}") from None
    if digest != expected:
        raise CheckpointError(
            f"{side}: optimizer state from another save of {path.name} "
            "(an interrupted save, or a file copied without the other)"
        )
    moments = _tensors(data, side)
    del data
    state = fields.get("state")
    if not isinstance(state, dict):
        raise CheckpointError(f"{side}: optimizer state lacks its fields")
    for key, array in moments.items():
        group, _, name = key.partition(".")
        slot = state.setdefault(group, {})
        if not isinstance(slot, dict) or not name:
            raise CheckpointError(f"{side}: bad optimizer tensor name {key!r}")
        slot[name] = array
    return state


def load(path: str | os.PathLike[str], model: Any) -> dict[str, Any]:
    """Load the checkpoint at ``path`` into ``model`` and return its
    metadata. The architecture must be the model's (``model.config()``);
    otherwise :class:`CheckpointError` says how, and ``model`` is unchanged."""
    ckpt = read(path)
    _apply(ckpt, model, path)
    return dict(ckpt["metadata"])


def _apply(ckpt: dict[str, Any], model: Any, path: str | os.PathLike[str]) -> None:
    expected = model.config()
    if ckpt["architecture"] != expected:
        raise CheckpointError(
            f"{path}: checkpoint is for {ckpt['architecture']}, but the model is {expected}"
        )
    try:
        model.load_state_dict(ckpt["parameters"])
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None


def load_model(path: str | os.PathLike[str]) -> Any:
    """Build the GPT a checkpoint describes, in the dtype of its
    parameters, and load them. The architecture is checked against the
    parameters in the file before anything is allocated."""
    from .nn import GPT

    ckpt = read(path)
    config = gpt_config(ckpt["architecture"], ckpt["parameters"], path)
    dtypes = {str(a.dtype) for a in ckpt["parameters"].values()}
    if len(dtypes) != 1 or not dtypes <= {"float32", "float64"}:
        raise CheckpointError(f"{path}: parameters must be all float32 or all float64")
    model = GPT(config, dtype=dtypes.pop(), rng=np.random.default_rng(0))
    _apply(ckpt, model, path)
    return model


def gpt_config(architecture: dict[str, Any], parameters: Mapping[str, Any], path: Any) -> Any:
    """The ``GPTConfig`` of a checkpoint's architecture, refused with a
    :class:`CheckpointError` unless the file holds exactly its weights,
    by name and shape (``parameters``: name -> array, or name -> shape as
    the file's header declares it). So a file claiming 10^9 units, or as
    many weights as a GPT of 300,000 layers in a few tensors, is refused
    before anything of that size is allocated."""
    from .nn import GPTConfig

    if architecture.get("type") != "GPT":
        raise CheckpointError(f"{path}: not a GPT checkpoint ({architecture.get('type')!r})")
    fields = {k: v for k, v in architecture.items() if k != "type"}
    sizes = [v for k, v in fields.items() if k != "init_std"]
    known = set(GPTConfig.__dataclass_fields__)
    # mlp_ratio came later: a checkpoint without it has the default, 4
    if not known - {"mlp_ratio"} <= set(fields) <= known or not all(
        type(v) is int and v >= 1 for v in sizes
    ):
        raise CheckpointError(f"{path}: bad GPT architecture {architecture}")
    try:
        config = GPTConfig(**fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: bad GPT architecture {architecture} ({e})") from None
    shapes = {name: getattr(a, "shape", a) for name, a in parameters.items()}
    if config.num_tensors() != len(shapes):  # before listing the names: there may be 10^9
        raise CheckpointError(
            f"{path}: architecture {architecture} has {config.num_tensors():,} weight tensors, "
            f"the file holds {len(shapes):,}"
        )
    for name, shape in config.parameter_shapes():
        if name not in shapes:
            raise CheckpointError(f"{path}: the file lacks {name!r}, which the architecture has")
        if shapes[name] is None or tuple(shapes[name]) != shape:
            raise CheckpointError(
                f"{path}: {name!r} has shape {shapes[name]} in the file, "
                f"{shape} in the architecture"
            )
    return config
