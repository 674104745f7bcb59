"""grad, value_and_grad, hessian, vjp, jvp and hvp on Tensors, against
torch.func and torch.autograd.functional in float64; and what PyTorch users
build from them: a WGAN-GP gradient penalty and a MAML step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import chainrule.tensor as ct
from chainrule import Tensor, Value, grad, gradients, hessian, hvp, jvp, value_and_grad, vjp
from tensor_oracle import assert_close

RTOL = 1e-10
ATOL = 1e-12

# A small MLP 3-4-2 (tanh) with its parameters in one flat vector, the way
# torch.func.hessian takes them.
SHAPES = [(4, 3), (4,), (2, 4), (2,)]
SIZES = [int(np.prod(s)) for s in SHAPES]


def _unflatten(flat: Any) -> list[Any]:
    out, start = [], 0
    for shape, n in zip(SHAPES, SIZES):
        out.append(flat[start : start + n].reshape(shape))
        start += n
    return out


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 3))
    y = rng.standard_normal((5, 2))
    params = rng.standard_normal(sum(SIZES)) * 0.7
    return x, y, params


def _mlp_loss(flat: Any, x: Any, y: Any, lin: Any) -> Any:
    w1, b1, w2, b2 = _unflatten(flat)
    h = lin(x, w1, b1).tanh()
    err = lin(h, w2, b2) - y
    return (err * err).mean()


def test_hessian_of_an_mlp_loss_matches_torch_func_hessian(torch: Any) -> None:
    x, y, params = _data()
    ours = hessian(lambda p: _mlp_loss(p, x, y, ct.linear))(params)
    assert isinstance(ours, np.ndarray) and ours.shape == (sum(SIZES), sum(SIZES))
    tx, ty = torch.tensor(x), torch.tensor(y)
    theirs = torch.func.hessian(lambda p: _mlp_loss(p, tx, ty, torch.nn.functional.linear))(
        torch.tensor(params)
    )
    assert_close(ours, theirs.numpy(), "hessian", RTOL, ATOL)
    assert_close(ours, ours.T, "symmetric", 1e-12, 1e-14)


def test_hessian_blocks_for_several_tensors(torch: Any) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(3)
    blocks = hessian(lambda a, b: ((a * b).tanh()).sum(), argnums=(0, 1))(a, b)
    theirs = torch.func.hessian(lambda a, b: (a * b).tanh().sum(), argnums=(0, 1))(
        torch.tensor(a), torch.tensor(b)
    )
    for i in range(2):
        for j in range(2):
            assert_close(blocks[i][j], theirs[i][j].numpy(), f"block {i}{j}", RTOL, ATOL)


def test_hvp_matches_torch_autograd_functional_hvp(torch: Any) -> None:
    x, y, params = _data(1)
    v = np.random.default_rng(2).standard_normal(params.shape)
    value, product = hvp(lambda p: _mlp_loss(p, x, y, ct.linear), params, v)
    tx, ty = torch.tensor(x), torch.tensor(y)
    t_value, t_product = torch.autograd.functional.hvp(
        lambda p: _mlp_loss(p, tx, ty, torch.nn.functional.linear),
        torch.tensor(params),
        torch.tensor(v),
    )
    assert_close(value, t_value.numpy(), "value")
    assert_close(product, t_product.numpy(), "hvp", RTOL, ATOL)
    full = hessian(lambda p: _mlp_loss(p, x, y, ct.linear))(params)
    assert_close(product, full @ v, "hvp = H v", 1e-10, 1e-12)


def test_vjp_and_jvp_match_torch_func(torch: Any) -> None:
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    u = rng.standard_normal((3, 2))
    ta, tb = torch.tensor(a), torch.tensor(b)

    def f(a: Any, b: Any) -> Any:
        return (a @ b).tanh() * 2.0

    out, pull = vjp(f, a, b)
    t_out, t_pull = torch.func.vjp(f, ta, tb)
    assert_close(out, t_out.numpy(), "vjp value")
    for ours, theirs in zip(pull(u), t_pull(torch.tensor(u))):
        assert_close(ours, theirs.numpy(), "vjp", RTOL, ATOL)
    da, db = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    out, tangent = jvp(f, (a, b), (da, db))
    t_out, t_tangent = torch.func.jvp(f, (ta, tb), (torch.tensor(da), torch.tensor(db)))
    assert_close(out, t_out.numpy(), "jvp value")
    assert_close(tangent, t_tangent.numpy(), "jvp", RTOL, ATOL)


def test_jvp_and_hvp_on_scalars() -> None:
    assert jvp(lambda x, y: x * y + x.exp(), (0.0, 3.0), (1.0, 2.0)) == (1.0, 3.0 + 1.0 + 0.0)
    value, (hx, hy) = hvp(lambda x, y: x * x * y, (3.0, 2.0), (1.0, 1.0))
    assert (value, hx, hy) == (18.0, 4.0 + 6.0, 6.0)


def test_wgan_gp_step_gives_torchs_parameter_gradients(torch: Any) -> None:
    # The critic's loss with WGAN-GP's penalty: the gradient of the critic at
    # points between real and fake samples should have norm 1.
    rng = np.random.default_rng(5)
    real, fake = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    mix = rng.uniform(size=(6, 1))
    weights = [rng.standard_normal(s) * 0.5 for s in [(8, 3), (8,), (1, 8), (1,)]]

    def critic(x: Any, p: list[Any], lin: Any) -> Any:
        return lin(lin(x, p[0], p[1]).tanh(), p[2], p[3])

    params = [Tensor(w) for w in weights]
    x_hat = Tensor(mix * real + (1.0 - mix) * fake)
    (g,) = gradients(critic(x_hat, params, ct.linear).sum(), [x_hat], create_graph=True)
    norm = ((g * g).sum(axis=1) + 1e-12).sqrt()
    penalty = ((norm - 1.0) ** 2).mean()
    loss = (
        critic(fake, params, ct.linear).mean()
        - critic(real, params, ct.linear).mean()
        + 10.0 * penalty
    )
    loss.backward()

    tparams = [torch.tensor(w, requires_grad=True) for w in weights]
    t_hat = torch.tensor(mix * real + (1.0 - mix) * fake, requires_grad=True)
    lin = torch.nn.functional.linear
    (tg,) = torch.autograd.grad(critic(t_hat, tparams, lin).sum(), t_hat, create_graph=True)
    t_norm = ((tg * tg).sum(dim=1) + 1e-12).sqrt()
    t_loss = (
        critic(torch.tensor(fake), tparams, lin).mean()
        - critic(torch.tensor(real), tparams, lin).mean()
        + 10.0 * ((t_norm - 1.0) ** 2).mean()
    )
    t_loss.backward()
    assert_close(loss.data, t_loss.detach().numpy(), "loss")
    for i, (p, tp) in enumerate(zip(params, tparams)):
        assert_close(p.grad, tp.grad.numpy(), f"parameter {i}", RTOL, ATOL)


def test_maml_step_through_an_inner_sgd_step_gives_torchs_outer_gradient(torch: Any) -> None:
    # MAML: adapt with one SGD step on the support set, score the adapted
    # weights on the query set, differentiate through the adaptation.
    rng = np.random.default_rng(6)
    xs, ys = rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    xq, yq = rng.standard_normal((5, 2)), rng.standard_normal((5, 1))
    weights = [rng.standard_normal(s) * 0.5 for s in [(6, 2), (6,), (1, 6), (1,)]]
    lr = 0.3

    def loss_of(p: list[Any], x: Any, y: Any, lin: Any) -> Any:
        err = lin(lin(x, p[0], p[1]).tanh(), p[2], p[3]) - y
        return (err * err).mean()

    def outer(*p: Any) -> Any:
        inner_grads = grad(lambda *q: loss_of(list(q), xs, ys, ct.linear), argnums=(0, 1, 2, 3))(*p)
        adapted = [w - lr * g for w, g in zip(p, inner_grads)]
        return loss_of(adapted, xq, yq, ct.linear)

    value, ours = value_and_grad(outer, argnums=(0, 1, 2, 3))(*weights)
    assert all(isinstance(g, np.ndarray) for g in ours)

    tp = [torch.tensor(w, requires_grad=True) for w in weights]
    lin = torch.nn.functional.linear
    t_inner = loss_of(tp, torch.tensor(xs), torch.tensor(ys), lin)
    tg = torch.autograd.grad(t_inner, tp, create_graph=True)
    adapted = [w - lr * g for w, g in zip(tp, tg)]
    t_outer = loss_of(adapted, torch.tensor(xq), torch.tensor(yq), lin)
    t_outer.backward()
    assert_close(value, t_outer.item(), "outer loss")
    for i, (g, t) in enumerate(zip(ours, tp)):
        assert_close(g, t.grad.numpy(), f"outer gradient {i}", RTOL, ATOL)


def test_tensors_give_tensors_arrays_give_arrays_and_grad_is_untouched() -> None:
    x = Tensor([1.0, 2.0, 3.0])
    g = grad(lambda t: (t * t * t).sum())(x)
    assert isinstance(g, Tensor) and g._prev  # differentiable again
    np.testing.assert_array_equal(g.data, [3.0, 12.0, 27.0])
    assert x.grad is None
    a = grad(lambda t: (t * t * t).sum())(np.array([1.0, 2.0, 3.0]))
    assert type(a) is np.ndarray
    np.testing.assert_array_equal(a, [3.0, 12.0, 27.0])
    np.testing.assert_array_equal(grad(lambda t: (t * t).sum())(np.array([1, 2])), [2.0, 4.0])


def test_grad_of_grad_on_tensors_and_no_perturbation_confusion() -> None:
    f = lambda t: (t * t * t).sum()  # noqa: E731
    second = grad(lambda t: grad(f)(t).sum())(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(second, [6.0, 12.0])
    # d/dx of (d/dy (x * y) at y = x) = d/dx x = 1, not 2
    once = grad(lambda x: grad(lambda y: (x * y).sum())(x).sum())(np.array([3.0]))
    np.testing.assert_array_equal(once, [1.0])


def test_pytrees_of_tensors_and_mixed_numbers() -> None:
    params = {"w": np.array([1.0, -2.0]), "b": 0.5}
    value, g = value_and_grad(lambda p, x: ((p["w"] * x).sum() + p["b"]) ** 2)(params, 3.0)
    assert value == (3.0 - 6.0 + 0.5) ** 2
    assert set(g) == {"w", "b"} and type(g["b"]) is float
    np.testing.assert_allclose(g["w"], 2 * (-2.5) * np.array([3.0, 3.0]))
    assert g["b"] == 2 * (-2.5)
    ga, gb = grad(lambda ws: (ws[0] * ws[1]).sum())([np.array([2.0]), np.array([5.0])])
    assert (ga.tolist(), gb.tolist()) == ([5.0], [2.0])


def test_bad_calls_say_what_is_wrong() -> None:
    with pytest.raises(TypeError, match=r"grad: the function must return a scalar.*shape \(2,\)"):
        grad(lambda t: t * 2.0)(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="Values and Tensors cannot be differentiated together"):
        grad(lambda v, t: t, argnums=(0, 1))(Value(1.0), Tensor([1.0]))
    with pytest.raises(TypeError, match=r"grad: argument 0 must be a number.*str"):
        grad(lambda t: t)("x")
    with pytest.raises(ValueError, match=r"hvp: tangent of shape \(3,\) for a primal of shape"):
        hvp(lambda t: (t * t).sum(), np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match=r"jvp: 1 tangent\(s\) for 2 primal\(s\)"):
        jvp(lambda a, b: a * b, (1.0, 2.0), (1.0,))
