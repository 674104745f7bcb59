"""``chainrule digits``: a small CNN learns to read handwritten digits.

The data are the UCI handwritten digits that scikit-learn ships (1,797
images of 8 x 8 pixels, :mod:`chainrule.data.images`; the ``data`` extra), or a
user's ``--data FILE.npz`` of images and labels. A fixed, seeded fifth of
the images is held out (the same split for every ``--seed``). The model
(:func:`chainrule.tensor.cnn.image_classifier`: two convolution, batch norm
and max-pooling blocks and a linear head) trains with Adam, the learning
rate falling linearly to 0, in shuffled batches; ``--seed`` fixes the
weights and the order, so a run gives the same numbers every time.

At the end the command prints the held-out accuracy and the confusion
matrix as a table, and draws the held-out images it got wrong into
``DIR/digits-misclassified.png``. The model and the Adam state are saved
after every epoch (safetensors, atomically: :mod:`chainrule.tensor.checkpoint`)
to ``DIR/digits.safetensors``; ``--resume`` continues from there, and an
interrupted and resumed run ends with the numbers of an uninterrupted one.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io.interrupts import deferred_interrupts
from .gpt import blas_threads
from .options import INTERRUPTED, CommandError, int_at_least, locked_out_dir
from .preflight import check_memory, check_output_file, make_out_dir
from .training import (
    adam_state,
    add_checkpoint_options,
    check_overwrite,
    positive_float,
    require_tensor,
    restore_adam,
    save_checkpoint,
    settings_from,
    whole,
)

DEFAULTS: dict[str, Any] = {
    "batch_size": 64,
    "lr": 0.01,
    "seed": 0,
    "dtype": "float32",
}
EPOCHS = 15
HELD_OUT = 0.2
SPLIT_SEED = 0  # the split is the data's, not the run's: one --seed or another, the same test
CHECKPOINT = "digits.safetensors"
PICTURE = "digits-misclassified.png"
EVAL_BATCH = 512
SHOW = 48  # misclassified images drawn, at most


@dataclass(frozen=True)
class Settings:
    """Everything that decides a run's numbers (and must match on resume)."""

    batch_size: int
    lr: float
    seed: int
    dtype: str


_positive_int = int_at_least(1)


def register(subparsers: Any) -> None:
    d = DEFAULTS
    p = subparsers.add_parser(
        "digits",
        help="train a small CNN on handwritten digits (Tensor engine)",
        description=(
            "Train a small convolutional network (two blocks of convolution, batch norm, "
            "ReLU and max pooling, then a linear layer) with Adam on the 1,797 UCI "
            "handwritten digits that scikit-learn ships (pip install 'chainrule[data]'), "
            "or on images and labels from --data FILE.npz. A fixed fifth of the images "
            "is held out. Shows a progress bar on stderr; prints the held-out accuracy "
            "and the confusion matrix, draws the misclassified digits into "
            f"DIR/{PICTURE}, and saves a safetensors checkpoint DIR/{CHECKPOINT} every "
            "epoch, which --resume continues."
        ),
        epilog="example: chainrule digits --epochs 20 --out runs/digits",
    )
    p.add_argument(
        "--epochs",
        type=_positive_int,
        default=EPOCHS,
        metavar="N",
        help=f"passes over the training images, in total (default {EPOCHS})",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="B",
        help=f"images per step (default {d['batch_size']})",
    )
    p.add_argument(
        "--lr",
        type=positive_float,
        metavar="LR",
        help=f"Adam learning rate at the start, falling linearly to 0 (default {d['lr']})",
    )
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        metavar="S",
        help=f"seed for the weights and the batches (default {d['seed']})",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        help=f"floating-point type of the model (default {d['dtype']})",
    )
    p.add_argument(
        "--data",
        type=Path,
        metavar="FILE",
        help="a NumPy .npz with arrays 'images' (N, H, W) or (N, C, H, W) and 'labels' (N,) "
        "instead of the digits",
    )
    add_checkpoint_options(p, CHECKPOINT, f"{CHECKPOINT} and {PICTURE}", "--epochs")
    p.add_argument(
        "--show",
        type=int_at_least(0),
        default=SHOW,
        metavar="N",
        help=f"misclassified images to draw, at most (default {SHOW}; 0: no picture)",
    )
    p.set_defaults(func=run)


# ----------------------------------------------------------------------------
# data and checkpoints
# ----------------------------------------------------------------------------


def _load_data(path: Path | None) -> Any:
    from ..data import DatasetError
    from ..data.images import MissingExtra, load_digits, load_npz

    try:
        return load_digits() if path is None else load_npz(path)
    except MissingExtra as e:
        raise CommandError(f"{e}; or give your own images with --data FILE.npz") from None
    except DatasetError as e:
        raise CommandError(f"--data {e}") from None


def _settings(args: argparse.Namespace, saved: dict[str, Any] | None) -> Settings:
    return Settings(**settings_from(Settings.__dataclass_fields__, args, saved, DEFAULTS))


def _settings_ok(settings: Any) -> bool:
    if not isinstance(settings, dict) or set(settings) != set(Settings.__dataclass_fields__):
        return False
    lr = settings["lr"]
    return bool(
        whole(settings["batch_size"], 1)
        and whole(settings["seed"], 0)
        and settings["dtype"] in ("float32", "float64")
        and type(lr) in (int, float)
        and 0.0 < lr < math.inf
    )


def _saved_run(saved: dict[str, Any], path: Path) -> dict[str, Any]:
    """The run state of a digits checkpoint, checked before use: a foreign
    or edited file gives one line, never a traceback or a wrong run."""
    run = saved["metadata"].get("run")
    architecture = saved["architecture"]
    if (
        not isinstance(run, dict)
        or saved["metadata"].get("command") != "digits"
        or not isinstance(architecture, dict)
        or architecture.get("type") != "Sequential"
    ):
        raise CommandError(f"--resume: {path} is not a chainrule digits checkpoint")
    settings = run.get("settings")
    problem = None
    if not _settings_ok(settings):
        problem = "settings"
    elif not whole(run.get("epoch"), 0) or not whole(run.get("batch"), 0):
        problem = "epoch"
    elif not isinstance(run.get("data_sha256"), str):
        problem = "data_sha256"
    else:
        optimizer = saved["optimizer"]
        if not (
            isinstance(optimizer, dict)
            and whole(optimizer.get("t"), 0)
            and isinstance(optimizer.get("m"), dict)
            and isinstance(optimizer.get("v"), dict)
        ):
            problem = "optimizer state"
    if problem:
        raise CommandError(f"--resume: {path}: corrupt run state (bad or missing {problem})")
    return {**run, "optimizer": saved["optimizer"]}


# ----------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------


@dataclass
class Result:
    epoch: int
    accuracy: float
    confusion: Any  # (classes, classes): rows the true class, columns the predicted
    wrong: Any  # indices (into the held-out set) of the misclassified images
    predicted: Any
    held_images: Any
    held_labels: Any
    seconds: float


def predict(model: Any, images: Any, batch_size: int = EVAL_BATCH) -> Any:
    """The class the model gives each image (evaluation mode, no graph)."""
    import numpy as np

    from ..value.mode import no_grad

    was_training = model.training
    model.eval()
    try:
        with no_grad():
            out = [
                model(images[i : i + batch_size]).data.argmax(axis=1)
                for i in range(0, len(images), batch_size)
            ]
    finally:
        model.train(was_training)
    return np.concatenate(out)


def confusion_matrix(true: Any, predicted: Any, classes: int) -> Any:
    """Counts ``(classes, classes)``: row ``i``, column ``j`` the images of
    class ``i`` predicted as ``j``."""
    import numpy as np

    counts = np.bincount(true * classes + predicted, minlength=classes * classes)
    return counts.reshape(classes, classes)


def format_confusion(matrix: Any) -> str:
    """The confusion matrix as a text table, true classes down, predictions
    across, the correct ones on the diagonal."""
    classes = len(matrix)
    width = max(3, len(str(int(matrix.max()))) + 1, len(str(classes - 1)) + 1)
    lines = ["true\\pred" + "".join(f"{j:>{width}}" for j in range(classes))]
    for i, row in enumerate(matrix):
        lines.append(f"{i:>9}" + "".join(f"{int(n):>{width}}" for n in row))
    return "\n".join(lines)


def train(args: argparse.Namespace, out: Path) -> Result:
    import numpy as np

    from ..data.images import split
    from ..optim import Adam, LinearDecay
    from ..tensor import checkpoint, cross_entropy
    from ..tensor.cnn import image_classifier
    from ..tensor.memory import keep_freed_memory
    from .progress import ProgressBar

    keep_freed_memory()
    started = time.perf_counter()
    path = out / CHECKPOINT
    saved = None
    if args.resume:
        try:
            saved = checkpoint.read(path)
        except (checkpoint.CheckpointError, ImportError) as e:
            raise CommandError(f"--resume: {e}") from None
    run_meta = _saved_run(saved, path) if saved is not None else None
    settings = _settings(args, run_meta["settings"] if run_meta else None)
    if run_meta and run_meta["epoch"] >= args.epochs:
        raise CommandError(
            f"--resume: {path} is already at epoch {run_meta['epoch']}, which reaches "
            f"--epochs {args.epochs}: nothing to train; give a larger --epochs to continue"
        )
    data = _load_data(args.data)
    if run_meta and run_meta["data_sha256"] != data.fingerprint():
        raise CommandError(f"--resume: {path} was trained on other data than {data.source}")
    n, C, H, W = data.images.shape
    item = 4 if settings.dtype == "float32" else 8
    # the images, and one batch's activations through the widest layer (generous)
    check_memory(
        n * C * H * W * (8 + item) + settings.batch_size * H * W * 16 * 40 * item + 50e6,
        "this run",
        "use a smaller --batch-size or smaller images",
    )
    train_idx, held_idx = split(n, HELD_OUT, SPLIT_SEED)
    images = data.images.astype(settings.dtype)
    init_seed, batch_seed = np.random.SeedSequence(settings.seed).spawn(2)
    model = image_classifier(
        C, (H, W), data.classes, dtype=settings.dtype, rng=np.random.default_rng(init_seed)
    )
    if saved is not None and saved["architecture"] != model.config():
        raise CommandError(f"--resume: {path}: the model differs from this data's")
    names = [name for name, _ in model.named_parameters()]
    params = model.parameters()
    optimizer = Adam(params, lr=settings.lr)
    per_epoch = -(-len(train_idx) // settings.batch_size)
    schedule = LinearDecay(optimizer, total_steps=args.epochs * per_epoch, end_factor=0.0)
    batches = np.random.default_rng(batch_seed)
    epoch, batch = 0, 0  # epochs done, and batches done of the next one
    accuracy = math.nan  # on the held-out images, after the last whole epoch
    if saved is not None and run_meta is not None:
        state = run_meta["optimizer"]
        try:
            model.load_state_dict(saved["parameters"])
            restore_adam(optimizer, state, names, settings.dtype)
            batches.bit_generator.state = run_meta["rng"]
        except (KeyError, TypeError, ValueError) as e:
            raise CommandError(f"--resume: {path}: corrupt model or run state ({e})") from None
        epoch, batch = run_meta["epoch"], run_meta["batch"]
        if batch >= per_epoch:
            raise CommandError(f"--resume: {path}: corrupt run state (batch {batch})")
        known = run_meta.get("held_out_accuracy")
        accuracy = float(known) if isinstance(known, (int, float)) else math.nan
        schedule.steps_done = epoch * per_epoch + batch
        optimizer.lr = schedule.lr_at(schedule.steps_done)

    # the generator's state before the epoch's shuffle: a run saved in the
    # middle of an epoch shuffles it again, alike, and skips what it did
    epoch_start = batches.bit_generator.state

    def save() -> None:
        meta = {
            "command": "digits",
            "run": {
                "settings": settings.__dict__,
                "epoch": epoch,
                "batch": batch,
                "epochs": args.epochs,
                "held_out_accuracy": None if math.isnan(accuracy) else accuracy,
                "data": data.source,
                "data_sha256": data.fingerprint(),
                "rng": epoch_start,
            },
        }
        save_checkpoint(model, path, meta, adam_state(optimizer, names))

    held_images, held_labels = images[held_idx], data.labels[held_idx]
    print(
        f"data: {n:,} images of {C} x {H} x {W} in {data.classes} classes from {data.source}: "
        f"{len(train_idx):,} training, {len(held_idx):,} held out"
    )
    print(
        f"model: CNN, {model.num_parameters():,} parameters, {settings.dtype}; Adam, lr "
        f"{settings.lr:g}, batch {settings.batch_size}, {args.epochs} epochs"
    )
    if epoch or batch:
        print(f"resuming at epoch {epoch + 1}, step {batch + 1} of {per_epoch}, from {path}")
    sys.stdout.flush()
    done = epoch * per_epoch + batch
    # Ctrl-C is looked at between steps: a step half applied is never saved
    with (
        ProgressBar(args.epochs * per_epoch, every=per_epoch) as bar,
        deferred_interrupts(insist=True) as interrupts,
    ):
        while epoch < args.epochs and not interrupts:
            epoch_start = batches.bit_generator.state
            order = batches.permutation(train_idx)
            for _ in range(batch, per_epoch):
                if interrupts:
                    break
                rows = order[batch * settings.batch_size : (batch + 1) * settings.batch_size]
                loss = cross_entropy(model(images[rows]), data.labels[rows])
                value = float(loss.data)
                if not math.isfinite(value):  # nothing more to learn, and nothing to save
                    raise CommandError(
                        f"training diverged in epoch {epoch + 1} (loss {value}); try a smaller --lr"
                    )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
                batch += 1
                done += 1
                if batch == per_epoch:  # a whole epoch: measure, and save
                    epoch, batch = epoch + 1, 0
                    epoch_start = batches.bit_generator.state
                    accuracy = float((predict(model, held_images) == held_labels).mean())
                    save()
                shown = "-" if math.isnan(accuracy) else f"{100 * accuracy:.1f}%"
                bar.update(done, epoch=epoch + (batch > 0), loss=value, held_out=shown)
        if interrupts and batch:
            save()  # where Ctrl-C stopped the loop, in the middle of an epoch
    if interrupts and epoch < args.epochs:
        raise CommandError(
            f"interrupted in epoch {epoch + 1} of {args.epochs}; checkpoint saved: {path}\n"
            f"resume with: {resume_command(args)}",
            INTERRUPTED,
        )
    predicted = predict(model, held_images)
    wrong = np.flatnonzero(predicted != held_labels)
    return Result(
        epoch,
        float((predicted == held_labels).mean()),
        confusion_matrix(held_labels, predicted, data.classes),
        wrong,
        predicted,
        held_images,
        held_labels,
        time.perf_counter() - started,
    )


def resume_command(args: argparse.Namespace, epochs: int | None = None) -> str:
    """The command that continues this run (to ``epochs`` in total, default
    ``--epochs``): its directory, its data and ``--show`` if not the default."""
    words = ["chainrule", "digits", "--resume", "--out", str(args.out)]
    words += ["--epochs", str(epochs or args.epochs)]
    if args.data is not None:
        words += ["--data", str(args.data)]
    if args.show != SHOW:
        words += ["--show", str(args.show)]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    numpy = require_tensor("tensor,data")
    problem = make_out_dir(out)
    if problem:
        raise CommandError(problem)
    from ..tensor.checkpoint import optimizer_path

    with locked_out_dir(out):
        check_overwrite(args, out / CHECKPOINT)
        for target in (out / CHECKPOINT, optimizer_path(out / CHECKPOINT), out / PICTURE):
            check_output_file(target, "--out")  # before the work, each file it writes
        with blas_threads(None), numpy.errstate(all="ignore"):
            result = train(args, out)
    print(f"checkpoint: {out / CHECKPOINT} (epoch {result.epoch})")
    total = len(result.held_labels)
    print(
        f"held-out accuracy: {100 * result.accuracy:.2f}% "
        f"({total - len(result.wrong)} of {total} images)"
    )
    print("confusion matrix (rows: true class, columns: predicted):")
    print(format_confusion(result.confusion))
    png = out / PICTURE
    shown = result.wrong[: args.show]
    if len(shown):
        from ..explainer.gallery import labelled_grid

        try:
            labelled_grid(
                result.held_images[shown],
                result.held_labels[shown].tolist(),
                result.predicted[shown].tolist(),
                png,
            )
        except OSError as e:
            raise CommandError(f"cannot write {png} ({e.strerror or e})") from None
        more = f" (the first {len(shown)})" if len(shown) < len(result.wrong) else ""
        print(f"misclassified: {png}{more}, each labelled true>predicted")
    elif not len(result.wrong):
        print("misclassified: none")
    print(f"time: {result.seconds:.1f} s")
    print(f"to train further: {resume_command(args, 2 * args.epochs)}")
    return 0


__all__ = ["DEFAULTS", "Result", "Settings", "confusion_matrix", "register", "run", "train"]
