"""``chainrule gpt``: train a character-level GPT on names, then sample new
ones.

microgpt's architecture on ``chainrule.Tensor``, trained in batches: the
names (shipped with chainrule, or one document a line from ``--data``) are
split 90/10 with the seed; each step draws a batch of training names,
pads it, and takes one Adam step (microgpt's betas, the learning rate
falling linearly to 0). At the end the command prints the model's loss on
the held-out names next to a bigram model's (counts with add-one smoothing,
fitted on the same training names, scored on the same held-out positions)
and samples new names.

A checkpoint is written to ``DIR/gpt.safetensors`` (the model, PyTorch's
names, with the run state in its metadata) and ``DIR/gpt.optim.safetensors``
(the Adam moments) every ``--checkpoint-every`` steps and at the end
(atomically, every byte under a SHA-256: :mod:`chainrule.tensor.checkpoint`);
``--resume`` continues from it exactly where it stopped, so an interrupted
run and an uninterrupted one end with the same numbers. Ctrl-C during
training finishes the step under way, saves the checkpoint and stops
(a second Ctrl-C stops at once, keeping the last checkpoint); every run
ends by printing the command that resumes it.
An existing checkpoint is never overwritten by a new run unless ``--force``
says so, and two runs never write into one directory at once.

Everything that can be checked before training is: the output directory
takes files, the data file is at most :data:`MAX_DATA_BYTES`, and the run
fits in memory (:func:`memory_estimate`), so a mistake costs a second, not
the steps before the first checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io.interrupts import deferred_interrupts
from .options import INTERRUPTED, CommandError, int_at_least, locked_out_dir
from .preflight import check_memory, check_output_file, make_out_dir
from .training import (
    adam_state,
    add_checkpoint_options,
    require_tensor,
    restore_adam,
    save_checkpoint,
    settings_from,
)
from .training import check_overwrite as _check_overwrite
from .training import positive_float as _positive_float
from .training import whole as _whole

DEFAULTS: dict[str, Any] = {
    "steps": 2000,
    "batch_size": 32,
    "lr": 0.01,
    "seed": 0,
    "dtype": "float32",
    "n_embd": 32,
    "n_head": 4,
    "n_layer": 2,
    "block_size": 16,
}
BETAS = (0.85, 0.99)  # microgpt's
HELD_OUT = 0.1
CHECKPOINT = "gpt.safetensors"
LEGACY_CHECKPOINT = "gpt.json"  # chainrule 0.1
MAX_DATA_BYTES = 64 * 2**20  # --data larger than this is refused, not read
SAMPLE_CHUNK = 1024  # at most this many names are sampled at once,
EVAL_BATCH = 256  # and this many held-out names scored at once,
ROWS_BYTES = 2**28  # fewer if their arrays would exceed this (long contexts, wide models)
CHECKPOINT_EVERY = 500
SAMPLES = 10
TEMPERATURE = 0.5  # microgpt's


@dataclass(frozen=True)
class Settings:
    """Everything that decides a run's numbers (and must match on resume)."""

    batch_size: int
    lr: float
    seed: int
    dtype: str
    n_embd: int
    n_head: int
    n_layer: int
    block_size: int


# ----------------------------------------------------------------------------
# argument parsing
# ----------------------------------------------------------------------------


_positive_int = int_at_least(1)
_non_negative_int = int_at_least(0)
_seed = _non_negative_int  # NumPy's SeedSequence takes non-negative integers only


def register(subparsers: Any) -> None:
    d = DEFAULTS
    p = subparsers.add_parser(
        "gpt",
        help="train a character-level GPT on names (Tensor engine) and sample new names",
        description=(
            "Train microgpt's transformer on chainrule.Tensor, in batches, on a list of "
            "names: the 5,163 first names shipped with chainrule (1990 US Census, public "
            "domain) or one document per line from --data FILE. 10% of the names (chosen "
            "by the seed) are held out. Shows a progress bar on stderr; prints the held-out "
            "loss next to a bigram baseline's, and samples new names. Writes a safetensors "
            "checkpoint DIR/gpt.safetensors (PyTorch loads it) and the Adam state beside it; "
            "--resume continues from them. Needs NumPy and safetensors."
        ),
        epilog="example: chainrule gpt --steps 3000 --n-embd 48 --out runs/gpt",
    )
    p.add_argument(
        "--steps",
        type=_positive_int,
        default=d["steps"],
        metavar="N",
        help=f"total training steps (default {d['steps']})",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="B",
        help=f"names per step (default {d['batch_size']})",
    )
    p.add_argument(
        "--lr",
        type=_positive_float,
        metavar="LR",
        help=f"Adam learning rate at step 0, falling linearly to 0 (default {d['lr']})",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        metavar="S",
        help=f"seed for split, weights and batches (default {d['seed']})",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        help=f"floating-point type of the model (default {d['dtype']})",
    )
    p.add_argument(
        "--n-embd", type=_positive_int, metavar="C", help=f"embedding width (default {d['n_embd']})"
    )
    p.add_argument(
        "--n-head",
        type=_positive_int,
        metavar="H",
        help=f"attention heads, dividing the width (default {d['n_head']})",
    )
    p.add_argument(
        "--n-layer",
        type=_positive_int,
        metavar="L",
        help=f"transformer blocks (default {d['n_layer']})",
    )
    p.add_argument(
        "--block-size",
        type=_positive_int,
        metavar="T",
        help=f"context length, longer names are cut (default {d['block_size']})",
    )
    p.add_argument(
        "--data",
        type=Path,
        metavar="FILE",
        help="train on this UTF-8 text file, one document per line "
        f"(at most {MAX_DATA_BYTES // 2**20} MiB)",
    )
    add_checkpoint_options(p, CHECKPOINT, f"the checkpoint {CHECKPOINT}", "--steps")
    p.add_argument(
        "--checkpoint-every",
        type=_non_negative_int,
        default=CHECKPOINT_EVERY,
        metavar="K",
        help=f"also save every K steps; 0: only at the end and on Ctrl-C "
        f"(default {CHECKPOINT_EVERY})",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        metavar="N",
        help="BLAS threads (default: OPENBLAS_NUM_THREADS if set, else 1; "
        "for matrices this small threads cost more than they give); applied with "
        "threadpoolctl if installed (pip install threadpoolctl)",
    )
    p.add_argument(
        "--samples",
        type=_non_negative_int,
        default=SAMPLES,
        metavar="N",
        help=f"names to sample at the end (default {SAMPLES})",
    )
    p.add_argument(
        "--temperature",
        type=_positive_float,
        default=TEMPERATURE,
        metavar="T",
        help=f"sampling temperature (default {TEMPERATURE:g}, as microgpt)",
    )
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace, saved: dict[str, Any] | None) -> Settings:
    """The run's settings (:func:`~chainrule.cli.training.settings_from`),
    checked."""
    values = settings_from(Settings.__dataclass_fields__, args, saved, DEFAULTS)
    settings = Settings(**values)
    if settings.n_embd % settings.n_head:
        raise CommandError(
            f"--n-embd {settings.n_embd} is not divisible by --n-head {settings.n_head}"
        )
    return settings


# ----------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------


_INT_SETTINGS = ("batch_size", "n_embd", "n_head", "n_layer", "block_size")


def _saved_run(saved: dict[str, Any], path: Path) -> dict[str, Any]:
    """The run state stored with a gpt checkpoint, checked as far as it can
    be before use: a foreign file (or one edited and resealed) gives a
    CommandError, never a traceback or a silently wrong run. (The checkpoint's
    digest already covers every byte, this metadata and the optimizer
    state included.)"""
    run = saved["metadata"].get("run")
    if isinstance(run, dict):
        run = {**run, "optimizer": saved["optimizer"]}
    architecture = saved["architecture"]
    is_gpt = isinstance(architecture, dict) and architecture.get("type") == "GPT"
    if not is_gpt or not isinstance(run, dict):
        raise CommandError(f"--resume: {path} is not a chainrule gpt checkpoint")
    problem = _run_problem(run)
    if problem:
        raise CommandError(f"--resume: {path}: corrupt run state (bad or missing {problem})")
    return run


def _run_problem(run: dict[str, Any]) -> str | None:
    """The first part of a checkpoint's run state that is missing or of the
    wrong kind, or None."""
    settings = run.get("settings")
    if not isinstance(settings, dict) or set(settings) != set(Settings.__dataclass_fields__):
        return "settings"
    lr = settings["lr"]
    if not (
        all(_whole(settings[k], 1) for k in _INT_SETTINGS)
        and _whole(settings["seed"], 0)
        and settings["dtype"] in ("float32", "float64")
        and settings["n_embd"] % settings["n_head"] == 0
        and type(lr) in (int, float)
        and 0.0 < lr < float("inf")
    ):
        return "settings"
    if not _whole(run.get("step"), 0):
        return "step"
    if not isinstance(run.get("data_sha256"), str):
        return "data_sha256"
    optimizer = run.get("optimizer")
    if not isinstance(optimizer, dict) or not _whole(optimizer.get("t"), 0):
        return "optimizer"
    if not (isinstance(optimizer.get("m"), dict) and isinstance(optimizer.get("v"), dict)):
        return "optimizer"
    return None


def _load_documents(data: Path | None) -> tuple[list[str], str]:
    from ..data import DatasetError, load_lines
    from ..tensor.charlm import shipped_names

    if data is None:
        return shipped_names(), "shipped names (1990 US Census first names)"
    try:
        docs = load_lines(data, max_bytes=MAX_DATA_BYTES)
    except DatasetError as e:
        raise CommandError(f"--data {e}") from None
    if len(docs) < 2:
        raise CommandError(f"--data {data}: need at least 2 documents (lines), found {len(docs)}")
    return docs, str(data)


def _fingerprint(docs: list[str]) -> str:
    return hashlib.sha256("\n".join(docs).encode("utf-8")).hexdigest()


def _arrays(settings: Settings, vocab_size: int, rows: float, T: float) -> float:
    """Bytes of the arrays one forward and backward pass over ``rows`` x
    ``T`` tokens holds at its peak: each layer's, the logits', the
    embeddings'. The coefficients are a training step's peak as tracemalloc
    measures it (``tests/test_cli_robust.py`` checks them), rounded up."""
    item = 4 if settings.dtype == "float32" else 8
    C, H, L = settings.n_embd, settings.n_head, settings.n_layer
    return item * rows * T * (64 * L * C + 4 * L * H * T + 8 * vocab_size + 8 * C)


def rows_at_once(settings: Settings, vocab_size: int, T: int, most: int) -> int:
    """How many sequences of ``T`` tokens to sample or score at once: up to
    ``most``, fewer if their arrays would exceed :data:`ROWS_BYTES`. It
    depends on the settings only, so a seed gives the same names and the
    same loss on every machine."""
    one = _arrays(settings, vocab_size, 1, T)
    return int(max(1, min(most, ROWS_BYTES // one)))


def sample_chunk(settings: Settings, vocab_size: int) -> int:
    """Names sampled at once (their context can fill up: ``block_size`` tokens)."""
    return rows_at_once(settings, vocab_size, settings.block_size, SAMPLE_CHUNK)


def memory_estimate(
    settings: Settings, vocab_size: int, tokens: int, documents: int, samples: int
) -> float:
    """Bytes a run needs at its peak, an upper estimate: the parameters with
    their gradients and Adam moments, the encoded data, and the largest of
    one training step's, one evaluation batch's and one sampling chunk's
    arrays (a chunk at a full context: the worst case, no name ends) plus
    the sampled names. ``tokens`` is the longest encoded document (at most
    ``block_size + 1``)."""
    item = 4 if settings.dtype == "float32" else 8
    C, L, V, block = settings.n_embd, settings.n_layer, vocab_size, settings.block_size
    params = 2 * V * C + block * C + 12 * L * C * C
    T = min(block, tokens - 1)
    chunk = min(samples, sample_chunk(settings, V))
    peak = max(
        _arrays(settings, V, settings.batch_size, T),
        _arrays(settings, V, rows_at_once(settings, V, T, EVAL_BATCH), T),
        _arrays(settings, V, chunk, block) + samples * (120 + 40 * block),
    )
    data = documents * (120 + 8 * (T + 1))
    return 6 * item * params + data + peak + 2e6


def evaluate(model: Any, seqs: list[Any], bos: int, batch_size: int = EVAL_BATCH) -> float:
    """Mean cross-entropy per predicted token over ``seqs``, in nats."""
    from ..tensor import charlm, cross_entropy
    from ..value.mode import no_grad

    total, count = 0.0, 0
    with no_grad():
        for i in range(0, len(seqs), batch_size):
            x, y = charlm.batch(seqs[i : i + batch_size], bos)
            logits = model(x)
            total += float(cross_entropy(logits, y, reduction="sum").data)
            count += int((y != charlm.IGNORE).sum())
    return total / count


@dataclass
class Result:
    step: int
    held_out_loss: float
    bigram_loss: float
    samples: list[str]
    seconds: float
    documents: frozenset[str] = frozenset()  # what it trained on: a sample in it is marked


def train(args: argparse.Namespace, out: Path) -> Result:
    import numpy as np

    from ..optim import Adam, LinearDecay
    from ..tensor import charlm, checkpoint
    from ..tensor.memory import keep_freed_memory
    from ..tensor.nn import GPT, GPTConfig
    from .progress import ProgressBar

    keep_freed_memory()
    started = time.perf_counter()
    path = out / CHECKPOINT
    saved: dict[str, Any] | None = None
    if args.resume:
        legacy = out / LEGACY_CHECKPOINT
        if not path.exists() and legacy.exists():
            raise CommandError(
                f"--resume: {legacy} is a checkpoint of chainrule 0.1, whose run state had no "
                f"checksum; convert it with: python -m chainrule.cli.convert {legacy}"
            )
        try:
            saved = checkpoint.read(path)
            checkpoint.gpt_config(saved["architecture"], saved["parameters"], path)
        except (checkpoint.CheckpointError, ImportError) as e:
            raise CommandError(f"--resume: {e}") from None
    run_meta = _saved_run(saved, path) if saved is not None else None
    settings = _settings(args, run_meta["settings"] if run_meta else None)
    if run_meta and run_meta["step"] >= args.steps:
        raise CommandError(
            f"--resume: {path} is already at step {run_meta['step']}, which reaches "
            f"--steps {args.steps}: nothing to train; give a larger --steps to continue"
        )

    docs, source = _load_documents(args.data)
    if run_meta and run_meta["data_sha256"] != _fingerprint(docs):
        raise CommandError(f"--resume: {path} was trained on other data than {source}")
    vocab = charlm.Vocabulary.from_documents(docs)
    check_memory(
        memory_estimate(
            settings,
            vocab.size,
            min(max(len(d) for d in docs) + 2, settings.block_size + 1),
            len(docs),
            args.samples,
        ),
        "this run",
        "use a smaller --batch-size, --block-size, --n-embd, --n-layer or --samples",
    )
    train_docs, held_docs = charlm.split(docs, HELD_OUT, settings.seed)
    train_seqs = charlm.encode_all(train_docs, vocab, settings.block_size)
    held_seqs = charlm.encode_all(held_docs, vocab, settings.block_size)

    config = GPTConfig(
        vocab_size=vocab.size,
        block_size=settings.block_size,
        n_embd=settings.n_embd,
        n_head=settings.n_head,
        n_layer=settings.n_layer,
    )
    if saved is not None and saved["architecture"] != {"type": "GPT", **config.to_dict()}:
        raise CommandError(f"--resume: {path}: the architecture differs from its run settings")
    init_seed, batch_seed, sample_seed = np.random.SeedSequence(settings.seed).spawn(3)
    model = GPT(config, dtype=settings.dtype, rng=np.random.default_rng(init_seed))
    names = [n for n, _ in model.named_parameters()]
    params = model.parameters()
    optimizer = Adam(params, lr=settings.lr, betas=BETAS)
    schedule = LinearDecay(optimizer, total_steps=args.steps, end_factor=0.0)
    batches = np.random.default_rng(batch_seed)
    step = 0
    if saved is not None:
        assert run_meta is not None
        try:
            model.load_state_dict(saved["parameters"])
        except ValueError as e:
            raise CommandError(f"--resume: {path}: {e}") from None
        step = run_meta["step"]
        state = run_meta["optimizer"]
        try:
            restore_adam(optimizer, state, names, settings.dtype)
            batches.bit_generator.state = run_meta["rng"]
        except (KeyError, TypeError, ValueError) as e:
            raise CommandError(
                f"--resume: {path}: corrupt optimizer or random state ({e})"
            ) from None
        schedule.steps_done = step
        optimizer.lr = schedule.lr_at(step)

    def save(k: int) -> None:
        meta = {
            "command": "gpt",
            "run": {
                "settings": settings.__dict__,
                "step": k,
                "steps": args.steps,
                "data": source,
                "data_sha256": _fingerprint(docs),
                "vocabulary": vocab.chars,
                "rng": batches.bit_generator.state,
            },
        }
        save_checkpoint(model, path, meta, adam_state(optimizer, names))

    print(
        f"data: {len(docs):,} documents from {source}: "
        f"{len(train_docs):,} training, {len(held_docs):,} held out"
    )
    print(
        f"model: GPT, {config.n_layer} layers, {config.n_head} heads, {config.n_embd} dims, "
        f"block {config.block_size}, vocabulary {vocab.size}, "
        f"{model.num_parameters():,} parameters, {settings.dtype}"
    )
    if step:
        print(f"resuming at step {step} of {args.steps} from {path}")
    sys.stdout.flush()

    # Ctrl-C is looked at between steps: a step half applied to the
    # parameters is never saved
    with (
        ProgressBar(args.steps, every=max(args.steps // 20, 1)) as bar,
        deferred_interrupts(insist=True) as interrupts,
    ):
        while step < args.steps and not interrupts:
            rows = batches.integers(0, len(train_seqs), settings.batch_size)
            x, y = charlm.batch([train_seqs[i] for i in rows], vocab.bos)
            _, loss = model(x, y)
            value = float(loss.data)
            if not math.isfinite(value):  # nothing more to learn, and nothing to save
                raise CommandError(
                    f"training diverged at step {step + 1} (loss {value}); try a smaller --lr"
                )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            bar.update(step, loss=value)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save(step)
        if not (args.checkpoint_every and step % args.checkpoint_every == 0):
            save(step)  # at the end, or where Ctrl-C stopped the loop
    if interrupts and step < args.steps:
        raise CommandError(
            f"interrupted at step {step} of {args.steps}; checkpoint saved: {path}\n"
            f"resume with: {resume_command(args)}",
            INTERRUPTED,
        )
    try:
        if interrupts:  # during the last step or its save: the run is complete
            raise KeyboardInterrupt
        longest = max(len(s) for s in held_seqs) - 1
        held_out = evaluate(
            model, held_seqs, vocab.bos, rows_at_once(settings, vocab.size, longest, EVAL_BATCH)
        )
        bigram = charlm.Bigram(train_seqs, vocab.size).loss(held_seqs)
        sampler = np.random.default_rng(sample_seed)
        samples = []
        chunk = sample_chunk(settings, vocab.size)
        for start in range(0, args.samples, chunk):
            n = min(chunk, args.samples - start)
            generated = model.generate(n, vocab.bos, temperature=args.temperature, rng=sampler)
            samples += [vocab.decode(s) for s in generated]
    except KeyboardInterrupt:
        raise CommandError(
            f"interrupted after training; the checkpoint at step {step} is complete: {path}\n"
            f"to train further: {resume_command(args, 2 * args.steps)}",
            INTERRUPTED,
        ) from None
    seconds = time.perf_counter() - started
    return Result(step, held_out, bigram, samples, seconds, frozenset(docs))


def resume_command(args: argparse.Namespace, steps: int | None = None) -> str:
    """The command that continues this run (to ``steps`` in total, default
    ``--steps``): its directory, its data, and the options that are not
    stored in the checkpoint, where they differ from the defaults."""
    words = ["chainrule", "gpt", "--resume", "--out", str(args.out)]
    words += ["--steps", str(steps or args.steps)]
    if args.data is not None:
        words += ["--data", str(args.data)]
    for flag, value, default in (
        ("--checkpoint-every", args.checkpoint_every, CHECKPOINT_EVERY),
        ("--samples", args.samples, SAMPLES),
        ("--temperature", args.temperature, TEMPERATURE),
        ("--threads", args.threads, None),
    ):
        if value != default:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(words)


_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _thread_count(threads: int | None) -> int:
    if threads is not None:
        return threads
    try:
        return max(int(os.environ.get("OPENBLAS_NUM_THREADS", "1")), 1)
    except ValueError:
        return 1


def _thread_environment(threads: int | None) -> bool:
    """Set the BLAS thread variables if NumPy has not loaded its BLAS yet
    (the only time they count); False if it has."""
    if "numpy" in sys.modules:
        return False
    n = str(_thread_count(threads))
    for var in _THREAD_VARS:
        if threads is not None:
            os.environ[var] = n
        else:  # a variable the user set stays as it is
            os.environ.setdefault(var, n)
    return True


@contextlib.contextmanager
def blas_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` BLAS threads (None: OPENBLAS_NUM_THREADS,
    else 1) in NumPy's BLAS, which must be loaded: threadpoolctl (the
    ``threads`` extra) sets it for the block and restores it after. Without
    threadpoolctl only the environment variables, set before NumPy loaded,
    can have done it; an explicit ``--threads`` they came too late for gets
    a one-line note."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        if threads is not None and os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
            print(
                "chainrule gpt: --threads cannot take effect once NumPy is loaded without "
                "threadpoolctl: pip install threadpoolctl",
                file=sys.stderr,
            )
        yield
        return
    with threadpool_limits(limits=_thread_count(threads), user_api="blas"):
        yield


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    _thread_environment(args.threads)
    numpy = require_tensor("tensor")
    problem = make_out_dir(out)
    if problem:
        raise CommandError(problem)
    from ..tensor.checkpoint import optimizer_path

    with locked_out_dir(out):
        _check_overwrite(args, out / CHECKPOINT)
        for target in (out / CHECKPOINT, optimizer_path(out / CHECKPOINT)):
            check_output_file(target, "--out")  # before the work, each file it writes
        # overflow in a diverging run is reported once, as a non-finite loss,
        # not as a stream of NumPy warnings
        with blas_threads(args.threads), numpy.errstate(all="ignore"):
            result = train(args, out)
    print(f"checkpoint: {out / CHECKPOINT} (step {result.step})")
    print(
        f"held-out loss: {result.held_out_loss:.4f} nats/token "
        f"(bigram baseline: {result.bigram_loss:.4f})"
    )
    if result.samples:
        print(f"samples (temperature {args.temperature:g}; * = also in the data):")
        for s in result.samples:
            print(f"  {s}{' *' if s in result.documents else ''}")
    print(f"time: {result.seconds:.1f} s")
    print(f"to train further: {resume_command(args, 2 * args.steps)}")
    return 0


__all__ = ["DEFAULTS", "Result", "Settings", "evaluate", "register", "run", "train"]
