"""examples/continue_on_torch.py under torchrun: 2 processes, gloo, on
127.0.0.1 only, a few steps, bounded in time. The distributed run starts
from a `chainrule gpt` checkpoint, computes chainrule's loss on the same
weights and batch, trains (the loss goes down), takes the same steps as
`chainrule gpt --resume` would, and saves a checkpoint that `chainrule gpt
--resume` continues from."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule.cli import main
from chainrule.cli.gpt import HELD_OUT, evaluate
from chainrule.tensor import charlm
from chainrule.tensor import checkpoint as tc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "continue_on_torch.py"
TINY = [
    "--batch-size", "8", "--n-embd", "8", "--n-head", "2", "--n-layer", "1",
    "--samples", "0", "--checkpoint-every", "0",
]  # fmt: skip
START, END = 4, 12


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def runs(torch: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 4-step chainrule run, continued to step 12 twice: by torchrun (2
    processes) and by `chainrule gpt --resume`."""
    base = tmp_path_factory.mktemp("continue")
    start, on_torch, on_chainrule = base / "start", base / "torch", base / "chainrule"
    assert main(["gpt", "--steps", str(START), *TINY, "--out", str(start)]) == 0
    shutil.copytree(start, on_torch)
    shutil.copytree(start, on_chainrule)
    assert (
        main(["gpt", "--resume", "--steps", str(END), "--samples", "0", "--out", str(on_chainrule)])
        == 0
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
        "MASTER_ADDR": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",  # gloo's own connections: loopback too
        "OMP_NUM_THREADS": "1",
    }
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_loopback_port()),
        str(EXAMPLE), "--checkpoint", str(on_torch / "gpt.safetensors"),
        "--steps", str(END), "--timeout", "60",
    ]  # fmt: skip
    # its own process group: on a timeout the launcher and both workers go
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("torchrun did not finish within 240 s")
    assert proc.returncode == 0, stderr[-3000:]
    return {"start": start, "torch": on_torch, "chainrule": on_chainrule, "stdout": stdout}


def _losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+/\d+: loss (\S+)$", stdout, re.M)]


def test_the_first_distributed_loss_is_chainrules(runs: dict[str, Any]) -> None:
    assert "torch.distributed: gloo, 2 processes; resuming at step 4" in runs["stdout"]
    losses = _losses(runs["stdout"])
    assert len(losses) == END - START
    saved = tc.read(runs["start"] / "gpt.safetensors")
    run = saved["metadata"]["run"]
    model = tc.load_model(runs["start"] / "gpt.safetensors")
    docs = charlm.shipped_names()
    train_docs, _ = charlm.split(docs, HELD_OUT, run["settings"]["seed"])
    vocab = charlm.Vocabulary.from_documents(docs)
    seqs = charlm.encode_all(train_docs, vocab, run["settings"]["block_size"])
    batches = np.random.default_rng()
    batches.bit_generator.state = run["rng"]
    rows = batches.integers(0, len(seqs), run["settings"]["batch_size"])
    x, y = charlm.batch([seqs[i] for i in rows], vocab.bos)
    _, loss = model(x, y)
    assert model.lm_head.weight.dtype == np.float32
    assert abs(losses[0] - loss.item()) <= 1e-5 * loss.item()


def test_the_loss_goes_down(runs: dict[str, Any]) -> None:
    losses = _losses(runs["stdout"])
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    docs = charlm.shipped_names()
    before = tc.load_model(runs["start"] / "gpt.safetensors")
    after = tc.load_model(runs["torch"] / "gpt.safetensors")
    _, held = charlm.split(docs, HELD_OUT, 0)
    vocab = charlm.Vocabulary.from_documents(docs)
    seqs = charlm.encode_all(held, vocab, 16)
    assert evaluate(after, seqs, vocab.bos) < evaluate(before, seqs, vocab.bos) - 0.02


def test_torch_takes_chainrules_steps(runs: dict[str, Any]) -> None:
    """DDP over 2 processes with Adam continued from chainrule's moments
    gives the parameters `chainrule gpt --resume` gives (float32)."""
    a = tc.read(runs["torch"] / "gpt.safetensors")
    b = tc.read(runs["chainrule"] / "gpt.safetensors")
    assert a["metadata"]["run"]["step"] == b["metadata"]["run"]["step"] == END
    assert a["metadata"]["run"]["rng"] == b["metadata"]["run"]["rng"]
    assert a["optimizer"]["t"] == b["optimizer"]["t"] == END
    for name, p in b["parameters"].items():
        np.testing.assert_allclose(a["parameters"][name], p, rtol=0, atol=1e-6, err_msg=name)


def test_the_torch_checkpoint_resumes_in_chainrule(
    runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = runs["torch"]
    assert (
        main(["gpt", "--resume", "--steps", str(END + 2), "--samples", "0", "--out", str(out)]) == 0
    )
    assert f"resuming at step {END} of {END + 2}" in capsys.readouterr().out
    assert tc.read(out / "gpt.safetensors")["metadata"]["run"]["step"] == END + 2
