"""The gpt-step workload's model: the compat and fused variants agree with
each other and with the same architecture written in PyTorch float64."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chainrule import Value
from chainrule.bench import gpt

CONFIG = gpt.GPTConfig()


@pytest.fixture(scope="module")
def weights() -> dict[str, list[list[float]]]:
    return gpt.initial_weights(CONFIG)


def _loss_and_grads(ops: Any, weights: dict[str, Any], name: str) -> tuple[float, list[float]]:
    model = gpt.GPT(weights, ops)
    loss = model.loss(gpt.encode(name))
    loss.backward()
    return loss.data, [p.grad for p in model.parameters()]


def test_shapes_and_parameter_count(weights: dict[str, Any]) -> None:
    assert sum(len(rows) * len(rows[0]) for rows in weights.values()) == 4192
    assert gpt.encode("emma") == [26, 4, 12, 12, 0, 26]
    with pytest.raises(ValueError):
        gpt.encode("Emma!")


@pytest.mark.parametrize("name", ["emma", "olivia", "abcdefghijklmnopqrstuvwxyz"])
def test_compat_and_fused_give_the_same_loss_and_gradients(
    weights: dict[str, Any], name: str
) -> None:
    loss_c, grads_c = _loss_and_grads(gpt.CompatOps, weights, name)
    loss_f, grads_f = _loss_and_grads(gpt.FusedOps, weights, name)
    assert math.isclose(loss_c, loss_f, rel_tol=1e-12)
    assert len(grads_c) == len(grads_f) == 4192
    assert max(abs(a - b) for a, b in zip(grads_c, grads_f)) < 1e-9
    assert sum(g != 0.0 for g in grads_f) > 1000  # the gradient reaches the model


def test_user_code_builds_microgpts_graph_and_fused_ops_a_smaller_one(
    weights: dict[str, Any],
) -> None:
    """The same user code builds the same graph on chainrule as on
    microgpt's engine, node for node; the fused ops (called by name) a much
    smaller one."""
    from chainrule.bench import microgpt
    from chainrule.value.walk import topological_order

    literal = gpt.GPT(weights, gpt.CompatOps, value=microgpt.literal_value())
    nodes: set[Any] = set()
    stack = [literal.loss(gpt.encode("emma"))]
    while stack:
        v = stack.pop()
        if v._children and v not in nodes:
            nodes.add(v)
            stack.extend(v._children)
    sizes = [len(nodes)]
    for ops in (gpt.CompatOps, gpt.FusedOps):
        loss = gpt.GPT(weights, ops).loss(gpt.encode("emma"))
        sizes.append(len(topological_order(loss)[0]))
    assert sizes[1] == sizes[0]
    assert sizes[2] * 4 < sizes[1]


def _torch_loss(torch: Any, weights: dict[str, Any], tokens: list[int]) -> tuple[Any, dict]:
    """The same GPT on tensors, all positions at once with a causal mask."""
    W = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    n = min(CONFIG.block_size, len(tokens) - 1)
    H, hd = CONFIG.n_head, CONFIG.head_dim

    def rms(x: Any) -> Any:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5)

    x = rms(W["wte"][tokens[:n]] + W["wpe"][:n])
    residual = x
    h = rms(x)
    q, k, v = ((h @ W[f"layer0.attn_w{c}"].T).view(n, H, hd).transpose(0, 1) for c in "qkv")
    att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    att = torch.softmax(att.masked_fill(mask, -math.inf), -1)
    heads = (att @ v).transpose(0, 1).reshape(n, CONFIG.n_embd)
    x = heads @ W["layer0.attn_wo"].T + residual
    residual = x
    x = torch.relu(rms(x) @ W["layer0.mlp_fc1"].T) @ W["layer0.mlp_fc2"].T + residual
    logits = x @ W["lm_head"].T
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(tokens[1 : n + 1]))
    return loss, W


@pytest.mark.parametrize("ops", [gpt.CompatOps, gpt.FusedOps], ids=["compat", "fused"])
def test_gpt_matches_pytorch(torch: Any, weights: dict[str, Any], ops: Any) -> None:
    tokens = gpt.encode("emma")
    model = gpt.GPT(weights, ops)
    loss = model.loss(tokens)
    loss.backward()
    t_loss, W = _torch_loss(torch, weights, tokens)
    t_loss.backward()
    assert math.isclose(loss.data, t_loss.item(), rel_tol=1e-12)
    ours = [p.grad for p in model.parameters()]
    theirs = [g for name in weights for g in W[name].grad.flatten().tolist()]
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-12


def test_a_step_of_each_variant_updates_the_same_way() -> None:
    steps = [
        gpt.GPTStep(gpt.CompatOps, gpt.compat_adam, "emma"),
        gpt.GPTStep(gpt.FusedOps, gpt.chainrule_adam, "emma"),
    ]
    losses = [[s() for _ in range(3)] for s in steps]
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(*losses))
    assert losses[0][2] < losses[0][0]  # Adam is learning the name
    params = [[p.data for p in s.model.parameters()] for s in steps]
    assert max(abs(a - b) for a, b in zip(*params)) < 1e-12
    assert all(p.grad == 0.0 for s in steps for p in s.model.parameters())


def test_microgpt_style_code_gives_microgpts_numbers_bit_for_bit() -> None:
    """The same user code (binary ops, builtin sum, ``/``, ``** -0.5``,
    microgpt's Adam loop) on microgpt's literal engine and on chainrule's
    Value: every loss and every gradient equal, bit for bit, step after
    step (chainrule fuses each ``sum(w * x ...)`` into one node, and adds
    the gradient contributions in microgpt's order)."""
    from chainrule.bench import microgpt

    names = ["emma", "olivia", "ava", "isabella", "sophia", "mia"]
    steps = [
        gpt.GPTStep(gpt.CompatOps, gpt.compat_adam, names[0], value=value)
        for value in (microgpt.literal_value(), Value)
    ]
    for name in names:
        losses, grads = [], []
        for step in steps:
            step.batch = [gpt.encode(name)]
            loss = step.model.batch_loss(step.batch)
            loss.backward()
            losses.append(loss.data)
            grads.append([p.grad for p in step.model.parameters()])
            step.update()
        assert losses[0] == losses[1]
        assert grads[0] == grads[1]
