"""Checkpoints under damage and attack: every byte of a checkpoint (the
optimizer state and the run state included) is covered by its digest, and
hostile files are refused quickly, without large allocations."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule import checkpoint, sealed
from chainrule.cli import main
from chainrule.nn import MLP
from chainrule.sealed import CheckpointError
from chainrule.tensor import checkpoint as tensor_checkpoint
from chainrule.tensor.nn import GPT, GPTConfig

TINY = [
    "--steps", "3", "--batch-size", "4", "--n-embd", "8", "--n-head", "2",
    "--n-layer", "1", "--samples", "0", "--checkpoint-every", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpt")
    assert main(["gpt", *TINY, "--out", str(out)]) == 0
    return out


def _positions(size: int, n: int, seed: int) -> list[int]:
    """``n`` byte offsets over the whole file: both ends, and the rest at random."""
    rng = random.Random(seed)
    return sorted({0, 1, 7, 8, size // 2, size - 1, *rng.sample(range(size), min(n, size))})


def _flipped(data: bytes, at: int, rng: random.Random) -> bytes:
    return data[:at] + bytes([data[at] ^ rng.randrange(1, 256)]) + data[at + 1 :]


def _resume(capsys: pytest.CaptureFixture[str], out: Path) -> tuple[int, str]:
    code = main(["gpt", "--resume", "--steps", "4", "--samples", "0", "--out", str(out)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", ["gpt.safetensors", "gpt.optim.safetensors"])
def test_any_flipped_byte_of_a_gpt_checkpoint_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gpt_run: Path, name: str
) -> None:
    """``chainrule gpt --resume`` on a checkpoint with one byte changed,
    anywhere (header, parameters, Adam moments, run state, the digest):
    one line and exit 1."""
    for f in ("gpt.safetensors", "gpt.optim.safetensors"):
        (tmp_path / f).write_bytes((gpt_run / f).read_bytes())
    assert _resume(capsys, tmp_path)[0] == 0  # intact, it resumes
    for f in ("gpt.safetensors", "gpt.optim.safetensors"):  # back to the step-3 files
        (tmp_path / f).write_bytes((gpt_run / f).read_bytes())
    original = (gpt_run / name).read_bytes()
    rng = random.Random(name)
    digest = sealed.sealed_digest(original)
    assert digest is not None
    marks = [original.index(digest.encode()) + 10, original.index(b"format"), 3]  # digest, header
    if name == "gpt.safetensors":
        marks.append(original.index(b"state") + 12)  # inside the random state
    positions = sorted({*marks, *_positions(len(original), 150, seed=len(name))})
    for at in positions:
        (tmp_path / name).write_bytes(_flipped(original, at, rng))
        code, err = _resume(capsys, tmp_path)
        assert code == 1, f"byte {at} of {len(original)} flipped: resumed"
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "damaged" in err or "not a" in err or "optimizer state" in err, err
    (tmp_path / name).write_bytes(original)


def test_a_sidecar_from_another_save_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gpt_run: Path
) -> None:
    out = tmp_path / "other"
    assert main(["gpt", *TINY, "--seed", "5", "--out", str(out)]) == 0
    (out / "gpt.safetensors").write_bytes((gpt_run / "gpt.safetensors").read_bytes())
    code, err = _resume(capsys, out)
    assert code == 1 and "optimizer state from another save of gpt.safetensors" in err
    (out / "gpt.optim.safetensors").unlink()
    code, err = _resume(capsys, out)
    assert code == 1 and "no such checkpoint" in err and err.count("\n") == 1


def test_any_flipped_byte_of_a_json_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "moons.json"
    model = MLP(2, [4, 4, 1], rng=random.Random(0))
    checkpoint.save(model, path, metadata={"step": 100, "seed": 1337, "loss": 0.25})
    original = path.read_bytes()
    rng = random.Random(3)
    for at in _positions(len(original), 300, seed=4):
        path.write_bytes(_flipped(original, at, rng))
        with pytest.raises(CheckpointError) as info:
            checkpoint.load_model(path)
        assert "\n" not in str(info.value)


def test_version_1_json_checkpoints_still_load(tmp_path: Path) -> None:
    """A file of chainrule 0.1: its parameters (covered by its digest) load,
    its metadata (not covered) is not read back; an edit is refused."""
    model = MLP(2, [3, 1], rng=random.Random(1))
    architecture = model.config()
    parameters = model.state_dict()
    doc = {
        "format": "chainrule-checkpoint",
        "version": 1,
        "architecture": architecture,
        "parameters": parameters,
        "sha256": checkpoint._v1_digest(architecture, parameters),
        "metadata": {"step": 100},
    }
    path = tmp_path / "moons.json"
    path.write_text(json.dumps(doc))
    assert checkpoint.load_model(path).state_dict() == model.state_dict()
    assert checkpoint.read(path)["metadata"] == {}
    doc["parameters"]["layers.0.neurons.0.b"] = 1.0
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="sha256 does not match"):
        checkpoint.load_model(path)


def test_chainrule_0_1_gpt_json_is_refused_with_how_to_convert(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gpt_run: Path
) -> None:
    """``--resume`` next to an old gpt.json says how to convert it; the
    converted checkpoint resumes to the same parameters as the original."""
    from chainrule.tensor import convert

    saved = tensor_checkpoint.read(gpt_run / "gpt.safetensors")
    parameters = {k: v.tolist() for k, v in saved["parameters"].items()}
    adam = {
        "t": saved["optimizer"]["t"],
        "m": {k: v.tolist() for k, v in saved["optimizer"]["m"].items()},
        "v": {k: v.tolist() for k, v in saved["optimizer"]["v"].items()},
    }
    old = {
        "format": "chainrule-checkpoint",
        "version": 1,
        "architecture": saved["architecture"],
        "parameters": parameters,
        "sha256": checkpoint._v1_digest(saved["architecture"], parameters),
        "metadata": {**saved["metadata"], "run": {**saved["metadata"]["run"], "optimizer": adam}},
    }
    (tmp_path / "gpt.json").write_text(json.dumps(old))
    code, err = _resume(capsys, tmp_path)
    assert code == 1 and err.count("\n") == 1
    assert f"convert it with: python -m chainrule.tensor.convert {tmp_path / 'gpt.json'}" in err
    assert convert.main([str(tmp_path / "gpt.json")]) == 0
    assert "wrote" in capsys.readouterr().out
    converted = tensor_checkpoint.read(tmp_path / "gpt.safetensors")
    for k, v in saved["parameters"].items():
        np.testing.assert_array_equal(converted["parameters"][k], v)
    np.testing.assert_array_equal(
        converted["optimizer"]["v"]["wte.weight"], adam["v"]["wte.weight"]
    )
    resumed = tmp_path / "r"
    resumed.mkdir()
    for f in ("gpt.safetensors", "gpt.optim.safetensors"):
        (resumed / f).write_bytes((gpt_run / f).read_bytes())
    assert _resume(capsys, tmp_path)[0] == 0 and _resume(capsys, resumed)[0] == 0
    a = tensor_checkpoint.read(tmp_path / "gpt.safetensors")["parameters"]
    b = tensor_checkpoint.read(resumed / "gpt.safetensors")["parameters"]
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert convert.main([str(tmp_path / "missing.json")]) == 1


# ----------------------------------------------------------------------------
# hostile files
# ----------------------------------------------------------------------------


def _sealed_json(text: str) -> bytes:
    head = '{"format": "chainrule-checkpoint", "version": 2, "file_sha256": "' + "0" * 64 + '", '
    return sealed.seal((head + text + "}").encode())


def _sealed_gpt(architecture: dict[str, Any]) -> bytes:
    model = GPT(GPTConfig(vocab_size=3, block_size=2, n_embd=2, n_head=1, n_layer=1))
    tensors = {n: p.data for n, p in model.named_parameters()}
    return tensor_checkpoint._sealed(
        tensor_checkpoint.FORMAT, tensors, {"architecture": architecture, "metadata": {}}
    )


HUGE_GPT = {
    "type": "GPT", "vocab_size": 10**9, "block_size": 2, "n_embd": 2,
    "n_head": 1, "n_layer": 1, "init_std": 0.08,
}  # fmt: skip

HOSTILE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "deep nesting": (
        "json",
        lambda p: p.write_bytes(_sealed_json('"architecture": ' + "[" * 200_000 + "]" * 200_000)),
        "nested too deep",
    ),
    "1e400": (
        "json",
        lambda p: p.write_bytes(
            _sealed_json('"architecture": {}, "parameters": {"w": 1e400}, "metadata": {}')
        ),
        "is not a finite float64",
    ),
    "400-digit integer": (
        "json",
        lambda p: p.write_bytes(
            _sealed_json(f'"architecture": {{}}, "parameters": {{"w": {"9" * 400}}}')
        ),
        "an integer of 400 digits",
    ),
    "10^9 units": (
        "json",
        lambda p: p.write_bytes(
            _sealed_json(
                '"architecture": {"type": "MLP", "nin": 2, "nouts": [1000000000, 1], '
                '"activation": "relu"}, "parameters": {"layers.0.neurons.0.b": 0.0}, "metadata": {}'
            )
        ),
        "has 4,000,000,001 parameters, the checkpoint lists 1",
    ),
    "FIFO": ("json", lambda p: os.mkfifo(p), "not a regular file"),
    "/dev/zero": ("json", lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    "GPT of 10^9 tokens": (
        "safetensors",
        lambda p: p.write_bytes(_sealed_gpt(HUGE_GPT)),
        "has 4,000,000,052 weights, the file holds 64",
    ),
    "header of 2^63 bytes": (
        "safetensors",
        lambda p: p.write_bytes((2**63).to_bytes(8, "little") + b"{}"),
        "damaged or truncated",
    ),
    "safetensors FIFO": ("safetensors", lambda p: os.mkfifo(p), "not a regular file"),
    "safetensors /dev/zero": (
        "safetensors",
        lambda p: p.symlink_to("/dev/zero"),
        "not a regular file",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_files_are_refused_quickly_and_small(tmp_path: Path, case: str) -> None:
    kind, make, message = HOSTILE[case]
    path = tmp_path / ("x.json" if kind == "json" else "x.safetensors")
    make(path)
    load = checkpoint.load_model if kind == "json" else tensor_checkpoint.load_model
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(CheckpointError, match=message) as info:
            load(path)
        seconds = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert seconds < 1.0, f"{case}: {seconds:.2f} s"
    assert peak < 100e6, f"{case}: {peak / 1e6:.0f} MB"


@pytest.mark.parametrize(
    "case", ["safetensors FIFO", "safetensors /dev/zero", "GPT of 10^9 tokens"]
)
def test_gpt_resume_refuses_hostile_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    _, make, message = HOSTILE[case]
    make(tmp_path / "gpt.safetensors")
    started = time.perf_counter()
    code, err = _resume(capsys, tmp_path)
    assert time.perf_counter() - started < 1.0
    assert code == 1 and message in err and err.count("\n") == 1


def test_gpt_without_safetensors_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "safetensors", None)
    code = main(["gpt", *TINY, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "needs safetensors for its checkpoints: pip install 'chainrule[tensor]'" in err
    assert not list(tmp_path.iterdir())  # stopped before training


def test_oversized_checkpoint_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte that takes no disk
    monkeypatch.setattr(tensor_checkpoint, "MAX_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="1,073,741,824 bytes, more than a checkpoint"):
            tensor_checkpoint.read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1e6


def test_ctrl_c_during_a_save_leaves_model_and_optimizer_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpt_run: Path
) -> None:
    """SIGINT arriving between the two renames takes effect after both:
    the files on disk are the new pair, and they load."""
    import signal

    model = tensor_checkpoint.load_model(gpt_run / "gpt.safetensors")
    adam = {"t": 1, "m": {n: np.zeros(p.shape) for n, p in model.named_parameters()}}
    path = tmp_path / "gpt.safetensors"
    tensor_checkpoint.save(model, path, metadata={"save": 1}, optimizer=adam)
    replace = os.replace
    renamed: list[str] = []

    def interrupted_replace(src: str, dst: Any) -> None:
        replace(src, dst)
        renamed.append(Path(dst).name)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the sidecar's rename

    monkeypatch.setattr(os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        tensor_checkpoint.save(model, path, metadata={"save": 2}, optimizer={**adam, "t": 2})
    assert renamed == ["gpt.optim.safetensors", "gpt.safetensors"]
    saved = tensor_checkpoint.read(path)
    assert saved["metadata"] == {"save": 2} and saved["optimizer"]["t"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(renamed)  # no temporary left
