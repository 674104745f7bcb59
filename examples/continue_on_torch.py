r"""Continue a `chainrule gpt` run on PyTorch, with DistributedDataParallel.

When a model outgrows one machine, training goes on in torch.distributed:
chainrule's checkpoint loads into the GPT's PyTorch twin as it is (the
same parameter names), Adam's moments and the batch sampler's random state
carry over, and the result is saved back as a checkpoint that
`chainrule gpt --resume` continues from.

    chainrule gpt --steps 1000 --out out
    torchrun --nproc-per-node 2 examples/continue_on_torch.py \
        --checkpoint out/gpt.safetensors --steps 2000
    chainrule gpt --resume --steps 2500 --out out

Every process draws the same batch of names (the same random state) and
takes its share of the rows; each process's loss is its summed token
losses over the whole batch's token count, times the number of processes,
so the gradient DistributedDataParallel averages is the whole batch's mean
cross-entropy gradient, as in `chainrule gpt`. The printed loss is that
mean, all-reduced. The learning rate falls linearly to 0 at --steps, as in
`chainrule gpt`. Backend: NCCL when every process has a GPU, gloo on CPUs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from chainrule.cli.gpt import BETAS, HELD_OUT
from chainrule.data import load_lines
from chainrule.interop import from_torch
from chainrule.interop.torch_nn import GPT
from chainrule.tensor import charlm, checkpoint

SHIPPED = "shipped names"


def documents(run: dict[str, Any]) -> list[str]:
    """The documents the run trained on, checked against its fingerprint."""
    source = run["data"]
    docs = charlm.shipped_names() if source.startswith(SHIPPED) else load_lines(source)
    if hashlib.sha256("\n".join(docs).encode("utf-8")).hexdigest() != run["data_sha256"]:
        raise SystemExit(f"continue_on_torch: {source} is not the data the run trained on")
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a chainrule gpt checkpoint")
    parser.add_argument("--steps", type=int, required=True, help="total steps to train to")
    parser.add_argument("--out", type=Path, help="where to save (default: beside --checkpoint)")
    parser.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    args = parser.parse_args()

    # chainrule's reader checks every byte (model, Adam state, run state) ...
    try:
        saved = checkpoint.read(args.checkpoint)
        config = checkpoint.gpt_config(saved["architecture"], saved["parameters"], args.checkpoint)
        run, adam = saved["metadata"]["run"], saved["optimizer"]
        settings = run["settings"]
    except (checkpoint.CheckpointError, KeyError, TypeError) as e:
        raise SystemExit(f"continue_on_torch: not a chainrule gpt checkpoint: {e}") from None

    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
    # ... and the file itself is an ordinary safetensors state dict for the twin.
    model = GPT(config).to(getattr(torch, settings["dtype"]))
    model.load_state_dict(load_file(args.checkpoint), strict=True)
    model.to(device)

    docs = documents(run)
    train_docs, _ = charlm.split(docs, HELD_OUT, settings["seed"])
    vocab = charlm.Vocabulary.from_documents(docs)
    train_seqs = charlm.encode_all(train_docs, vocab, settings["block_size"])
    batches = np.random.default_rng()
    batches.bit_generator.state = run["rng"]
    if settings["batch_size"] < world:
        raise SystemExit(
            f"continue_on_torch: batch of {settings['batch_size']} < {world} processes"
        )

    ddp = DistributedDataParallel(model)
    names = [n for n, _ in model.named_parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"], betas=BETAS, eps=1e-8)
    for name, p in zip(names, model.parameters()):  # Adam continues where chainrule's stopped
        optimizer.state[p] = {
            "step": torch.tensor(float(adam["t"])),
            "exp_avg": torch.from_numpy(adam["m"][name]).to(device),
            "exp_avg_sq": torch.from_numpy(adam["v"][name]).to(device),
        }

    step = run["step"]
    if rank == 0:
        print(f"torch.distributed: {backend}, {world} processes; resuming at step {step}")
    while step < args.steps:
        rows = batches.integers(0, len(train_seqs), settings["batch_size"])
        x, y = charlm.batch([train_seqs[i] for i in rows], vocab.bos)
        tokens = int((y != charlm.IGNORE).sum())
        xs = torch.from_numpy(x[rank::world]).to(device)
        ys = torch.from_numpy(y[rank::world]).to(device)
        logits = ddp(xs)
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ys.reshape(-1), reduction="sum"
        )
        for group in optimizer.param_groups:  # chainrule's LinearDecay to 0 at --steps
            group["lr"] = settings["lr"] * (1.0 - step / args.steps)
        optimizer.zero_grad()
        (total * world / tokens).backward()  # DDP averages over processes: the batch mean
        optimizer.step()
        step += 1
        reported = total.detach().to(torch.float64)
        dist.all_reduce(reported)
        if rank == 0:
            print(f"step {step}/{args.steps}: loss {reported.item() / tokens:.7f}", flush=True)

    if rank == 0:
        out = args.out or args.checkpoint.parent
        out.mkdir(parents=True, exist_ok=True)
        state = {"t": step, "m": {}, "v": {}}
        for name, p in zip(names, model.parameters()):
            state["m"][name] = optimizer.state[p]["exp_avg"].cpu().numpy()
            state["v"][name] = optimizer.state[p]["exp_avg_sq"].cpu().numpy()
        run = {**run, "step": step, "steps": args.steps, "rng": batches.bit_generator.state}
        path = out / "gpt.safetensors"
        checkpoint.save(
            from_torch(model.cpu()),
            path,
            metadata={**saved["metadata"], "run": run},
            optimizer=state,
        )
        print(f"checkpoint: {path} (step {step})")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
