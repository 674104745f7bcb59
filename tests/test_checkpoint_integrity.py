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

from chainrule import checkpoint
from chainrule.cli import main
from chainrule.io import sealed
from chainrule.io.sealed import CheckpointError
from chainrule.nn import MLP
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
    from chainrule.cli import convert

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
    assert f"convert it with: python -m chainrule.cli.convert {tmp_path / 'gpt.json'}" in err
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

DEEP = 100_000  # layers a hostile file declares


def _deep_gpt(path: Path) -> None:
    """A GPT of 100,000 layers of width 1 by its architecture, its weight
    count matched by one tensor of 1.2 million floats (4.8 MB): before
    names and shapes were checked, the loader built all 100,000 blocks
    first (300,000 layers: 1.23 GB and 41 s)."""
    config = GPTConfig(vocab_size=27, block_size=16, n_embd=1, n_head=1, n_layer=DEEP)
    weights = {"wte.weight": np.zeros(config.num_parameters(), np.float32)}
    architecture = {"type": "GPT", **config.to_dict()}
    path.write_bytes(
        tensor_checkpoint._sealed(
            tensor_checkpoint.FORMAT, weights, {"architecture": architecture, "metadata": {}}
        )
    )


def _deep_mlp(path: Path) -> None:
    """An MLP of 100,000 layers of one neuron by its architecture, its
    200,000 parameters listed under other names (2.6 MB): the loader
    built the whole MLP before it compared the names."""
    nouts = [1] * DEEP
    params = ", ".join(f'"p{k}": 0.5' for k in range(2 * DEEP))
    arch = json.dumps({"type": "MLP", "nin": 1, "nouts": nouts, "activation": "relu"})
    path.write_bytes(
        _sealed_json(f'"architecture": {arch}, "parameters": {{{params}}}, "metadata": {{}}')
    )


#: Files whose architecture declares 100,000 layers (see test_a_file_declaring_100000_layers).
DEEP_FILES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "GPT of 100,000 layers in one tensor": (
        "safetensors",
        _deep_gpt,
        "has 600,003 weight tensors, the file holds 1",
    ),
    "MLP of 100,000 layers under other names": (
        "json",
        _deep_mlp,
        "the checkpoint lacks 'layers.0.neurons.0.w.0', which the MLP has",
    ),
}

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
        "'wte.weight' has shape",  # (3, 2) in the file, (1000000000, 2) in the architecture
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
    assert "needs safetensors for its checkpoints: pip install safetensors" in err
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


_PEAK_RSS = """
import sys, time
from chainrule import checkpoint
from chainrule.tensor import checkpoint as tensor_checkpoint

def status(field):
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith(field + ":"))

def build(path):  # the model alone, as load_model builds it, for comparison
    from chainrule.tensor.nn import GPT, GPTConfig
    import numpy as np
    arch = {k: v for k, v in tensor_checkpoint.read(path)["architecture"].items() if k != "type"}
    return lambda: GPT(GPTConfig(**arch), dtype="float32", rng=np.random.default_rng(0))

loaders = {"json": checkpoint.load_model, "safetensors": tensor_checkpoint.load_model}
load = loaders[sys.argv[1]] if sys.argv[1] in loaders else build(sys.argv[2])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from the resident size now
before = status("VmRSS")
started = time.perf_counter()
try:
    load(sys.argv[2]) if sys.argv[1] in loaders else load()
    outcome = "loaded"
except checkpoint.CheckpointError as e:
    outcome = str(e)
seconds = time.perf_counter() - started
print(status("VmHWM") - before)
print(seconds)
print(outcome)
"""


def _peak_rss_growth(kind: str, path: Path) -> tuple[int, str, float]:
    """Loading ``path`` in a fresh process (libraries already imported):
    how far its peak resident memory grew (Linux), what happened, and how
    long it took."""
    import subprocess

    src = str(Path(__file__).resolve().parent.parent / "src")
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, kind, str(path)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": src, "OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    growth, seconds, outcome = done.stdout.splitlines()
    return int(growth), outcome, float(seconds)


@pytest.mark.parametrize("case", list(DEEP_FILES))
def test_a_file_declaring_100000_layers_costs_little_memory(tmp_path: Path, case: str) -> None:
    """Peak RSS growth under 100 MB (it was the whole model's: 100,000
    blocks or layers built before the check)."""
    kind, make, message = DEEP_FILES[case]
    path = tmp_path / ("x.json" if kind == "json" else "x.safetensors")
    make(path)
    growth, outcome, seconds = _peak_rss_growth(kind, path)
    assert message in outcome
    assert growth < 100e6, f"{case}: {growth / 1e6:.0f} MB for a file of {path.stat().st_size:,} B"
    assert seconds < 5.0  # the file is read, parsed and checked; nothing is built


def test_loading_a_real_checkpoint_takes_the_file_twice_and_the_model(tmp_path: Path) -> None:
    """The bound for a file that is what it says: at most twice its size
    (its bytes, then its arrays) plus the model, whose cost is measured the
    same way (building it alone, its initial weights included)."""
    config = GPTConfig(vocab_size=27, block_size=16, n_embd=256, n_head=4, n_layer=4)
    path = tmp_path / "gpt.safetensors"
    model = GPT(config, dtype="float32", rng=np.random.default_rng(0))
    tensor_checkpoint.save(model, path)
    growth, outcome, _ = _peak_rss_growth("safetensors", path)
    assert outcome == "loaded"
    building, _, _ = _peak_rss_growth("build", path)
    size = path.stat().st_size
    assert growth <= 2 * size + building + 1_000_000, (growth, size, building)


def test_the_shapes_a_loader_checks_are_the_models() -> None:
    """The names and shapes checked before building are the ones building
    gives (GPT), and the names (MLP)."""
    for sizes in [(27, 16, 8, 2, 1, 4), (5, 3, 12, 3, 3, 2), (40, 8, 4, 4, 2, 1)]:
        V, T, C, H, L, ratio = sizes
        config = GPTConfig(
            vocab_size=V, block_size=T, n_embd=C, n_head=H, n_layer=L, mlp_ratio=ratio
        )
        built = [(n, p.data.shape) for n, p in GPT(config).named_parameters()]
        assert list(config.parameter_shapes()) == built
        assert config.num_tensors() == len(built)
        assert config.num_parameters() == sum(int(np.prod(s)) for _, s in built)
    for nin, nouts in [(2, [16, 16, 1]), (3, [1]), (1, [4, 1, 2])]:
        names = [n for n, _ in MLP(nin, nouts, rng=random.Random(0)).named_parameters()]
        assert list(checkpoint.mlp_parameter_names(nin, nouts)) == names


def test_a_gpt_file_with_a_wrong_shape_is_refused_before_its_tensors_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = GPTConfig(vocab_size=5, block_size=4, n_embd=4, n_head=2, n_layer=1)
    weights = {n: np.zeros(s, np.float32) for n, s in config.parameter_shapes()}
    weights["lm_head.weight"] = np.zeros((4, 5), np.float32)  # transposed: same count
    path = tmp_path / "gpt.safetensors"
    path.write_bytes(
        tensor_checkpoint._sealed(
            tensor_checkpoint.FORMAT,
            weights,
            {"architecture": {"type": "GPT", **config.to_dict()}, "metadata": {}},
        )
    )
    read: list[int] = []
    monkeypatch.setattr(tensor_checkpoint, "_tensors", lambda *a: read.append(1))
    with pytest.raises(CheckpointError, match=r"'lm_head.weight' has shape \(4, 5\) in the file"):
        tensor_checkpoint.load_model(path)
    assert read == []
