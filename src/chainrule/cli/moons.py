"""``chainrule moons``: micrograd's demo, done right.

An MLP 2-16-16-1 learns to separate 100 noisy two-moons points: SVM
max-margin loss plus 1e-4 L2, plain SGD with the learning rate falling
linearly from 1.0 to 0.1. One seed fixes the data and the initial weights,
so a run is repeatable number for number.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import checkpoint
from ..data import make_moons
from ..explainer.raster import decision_boundary_png
from ..losses import hinge_loss
from ..nn import MLP
from ..optim import SGD, LinearDecay
from ..value.engine import Value
from ..value.mode import no_grad
from ..value.sums import dot
from .options import CommandError, int_at_least, locked_out_dir
from .preflight import make_out_dir, output_file_problem, would_load
from .progress import ProgressBar

DEFAULT_SEED = 1337  # micrograd's demo seed
DEFAULT_STEPS = 100
N_SAMPLES = 100
NOISE = 0.1
ALPHA = 1e-4  # L2 strength
PLOT_HINT = "for a matplotlib plot, install the plot extra: pip install -e '.[plot]'"


@dataclass
class Result:
    model: MLP
    X: list[list[float]]
    labels: list[int]  # -1 / +1
    loss: float
    accuracy: float


def objective(model: MLP, X: list[list[float]], labels: list[int]) -> tuple[Value, float]:
    """The demo's loss (hinge + L2) and the accuracy of the same forward pass."""
    params = model.parameters()
    scores = [model(x) for x in X]
    loss = hinge_loss(scores, labels) + ALPHA * dot(params, params)
    hits = sum((s.data > 0.0) == (t > 0) for s, t in zip(scores, labels))
    return loss, hits / len(labels)


def train(
    steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED, bar: ProgressBar | None = None
) -> Result:
    """Train the demo model; ``bar`` (optional) is updated after each step.

    The returned loss and accuracy are measured after the last update.
    """
    rng = random.Random(seed)
    X, y = make_moons(N_SAMPLES, noise=NOISE, seed=rng)
    labels = [2 * t - 1 for t in y]  # -1 / +1 for the SVM loss
    model = MLP(2, [16, 16, 1], rng=rng)
    optimizer = SGD(model.parameters(), lr=1.0)
    schedule = LinearDecay(optimizer, total_steps=steps, end_factor=0.1)
    for k in range(1, steps + 1):
        loss, acc = objective(model, X, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if bar is not None:
            bar.update(k, loss=loss.data, acc=f"{100 * acc:.1f}%")
    with no_grad():
        loss, acc = objective(model, X, labels)
    return Result(model, X, labels, loss.data, acc)


def plot_decision_boundary(
    model: MLP, X: list[list[float]], labels: list[int], path: Path, grid: int = 50
) -> None:
    """Save the model's decision regions and the points as a PNG.

    Raises ImportError when matplotlib is not installed.
    """
    from matplotlib.figure import Figure  # the optional extra; no pyplot state

    xs = [p[0] for p in X]
    ys = [p[1] for p in X]
    x0, x1 = min(xs) - 0.5, max(xs) + 0.5
    y0, y1 = min(ys) - 0.5, max(ys) + 0.5
    gx = [x0 + (x1 - x0) * i / (grid - 1) for i in range(grid)]
    gy = [y0 + (y1 - y0) * j / (grid - 1) for j in range(grid)]
    with no_grad():
        zz = [[model([a, b]).data for a in gx] for b in gy]
    # Interpolating the raw scores, not their signs, gives a smooth boundary.
    lo = min(min(row) for row in zz) - 1.0
    hi = max(max(row) for row in zz) + 1.0
    fig = Figure(figsize=(5, 5))
    ax = fig.subplots()
    ax.contourf(gx, gy, zz, levels=[lo, 0.0, hi], colors=["#f6c3c3", "#c3d7f6"])
    ax.contour(gx, gy, zz, levels=[0.0], colors="k", linewidths=0.8)
    ax.scatter(
        xs,
        ys,
        c=["#c0392b" if t < 0 else "#2155a6" for t in labels],
        s=20,
        edgecolors="k",
        linewidths=0.3,
    )
    ax.set_title("chainrule moons: MLP 2-16-16-1 decision boundary")
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    fig.savefig(path, dpi=100)


def plot_decision_boundary_basic(
    model: MLP, X: list[list[float]], labels: list[int], path: Path
) -> None:
    """The same picture without matplotlib (see :mod:`chainrule.explainer.raster`)."""

    def score(a: float, b: float) -> float:
        return model([a, b]).data

    with no_grad():
        decision_boundary_png(score, X, labels, path)


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "moons",
        help="train an MLP on the two-moons dataset (micrograd's demo)",
        description=(
            "Train an MLP 2-16-16-1 on 100 noisy two-moons points with the SVM max-margin "
            "loss plus 1e-4 L2 regularisation and SGD, the learning rate falling linearly "
            "from 1.0 to 0.1. Shows a progress bar with the loss and accuracy on stderr, "
            "prints the final training accuracy, and writes into DIR the decision boundary "
            "(moons.png: drawn by matplotlib with the plot extra, pip install -e '.[plot]', "
            "else by a built-in rasteriser) and the trained "
            "parameters (moons.json, a JSON checkpoint). The same seed gives the same numbers."
        ),
        epilog="example: chainrule moons --steps 200 --seed 7 --out runs/seed7",
    )
    p.add_argument(
        "--steps",
        type=int_at_least(1),
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"training steps, each over all points (default {DEFAULT_STEPS})",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        default=DEFAULT_SEED,
        metavar="S",
        help=f"seed for the data and the initial weights (default {DEFAULT_SEED})",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("out"),
        metavar="DIR",
        help="directory for moons.png and moons.json, created if missing (default out)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite DIR/moons.json even if another run (other steps or seed) wrote it",
    )
    p.set_defaults(func=run)


def _same_run(ckpt: Path, args: argparse.Namespace) -> bool:
    """True if ``ckpt`` is missing or a moons checkpoint of the same steps
    and seed: overwriting it then gives the same file again."""
    if not ckpt.exists():
        return True
    try:
        meta = checkpoint.read(ckpt)["metadata"]
    except checkpoint.CheckpointError:
        return False
    return meta.get("command") == "moons" and (meta.get("steps"), meta.get("seed")) == (
        args.steps,
        args.seed,
    )


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    problem = make_out_dir(out)
    if problem:
        raise CommandError(problem)
    with locked_out_dir(out):
        return _run(args, out)


def _run(args: argparse.Namespace, out: Path) -> int:
    ckpt, png = out / "moons.json", out / "moons.png"
    for target in (png, ckpt):  # before the work, not after it
        problem = output_file_problem(target)
        if problem:
            raise CommandError(f"cannot write {target}: {problem}")
    if not args.force and not _same_run(ckpt, args):
        raise CommandError(
            f"{ckpt} exists and holds another run (not --steps {args.steps} --seed {args.seed}): "
            "--force overwrites it, or choose another --out"
        )

    with ProgressBar(args.steps) as bar:
        result = train(args.steps, args.seed, bar)

    try:
        if would_load("matplotlib"):
            try:
                plot_decision_boundary(result.model, result.X, result.labels, png)
            except ImportError:  # no matplotlib: the standard-library picture
                plot_decision_boundary_basic(result.model, result.X, result.labels, png)
                print(PLOT_HINT, file=sys.stderr)
        else:  # too little memory to load matplotlib: the same picture without it
            plot_decision_boundary_basic(result.model, result.X, result.labels, png)
    except OSError as e:
        raise CommandError(f"cannot write {png} ({e.strerror or e})") from None
    print(f"plot: {png}")

    metadata = {
        "command": "moons",
        "steps": args.steps,
        "seed": args.seed,
        "loss": result.loss,
        "accuracy": result.accuracy,
    }
    try:
        checkpoint.save(result.model, ckpt, metadata=metadata)
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot write {ckpt} ({getattr(e, 'strerror', None) or e})") from None
    print(f"checkpoint: {ckpt}")
    print(f"accuracy: {100 * result.accuracy:.1f}%")
    return 0
