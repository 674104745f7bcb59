"""The GPT on batches: ``gpt-step`` and ``gpt-sizes``.

``gpt-step``: the model of :mod:`chainrule.bench.gpt` — the same weights,
loaded from :func:`~chainrule.bench.gpt.initial_weights` — on the same batch
of names, all positions at once (names padded to the longest, padding
ignored by the loss), the same mean cross-entropy over every position and
the same Adam. Engines:

* ``chainrule-compat``, ``chainrule`` — the scalar engine, one name and one
  token at a time (:mod:`chainrule.bench.gpt`);
* ``tensor-float64``, ``tensor-float32`` — ``chainrule.tensor.nn.GPT`` and
  ``chainrule.optim.Adam``;
* ``torch-float64``, ``torch-float32`` — the same architecture as an
  ordinary ``torch.nn.Module`` (:class:`chainrule.interop.torch_nn.GPT`) and
  ``torch.optim.Adam``, PyTorch on the CPU with its default threads.

``gpt-sizes``: one Adam step of the Tensor GPT against the same model in
PyTorch at the sizes people train on a CPU, from microgpt's up to
embeddings of 256 and a context of 128: same weights, batch and dtype, and
2 threads on both sides (``chainrule bench --threads N`` changes it): BLAS
through threadpoolctl, PyTorch through ``torch.set_num_threads``. The batch is ``batch`` windows of
``block + 1`` tokens cut from the shipped names, joined into one text.
Each chainrule engine's ratio is its time over PyTorch's at the same size
and dtype.

The Tensor engines call :func:`chainrule.tensor.memory.keep_freed_memory`,
as ``chainrule gpt`` does; it is process-wide, so the PyTorch engines,
which run after them, run under the same malloc settings. NumPy, torch and
threadpoolctl are imported when an engine is built, so the bench runs
without them.
"""

from __future__ import annotations

from typing import Any

from ..transformer import GPTConfig
from . import gpt
from .harness import Engine, GPTSize, Sizes, Workload, built


def _names_map(n_layer: int) -> dict[str, str]:
    """The scalar workload's weight names -> the Tensor GPT's."""
    out = {"wte": "wte.weight", "wpe": "wpe.weight", "lm_head": "lm_head.weight"}
    for i in range(n_layer):
        for w in ("q", "k", "v", "o"):
            out[f"layer{i}.attn_w{w}"] = f"blocks.{i}.attn.w{w}.weight"
        for fc in ("fc1", "fc2"):
            out[f"layer{i}.mlp_{fc}"] = f"blocks.{i}.mlp.{fc}.weight"
    return out


class Problem:
    """A model size, its initial weights (float64, under the Tensor GPT's
    names) and a batch ``(x, y)``: what both engines of a pair start from."""

    def __init__(self, config: GPTConfig, weights: dict[str, Any], x: Any, y: Any) -> None:
        self.config, self.weights, self.x, self.y = config, weights, x, y


def names_problem(sizes: Sizes) -> Problem:
    """``gpt-step``'s: microgpt's model, the scalar workload's weights and
    the padded batch of its names."""
    import numpy as np

    from ..tensor import charlm

    config = GPTConfig()
    vocab = charlm.Vocabulary("abcdefghijklmnopqrstuvwxyz")  # ids as gpt.encode's
    assert vocab.bos == gpt.BOS
    seqs = charlm.encode_all(gpt.batch_names(sizes.gpt_batch), vocab, config.block_size)
    x, y = charlm.batch(seqs, pad=vocab.bos)
    names = _names_map(config.n_layer)
    weights = {names[k]: np.array(v) for k, v in gpt.initial_weights(config).items()}
    return Problem(config, weights, x, y)


def sweep_problem(size: GPTSize, cap: int | None) -> Problem:
    """``gpt-sizes``' at one size: weights drawn as ``chainrule.tensor.nn.GPT``
    draws them (seeded), windows of the names as one text."""
    import numpy as np

    from ..tensor.nn import GPT

    n_embd, n_head, n_layer, block, batch = size
    if cap is not None:
        block, batch = min(block, cap), min(batch, cap)
    config = GPTConfig(block_size=block, n_embd=n_embd, n_head=n_head, n_layer=n_layer)
    model = GPT(config, rng=np.random.default_rng(0))
    weights = {name: p.data for name, p in model.named_parameters()}
    text = np.array([t for name in gpt.batch_names(1000) for t in gpt.encode(name)[1:]])
    starts = np.linspace(0, text.size - block - 2, batch).astype(np.intp)
    windows = np.stack([text[s : s + block + 1] for s in starts])
    return Problem(config, weights, windows[:, :-1], windows[:, 1:])


def limit_threads(n: int) -> None:
    """BLAS (NumPy's, and any other loaded) to ``n`` threads for the rest of
    the process, through threadpoolctl, and the Tensor engine's own thread
    pool (:func:`chainrule.set_num_threads`) to as many."""
    import numpy  # noqa: F401 - loaded first: threadpoolctl limits only loaded BLAS libraries
    from threadpoolctl import threadpool_limits

    from ..threads import set_num_threads

    threadpool_limits(limits=n, user_api="blas")
    set_num_threads(n)


class AdamStep:
    """Forward, backward, Adam and ``zero_grad`` of a model that returns
    ``(logits, loss)``: the training loop's body, for either engine."""

    def __init__(self, model: Any, optimizer: Any, x: Any, y: Any) -> None:
        self.model, self.optimizer, self.x, self.y = model, optimizer, x, y

    def __call__(self) -> float:
        _, loss = self.model(self.x, self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.item())


def tensor_step(problem: Problem, dtype: str) -> AdamStep:
    """``chainrule.tensor.nn.GPT`` with ``chainrule.optim.Adam``."""
    import numpy as np

    from .. import optim
    from ..tensor.memory import keep_freed_memory
    from ..tensor.nn import GPT

    keep_freed_memory()
    model = GPT(problem.config, dtype=dtype, rng=np.random.default_rng(0))
    model.load_state_dict(problem.weights)
    adam = optim.Adam(model.parameters(), lr=gpt.LEARNING_RATE, betas=gpt.BETAS, eps=gpt.EPS)
    return AdamStep(model, adam, problem.x, problem.y)


def torch_step(problem: Problem, dtype: str) -> AdamStep:
    """The same model as an ordinary ``torch.nn.Module``, ``torch.optim.Adam``."""
    import torch

    from ..interop.torch_nn import GPT

    model = GPT(problem.config).to(getattr(torch, dtype))
    model.load_state_dict({k: torch.tensor(v) for k, v in problem.weights.items()})
    adam = torch.optim.Adam(model.parameters(), lr=gpt.LEARNING_RATE, betas=gpt.BETAS, eps=gpt.EPS)
    return AdamStep(model, adam, torch.tensor(problem.x), torch.tensor(problem.y))


def _names(step: Any, dtype: str) -> Any:
    return built(lambda sizes: step(names_problem(sizes), dtype))


GPT_STEP = Workload(
    "gpt-step",
    "one Adam step of a microgpt-size character GPT (27 tokens, 16 dims, 4 heads, "
    "1 layer, block 16) on a batch of 32 names: the scalar engine as micrograd-style "
    "user code and with its fused ops, the Tensor engine, PyTorch",
    baseline="chainrule",
    engines=(
        Engine("chainrule-compat", built(gpt.steps(gpt.CompatOps, gpt.compat_adam, batch=True))),
        Engine("chainrule", built(gpt.steps(gpt.FusedOps, gpt.chainrule_adam, batch=True))),
        Engine("tensor-float64", _names(tensor_step, "float64"), requires=("numpy",)),
        Engine("tensor-float32", _names(tensor_step, "float32"), requires=("numpy",)),
        Engine("torch-float64", _names(torch_step, "float64"), requires=("numpy", "torch")),
        Engine("torch-float32", _names(torch_step, "float32"), requires=("numpy", "torch")),
    ),
)


def size_label(size: GPTSize) -> str:
    """``"128/4/4/64/32"``: embedding/heads/layers/block/batch."""
    return "/".join(str(n) for n in size)


def _sweep(index: int, dtype: str, torch: bool) -> Any:
    def make(sizes: Sizes) -> AdamStep:
        limit_threads(sizes.gpt_sweep_threads)
        problem = sweep_problem(sizes.gpt_sweep[index], sizes.gpt_sweep_cap)
        if torch:
            import torch as torch_module

            torch_module.set_num_threads(sizes.gpt_sweep_threads)
            return torch_step(problem, dtype)
        return tensor_step(problem, dtype)

    return built(make)


def _sweep_engines(sweep: tuple[GPTSize, ...]) -> tuple[Engine, ...]:
    engines = []
    for i, size in enumerate(sweep):
        for dtype in ("float32", "float64"):
            ours, theirs = f"{size_label(size)} tensor-{dtype}", f"{size_label(size)} torch-{dtype}"
            needs = ("numpy", "threadpoolctl")
            engines.append(
                Engine(ours, _sweep(i, dtype, torch=False), requires=needs, versus=theirs)
            )
            engines.append(Engine(theirs, _sweep(i, dtype, torch=True), (*needs, "torch")))
    return tuple(engines)


GPT_SIZES = Workload(
    "gpt-sizes",
    "one Adam step of the Tensor GPT against the same model in PyTorch, per size "
    "(embedding/heads/layers/block/batch) and dtype, 2 threads each (--threads): the time ratio",
    baseline=f"{size_label(Sizes().gpt_sweep[0])} torch-float32",
    engines=_sweep_engines(Sizes().gpt_sweep),
    interleave=True,
)
