"""Convert a ``chainrule gpt`` checkpoint of chainrule 0.1 (``gpt.json``) to
the safetensors checkpoint ``chainrule gpt --resume`` reads::

    python -m chainrule.cli.convert out/gpt.json

writes ``out/gpt.safetensors`` and ``out/gpt.optim.safetensors``. The old
file's digest covered its architecture and parameters only, so its run
state (Adam moments, random state, settings) is taken on trust: convert
only files you have no reason to think damaged. ``chainrule gpt --resume``
then checks the run state as it checks any.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint as json_checkpoint
from ..io.sealed import CheckpointError, loads_json, read_regular_file
from ..tensor import checkpoint

__all__ = ["convert", "main"]


def convert(path: str | Path) -> Path:
    """Write the safetensors checkpoint of the version-1 ``gpt.json`` at
    ``path`` beside it and return its path. Raises CheckpointError."""
    p = Path(path)
    ckpt = json_checkpoint.read(p)  # checks the parameters against the old digest
    doc = loads_json(read_regular_file(p, json_checkpoint.MAX_BYTES), str(p))
    if doc.get("version") != 1:
        raise CheckpointError(f"{p}: not a version 1 checkpoint, nothing to convert")
    metadata = doc.get("metadata")
    run = metadata.get("run") if isinstance(metadata, dict) else None
    settings = run.get("settings") if isinstance(run, dict) else None
    if not isinstance(settings, dict) or settings.get("dtype") not in ("float32", "float64"):
        raise CheckpointError(f"{p}: not a chainrule gpt checkpoint (no run settings)")
    assert isinstance(metadata, dict) and isinstance(run, dict)
    try:
        parameters = {
            k: np.asarray(v, dtype=settings["dtype"]) for k, v in ckpt["parameters"].items()
        }
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{p}: bad parameters ({e})") from None
    config = checkpoint.gpt_config(ckpt["architecture"], parameters, p)
    from ..tensor.nn import GPT

    model = GPT(config, dtype=settings["dtype"], rng=np.random.default_rng(0))
    try:
        model.load_state_dict(parameters)
    except ValueError as e:
        raise CheckpointError(f"{p}: {e}") from None
    optimizer: Any = run.pop("optimizer", None)
    if isinstance(optimizer, dict):
        optimizer = {
            k: {n: np.asarray(a, dtype=settings["dtype"]) for n, a in v.items()}
            if isinstance(v, dict)
            else v
            for k, v in optimizer.items()
        }
    target = p.with_suffix(".safetensors")
    checkpoint.save(model, target, metadata=metadata, optimizer=optimizer)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m chainrule.cli.convert OLD/gpt.json", file=sys.stderr)
        return 2
    try:
        target = convert(args[0])
    except (CheckpointError, OSError, ValueError) as e:
        print(f"convert: {e}", file=sys.stderr)
        return 1
    print(f"wrote {target} and {checkpoint.optimizer_path(target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
