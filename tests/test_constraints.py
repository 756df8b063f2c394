"""Step constraints: invariants over optimizers (hypothesis), closed forms, controls and bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from opsft.constraints import Extrapolation, constrain
from opsft.directions import Direction
from opsft.fused_adamw import kernel, pack_codes
from opsft.masks import flipped, random_locations, random_signs

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.1),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
}


@pytest.fixture(scope="session")
def fused_kernel(shared_cache):
    """The fused constrained AdamW kernel, built once per session into the session's shared cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPSFT_CACHE", str(shared_cache))
        return kernel()


def make_model(shapes: tuple[int, int, int], seed: int, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    a, b, c = shapes
    return torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Tanh(), torch.nn.Linear(b, c)).to(dtype)


def random_direction(model: torch.nn.Module, seed: int) -> Direction:
    g = torch.Generator().manual_seed(seed)
    return Direction({n: torch.randint(-1, 2, p.shape, generator=g, dtype=torch.int8)
                      for n, p in model.named_parameters()})


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train(model, optimizer, steps: int, seed: int, clip: float | None = None, accumulate: int = 1) -> None:
    """The standard loop: zero_grad, backward (x accumulate), clip, step."""
    g = torch.Generator().manual_seed(seed + 1)
    first, last = model[0], model[2]
    dtype = first.weight.dtype
    for _ in range(steps):
        optimizer.zero_grad()
        for _ in range(accumulate):
            x = torch.randn(8, first.in_features, generator=g).to(dtype)
            y = torch.randn(8, last.out_features, generator=g).to(dtype)
            (((model(x) - y) ** 2).mean() / accumulate).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()


def step_sign(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return (new > old).to(torch.int8) - (new < old).to(torch.int8)


def assert_invariant(model, theta0, signs) -> None:
    """sign(theta_t - theta_0) in {0, v}; weights with v = 0 bit-identical to theta_0."""
    for n, p in model.named_parameters():
        v, s = signs[n], step_sign(p.detach(), theta0[n])
        assert bool(((s == 0) | (s == v)).all()), f"{n} moved against v"
        frozen = v == 0
        assert torch.equal(p.detach()[frozen].view(torch.int16 if p.dtype == torch.bfloat16 else torch.int32),
                           theta0[n][frozen].view(torch.int16 if p.dtype == torch.bfloat16 else torch.int32)), n


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 5)),
    seed=st.integers(0, 2**16),
    opt=st.sampled_from(sorted(OPTIMIZERS)),
    mode=st.sampled_from(["sign", "sign-update", "flipped", "random-sign"]),
    clip=st.sampled_from([None, 0.05]),
    accumulate=st.sampled_from([1, 2]),
    bf16=st.booleans(),
)
def test_sign_invariant_holds_for_every_optimizer(shapes, seed, opt, mode, clip, accumulate, bf16):
    model = make_model(shapes, seed, torch.bfloat16 if bf16 else torch.float32)
    direction = random_direction(model, seed)
    optimizer = OPTIMIZERS[opt](model.parameters())
    handle = constrain(optimizer, model, direction, mode=mode, seed=seed)
    theta0 = snapshot(model)
    train(model, optimizer, steps=4, seed=seed, clip=clip, accumulate=accumulate)
    handle.remove()
    applied = {"sign": direction.signs, "sign-update": direction.signs, "flipped": flipped(direction.signs),
               "random-sign": random_signs(direction.signs, seed)}[mode]
    assert_invariant(model, theta0, applied)


@settings(max_examples=15, deadline=None)
@given(shapes=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 5)), seed=st.integers(0, 2**16),
       opt=st.sampled_from(sorted(OPTIMIZERS)), random=st.booleans())
def test_location_masks_freeze_exactly_the_weights_outside(shapes, seed, opt, random):
    model = make_model(shapes, seed)
    direction = random_direction(model, seed)
    optimizer = OPTIMIZERS[opt](model.parameters())
    constrain(optimizer, model, direction, mode="random-location" if random else "location", seed=seed)
    theta0 = snapshot(model)
    train(model, optimizer, steps=3, seed=seed)
    allowed = random_locations(direction.signs, seed) if random else {n: v != 0 for n, v in direction.signs.items()}
    for n, p in model.named_parameters():
        assert torch.equal(p.detach()[~allowed[n]], theta0[n][~allowed[n]]), n


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_mode_none_is_bit_identical_to_unconstrained(opt):
    models = [make_model((5, 6, 3), 0) for _ in range(2)]
    opts = [OPTIMIZERS[opt](m.parameters()) for m in models]
    constrain(opts[1], models[1], None, mode="none")
    for m, o in zip(models, opts, strict=True):
        train(m, o, steps=5, seed=3, clip=1.0)
    for (n, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters(), strict=True):
        assert torch.equal(a, b), n


def test_remove_restores_plain_steps():
    models = [make_model((4, 5, 2), 1) for _ in range(2)]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
    constrain(opts[1], models[1], random_direction(models[1], 0)).remove()
    for m, o in zip(models, opts, strict=True):
        train(m, o, steps=3, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True))


def linear_with_known_gradient(seed: int):
    """A Linear layer, loss = <C, W> + <c, b>, so the gradient is exactly (C, c)."""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(6, 5)
    with torch.no_grad():  # |theta| in [0.1, 1]: the sign of every step below is decided, not a rounding tie
        for p in layer.parameters():
            p.copy_(torch.sign(torch.randn(p.shape)) * (0.1 + 0.9 * torch.rand(p.shape)))
    coef = {n: torch.randn(p.shape) for n, p in layer.named_parameters()}
    model = torch.nn.Sequential(layer)
    names = dict(model.named_parameters())

    def loss():
        return sum((names[n] * coef[n.split(".", 1)[1]]).sum() for n in names)

    return model, {n: coef[n.split(".", 1)[1]] for n in names}, loss


def test_sgd_step_matches_float64_closed_form():
    model, grad, loss = linear_with_known_gradient(0)
    direction = random_direction(model, 1)
    theta0 = {n: p.detach().double() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    constrain(opt, model, direction)
    loss().backward()
    opt.step()
    for n, p in model.named_parameters():
        g, v = grad[n].double(), direction.signs[n].double()
        kept = g * (-g * v > 0)  # OPSFT: keep g_i where the descent -g_i agrees with v_i
        assert torch.allclose(p.detach().double(), theta0[n] - 0.1 * kept, rtol=0, atol=1e-7), n
        assert torch.equal(p.grad.double(), kept), n  # the optimizer saw the masked gradient


@pytest.mark.parametrize("implementation,use_kernel", [({}, False), ({"foreach": True}, False), ({"fused": True}, False),
                                                   ({}, True)], ids=["default", "foreach", "fused", "opsft-kernel"])
def test_adamw_weight_decay_is_undone_against_v(implementation, use_kernel, fused_kernel):
    """First AdamW step from zero moments: theta_1 = theta_0 (1 - lr wd) - lr g / (|g| + eps); kept where
    sign(theta_1 - theta_0) = v != 0, else theta_0. The hooks wrap each of torch's AdamW implementations;
    ``opsft-kernel`` is the fused constrained step (constrain(..., fused=True))."""
    model, grad, loss = linear_with_known_gradient(2)
    direction = random_direction(model, 3)
    theta0 = {n: p.detach().double() for n, p in model.named_parameters()}
    lr, wd, eps = 0.1, 0.1, 1e-8
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd, eps=eps, **implementation)
    constrain(opt, model, direction, fused=use_kernel)
    loss().backward()
    opt.step()
    for n, p in model.named_parameters():
        g, v, t0 = grad[n].double(), direction.signs[n].double(), theta0[n]
        g = g * (-g * v > 0)
        t1 = t0 * (1 - lr * wd) - lr * g / (g.abs() + eps)
        expected = torch.where(torch.sign(t1 - t0) * v > 0, t1, t0)
        assert torch.allclose(p.detach().double(), expected, rtol=0, atol=1e-6), n
        decay_only = (g == 0) & (v != 0)  # masked gradient: only the decay moves, kept iff it agrees with v
        assert bool((p.detach()[decay_only & (torch.sign(-t0) != v)] == t0.float()[decay_only & (torch.sign(-t0) != v)]).all())


def test_sign_update_keeps_the_gradient_and_reset_zeroes_moments_where_undone():
    model, grad, loss = linear_with_known_gradient(4)
    direction = random_direction(model, 5)
    theta0 = snapshot(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    constrain(opt, model, direction, mode="sign-update", reset_moments=True)
    loss().backward()
    opt.step()
    for n, p in model.named_parameters():
        assert torch.equal(p.grad, grad[n]), "sign-update must not mask the gradient"
        undone = torch.sign(-grad[n]).to(torch.int8) != direction.signs[n]  # Adam's first step is -lr sign(g)
        assert torch.equal(p.detach()[undone], theta0[n][undone])
        state = opt.state[p]
        assert bool((state["exp_avg"][undone] == 0).all()) and bool((state["exp_avg_sq"][undone] == 0).all())
        assert bool((state["exp_avg"][~undone] != 0).all())


def test_subspace_projects_gradient_onto_right_singular_subspace():
    model, grad, loss = linear_with_known_gradient(6)
    w = model[0].weight
    q, _ = torch.linalg.qr(torch.randn(w.shape[1], 3, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    constrain(opt, model, mode="subspace", bases={"0.weight": q.float()}, rank=2)
    loss().backward()
    opt.step()
    vk = q[:, :2]
    expected = grad["0.weight"].double() @ vk @ vk.T
    assert torch.allclose(w.grad.double(), expected, atol=1e-6)
    assert torch.equal(model[0].bias.grad, grad["0.bias"])  # 1-D parameters are not projected


def test_matched_random_sign_keeps_as_many_components_as_the_sign_mask():
    torch.manual_seed(0)
    layer = torch.nn.Linear(200, 100, bias=False)
    model = torch.nn.Sequential(layer)
    g = torch.randn(layer.weight.shape)
    support = torch.rand(g.shape) < 0.5
    agree = torch.rand(g.shape) < 0.8  # the real v agrees with the descent -g on 80% of its support
    v = (torch.where(agree, -torch.sign(g), torch.sign(g)) * support).to(torch.int8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    constrain(opt, model, {"0.weight": v}, mode="random-sign", match_kept_fraction=True, seed=1)
    layer.weight.grad = g.clone()
    opt.step()
    n_v = int((-g * v > 0).sum())
    assert abs(int(layer.weight.grad.count_nonzero()) - n_v) < 0.03 * n_v
    assert int(((-g * v > 0) & support).sum()) == n_v


def test_random_masks_are_seeded_and_keep_support_or_count():
    model = make_model((30, 20, 10), 0)
    signs = random_direction(model, 0).signs
    r1, r2 = random_signs(signs, 1), random_signs(signs, 2)
    for n, v in signs.items():
        assert torch.equal(r1[n] != 0, v != 0) and set(r1[n].unique().tolist()) <= {-1, 0, 1}
        assert torch.equal(r1[n], random_signs(signs, 1)[n])
    assert any(not torch.equal(r1[n], r2[n]) for n in signs)
    locs = random_locations(signs, 1)
    assert all(int(locs[n].sum()) == int(v.count_nonzero()) for n, v in signs.items())


def test_mismatched_direction_names_the_parameter_and_both_shapes():
    model = make_model((4, 5, 2), 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    signs = dict(random_direction(model, 0).signs)
    signs["0.weight"] = torch.zeros(3, 4, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"'0\.weight' has shape \[3, 4\] but the model parameter has shape \[5, 4\]"):
        constrain(opt, model, signs)
    del signs["0.weight"]
    with pytest.raises(ValueError, match=r"no entry for model parameter '0\.weight'"):
        constrain(opt, model, signs)
    with pytest.raises(ValueError, match="mode must be one of"):
        constrain(opt, model, signs, mode="opsft")
    with pytest.raises(ValueError, match="needs `bases`"):
        constrain(opt, model, mode="subspace")
    with pytest.raises(ValueError, match="needs a direction"):
        constrain(opt, model, mode="sign")


def test_extrapolation_keeps_improvements_and_rolls_back_otherwise():
    model = torch.nn.ModuleDict({"mlp": torch.nn.Linear(3, 3), "norm": torch.nn.LayerNorm(3)})
    base = snapshot(model)
    with torch.no_grad():
        model["mlp"].weight.add_(0.5)
        model["norm"].weight.add_(0.5)
    w1, n1 = model["mlp"].weight.detach().clone(), model["norm"].weight.detach().clone()
    scores = iter([0.0, 1.0, 1.0, 0.5])  # step 1: improves (kept); step 2: worse (rolled back)
    ext = Extrapolation(base, lambda m: next(scores), include=("mlp",))
    assert ext.on_step_end(3, model) is None
    assert ext.on_step_end(1, model) is True
    expected = w1 + 2.0 * (w1 - base["mlp.weight"])
    assert torch.allclose(model["mlp"].weight, expected) and torch.equal(model["norm"].weight, n1)
    assert ext.alpha == pytest.approx(2.0 / 3.0)
    assert ext.on_step_end(2, model) is False
    assert torch.equal(model["mlp"].weight, expected) and ext.alpha == pytest.approx(2.0 / 3.0)


@settings(max_examples=15, deadline=None)
@given(shapes=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 5)), seed=st.integers(0, 2**16),
       mode=st.sampled_from(["sign", "sign-update", "flipped", "random-sign", "location", "random-location"]),
       clip=st.sampled_from([None, 0.05]), accumulate=st.sampled_from([1, 2]))
def test_fused_kernel_keeps_every_mask_invariant(shapes, seed, mode, clip, accumulate, fused_kernel):
    """constrain(..., fused=True): sign(theta_t - theta_0) in {0, v} (sign-like masks); weights outside a
    location mask bit-identical to theta_0."""
    model = make_model(shapes, seed)
    direction = random_direction(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    handle = constrain(optimizer, model, direction, mode=mode, seed=seed, fused=True)
    theta0 = snapshot(model)
    train(model, optimizer, steps=4, seed=seed, clip=clip, accumulate=accumulate)
    handle.remove()
    if mode in ("location", "random-location"):
        allowed = random_locations(direction.signs, seed) if mode == "random-location" else \
            {n: v != 0 for n, v in direction.signs.items()}
        for n, p in model.named_parameters():
            assert torch.equal(p.detach()[~allowed[n]], theta0[n][~allowed[n]]), n
        return
    applied = {"sign": direction.signs, "sign-update": direction.signs, "flipped": flipped(direction.signs),
               "random-sign": random_signs(direction.signs, seed)}[mode]
    assert_invariant(model, theta0, applied)


@pytest.mark.parametrize("shapes", [(6, 9, 4), (40, 30, 5)], ids=["one-block", "blocks-and-tail"])
@pytest.mark.parametrize("mode", ["sign", "sign-update", "location"])
def test_fused_kernel_follows_the_hook_path_within_rounding(mode, shapes, fused_kernel):
    """30 AdamW steps (wd 0.1) with the hooks and with the fused kernel stay within float32 rounding of each
    other: the kernel folds AdamW's bias corrections, so they are not bit-identical. The 40 x 30 weight spans
    four blocks of packed codes and a partial fifth."""
    models = [make_model(shapes, 7) for _ in range(2)]
    direction = random_direction(models[0], 8)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1, fused=True) for m in models]
    for m, o, use_kernel in zip(models, opts, (False, True), strict=True):
        constrain(o, m, direction, mode=mode, fused=use_kernel)
        train(m, o, steps=30, seed=1, clip=1.0)
    for (n, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=n)
        assert not torch.equal(a, make_model(shapes, 7).state_dict()[n]), f"{n} never moved"


def test_packed_codes_follow_the_documented_layout():
    """Weight j of block b sits in byte 64 b + (j mod 64), bits 2 (j // 64): checked weight by weight against
    that formula for 300 weights (a full block and a padded one); -1 is stored as 3, free (2) as 2."""
    codes = torch.tensor([-1, 0, 1, 2] * 75, dtype=torch.int8).reshape(15, 20)
    packed = pack_codes(codes)
    assert packed.dtype == torch.uint8 and packed.numel() == 128
    for j, c in enumerate(codes.reshape(-1).tolist()):
        b, k = divmod(j, 256)
        byte = int(packed[64 * b + k % 64])
        assert (byte >> (2 * (k // 64))) & 3 == c & 3, j
    tail = packed[64:]  # the second block holds weights 256..299 in bits 0-1 of its first 44 bytes; the rest pads
    assert not tail[44:].any() and not (tail[:44] >> 2).any()


def test_fused_kernel_with_every_weight_free_is_adamw_in_float64(fused_kernel):
    """A location mask that frees every weight leaves plain AdamW: three steps against a float64 AdamW
    (decoupled decay, bias-corrected moments) computed from the same gradients."""
    model, grad, loss = linear_with_known_gradient(6)
    lr, wd, eps, (b1, b2) = 0.05, 0.1, 1e-8, (0.9, 0.98)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    constrain(opt, model, mode="location", masks={n: torch.ones_like(p, dtype=torch.bool)
                                                  for n, p in model.named_parameters()}, fused=True)
    ref = {n: p.detach().double() for n, p in model.named_parameters()}
    m = {n: torch.zeros_like(t) for n, t in ref.items()}
    s = {n: torch.zeros_like(t) for n, t in ref.items()}
    for t in range(1, 4):
        opt.zero_grad()
        loss().backward()
        for n, p in model.named_parameters():
            g = p.grad.double()
            m[n] = b1 * m[n] + (1 - b1) * g
            s[n] = b2 * s[n] + (1 - b2) * g * g
            ref[n] = ref[n] * (1 - lr * wd) - lr * (m[n] / (1 - b1**t)) / ((s[n] / (1 - b2**t)).sqrt() + eps)
        opt.step()
        for n, p in model.named_parameters():
            assert torch.allclose(p.detach().double(), ref[n], rtol=1e-6, atol=1e-7), (n, t)
    assert float(opt.state[next(model.parameters())]["step"]) == 3


def test_fused_kernel_names_what_it_cannot_run(fused_kernel):
    model = make_model((3, 4, 2), 0)
    direction = random_direction(model, 0)
    with pytest.raises(ValueError, match="torch.optim.AdamW, got SGD"):
        constrain(torch.optim.SGD(model.parameters(), lr=0.1), model, direction, fused=True)
    with pytest.raises(ValueError, match="amsgrad"):
        constrain(torch.optim.AdamW(model.parameters(), amsgrad=True), model, direction, fused=True)
    with pytest.raises(ValueError, match="not mode 'subspace'"):
        constrain(torch.optim.AdamW(model.parameters()), model, direction, mode="subspace", fused=True)
    with pytest.raises(ValueError, match="with reset_moments"):
        constrain(torch.optim.AdamW(model.parameters()), model, direction, reset_moments=True, fused=True)
    bf16 = make_model((3, 4, 2), 0, torch.bfloat16)
    with pytest.raises(ValueError, match=r"parameter '0.weight' is torch.bfloat16"):
        constrain(torch.optim.AdamW(bf16.parameters()), bf16, random_direction(bf16, 0), fused=True)


def test_fused_kernel_state_carries_on_under_torch_adamw(fused_kernel):
    """The kernel writes AdamW's own state (float32 step, both moments): removing the constraint hands the
    run back to torch's AdamW, and the optimizer's state_dict round-trips."""
    model = make_model((4, 5, 2), 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    handle = constrain(opt, model, random_direction(model, 1), fused=True)
    train(model, opt, steps=2, seed=0)
    handle.remove()
    train(model, opt, steps=1, seed=1)
    state = opt.state_dict()["state"][0]
    assert float(state["step"]) == 3 and state["exp_avg"].shape == (5, 4)
    opt.load_state_dict(opt.state_dict())


@pytest.mark.parametrize(("bad", "shown"), [(torch.tensor(2, dtype=torch.int64), "2"),
                                            (torch.tensor(0.3), "0.3"), (torch.tensor(float("nan")), "nan")])
@pytest.mark.parametrize("given", ["direction", "masks"])
def test_a_plain_mask_dict_with_a_value_outside_the_signs_is_named(bad, shown, given):
    model = make_model((4, 5, 2), 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    signs = {n: t.to(bad.dtype) for n, t in random_direction(model, 0).signs.items()}
    signs["2.bias"][1] = bad
    with pytest.raises(ValueError, match=rf"{given} entry '2\.bias' holds {shown}"):
        constrain(opt, model, **{given: signs})
    fine = {n: t.to(bad.dtype) for n, t in random_direction(model, 0).signs.items()}
    constrain(opt, model, **{given: fine}).remove()  # -1, 0 and 1 of any dtype pass
    location = {n: t != 0 for n, t in fine.items()}
    constrain(opt, model, masks=location, mode="location").remove()  # bool masks pass
