"""OPSFT and its controls as step hooks on any ``torch.optim.Optimizer`` (never a forked trainer).

``constrain(optimizer, model, direction, mode=...)`` registers a step pre-hook and a step post-hook and
returns a handle with ``.remove()``. Every mask mode is one mechanism: a per-weight interval [L, U] of
allowed updates, with L in {-inf, 0} and U in {0, +inf}:

- sign v = +1: [0, +inf);  v = -1: (-inf, 0];  v = 0: [0, 0]        (sign, flipped, random-sign, sign-update)
- location m = 1: (-inf, +inf);  m = 0: [0, 0]                        (location, random-location, Fisher)

Pre-hook (gradient mask, OPSFT: "keep only components whose update sign agrees with v"): the descent
direction -g must lie in [L, U], i.e. g <- clamp(g, -U, -L). For sign masks this is g_i <- g_i if
-g_i v_i > 0 else 0 (v = 0 zeroes g). Post-hook (restore, OPSFT: "the sign is enforced again after every
optimizer update"): theta <- clamp(theta_new, theta_old + L, theta_old + U), so a step that went against
the allowed direction (weight decay, momentum) is undone exactly, and weights with v = 0 stay
bit-identical to theta_0. Together: sign(theta_t - theta_0) is in {0, v} after any number of steps.

Where this sits in a training loop: gradient clipping runs before ``optimizer.step()`` and so before the
pre-hook; the mask acts on the clipped gradient (the clip norm counts masked components). With gradient
accumulation the mask acts once, on the accumulated gradient. Under DDP the gradient is already
all-reduced when ``step()`` runs, and the masks are built from v and a seed, so they are identical on
every rank.

Cost: four tensors per constrained parameter (the two gradient bounds, the two weight bounds of the
current step), precomputed or preallocated; each step runs one fused elementwise clamp or subtraction per
tensor and pass (no Python work per element): four extra passes over the weights' memory, 56 bytes per
fp32 weight. That is about twice what any hook pair must move (read and write g, keep a copy of theta_old,
read and write theta: ~29 bytes), and about as much as a whole fused AdamW step (28 bytes), so the hooks
cannot cost a few percent of the optimizer step; only of a training step whose forward and backward
dominate. The optimizer's own cost also changes: masked weights keep exact-zero second moments, and
torch's for-loop and foreach Adam/AdamW take their square root with MKL VML, whose special-value path
makes sqrt(0) over 10x slower than sqrt of a positive number (measured in results/perf.md).
``torch.optim.AdamW(..., fused=True)`` computes the square root without VML and has no such cost.
For AdamW, ``constrain(..., fused=True)`` takes the mask into AdamW's own pass instead (``opsft.fused_adamw``):
one read of v per weight, stored at 2 bits, on top of AdamW's traffic: 28.25 bytes against 28.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from opsft import masks as mask_lib
from opsft.checkpoints import WeightSource, iter_tensors
from opsft.directions import Direction
from opsft.distributed.layout import replicate_as, shard_as
from opsft.fused_adamw import FusedMaskConstraint

MODES: tuple[str, ...] = (
    "none", "sign", "location", "random-sign", "random-location", "flipped", "sign-update", "subspace",
    "subspace-update",
)
SUBSPACE_MODES = ("subspace", "subspace-update")
Signs = Mapping[str, torch.Tensor]


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel / DataParallel wrappers (parameter names without 'module.')."""
    while isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        model = model.module
    return model


def optimizer_params(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Name -> parameter for every parameter the optimizer updates; an error names any it holds that the
    model does not."""
    names = {id(p): n for n, p in unwrap_model(model).named_parameters()}
    out = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(f"the optimizer holds a parameter of shape {list(p.shape)} that is not in the model")
            out[names[id(p)]] = p
    return out


def check_layout(masks: Signs, model: torch.nn.Module, what: str = "direction") -> None:
    """Raise a ValueError naming the first parameter whose name or shape differs between ``masks`` and the
    model's named parameters, with both shapes."""
    params = dict(unwrap_model(model).named_parameters())
    for name in sorted(set(params) | set(masks)):
        if name not in masks:
            raise ValueError(f"{what} has no entry for model parameter {name!r} (shape {list(params[name].shape)})")
        if name not in params:
            raise ValueError(f"{what} entry {name!r} (shape {list(masks[name].shape)}) is not a model parameter")
        if tuple(masks[name].shape) != tuple(params[name].shape):
            raise ValueError(
                f"{what} entry {name!r} has shape {list(masks[name].shape)} but the model parameter has shape "
                f"{list(params[name].shape)}"
            )


def check_mask_values(masks: Signs, what: str) -> None:
    """Raise a ValueError naming ``what``, the first entry and its first value outside {-1, 0, 1}; bool masks
    pass. Run once, when a constraint is built: v == sign(v) holds exactly on {-1, 0, 1} (not on NaN)."""
    for name, t in masks.items():
        if t.dtype == torch.bool:
            continue
        bad = t.sign() != t
        if bad.any():
            raise ValueError(f"{what} entry {name!r} holds {t[bad][0].item()!r} ({t.dtype}); a mask holds "
                             "only -1, 0 and 1 (or is bool)")


def grad_bounds(mask: torch.Tensor, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(-U, -L): bounds on the gradient g such that -g lies in the allowed interval [L, U] of ``mask``
    (int8 signs: sign mask; bool: location mask)."""
    mask = mask.to(device)
    up, down = (mask > 0, mask < 0) if mask.dtype != torch.bool else (mask, mask)
    glo = torch.zeros_like(mask, dtype=dtype).masked_fill_(up, -math.inf)  # -U
    ghi = torch.zeros_like(mask, dtype=dtype).masked_fill_(down, math.inf)  # -L
    return glo, ghi


class MaskConstraint:
    """Gradient clamp before the step and weight clamp after it, from per-weight bounds (module docstring)."""

    def __init__(self, params: dict[str, torch.Tensor], masks: Signs, optimizer: torch.optim.Optimizer,
                 mask_grad: bool = True, reset_moments: bool = False) -> None:
        self.names = list(params)
        self.params = [params[n] for n in self.names]
        bounds = [grad_bounds(shard_as(masks[n], p), p.dtype, p.device) for n, p in zip(self.names, self.params, strict=True)]
        self.glo = [b[0] for b in bounds]
        self.ghi = [b[1] for b in bounds]
        self.lo = [torch.empty_like(p) for p in self.params]
        self.hi = [torch.empty_like(p) for p in self.params]
        self.optimizer = optimizer
        self.mask_grad = mask_grad
        self.reset_moments = reset_moments
        self._stepped: list[int] = []

    def _with_grads(self) -> list[int]:
        return [i for i, p in enumerate(self.params) if p.grad is not None]

    def _step_bounds(self, idx: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The gradient bounds of this step (static here; see MatchedRandomSign)."""
        return [self.glo[i] for i in idx], [self.ghi[i] for i in idx]

    def pre_step(self, *_: Any) -> None:
        """g <- clamp(g, -U, -L); remember the weight bounds theta_old + [L, U] = theta_old - [ghi, glo].

        One fused clamp / subtraction per tensor (into preallocated buffers) reads and writes less memory
        than pairs of ``torch._foreach_maximum_`` / ``_foreach_minimum_`` passes."""
        idx = self._with_grads()
        glo, ghi = self._step_bounds(idx)
        for i, lo_g, hi_g in zip(idx, glo, ghi, strict=True):
            p = self.params[i]
            if self.mask_grad:
                p.grad.clamp_(lo_g, hi_g)
            torch.sub(p.detach(), hi_g, out=self.lo[i])
            torch.sub(p.detach(), lo_g, out=self.hi[i])
        self._stepped = idx

    @torch.no_grad()
    def post_step(self, *_: Any) -> None:
        """theta <- clamp(theta_new, theta_old + L, theta_old + U); optionally zero the optimizer's moments
        (every state tensor shaped like the weight) where a step was undone."""
        for i in self._stepped:
            p, lo, hi = self.params[i], self.lo[i], self.hi[i]
            if self.reset_moments:
                undone = (p < lo) | (p > hi)
                for s in self.optimizer.state.get(p, {}).values():
                    if torch.is_tensor(s) and s.shape == p.shape:
                        s.masked_fill_(undone, 0)
            p.clamp_(lo, hi)


class MatchedRandomSign(MaskConstraint):
    """Random-sign control whose kept-gradient count matches the sign mask's, per tensor and step.

    With n_v = |{i : -g_i v_i > 0}| (kept by the real sign mask) and n_r = |{i : -g_i r_i > 0}| (kept by the
    random signs r): if n_r > n_v each kept component is dropped with probability 1 - n_v / n_r; if n_r < n_v
    each other component of the support is opened with probability (n_v - n_r) / (|S| - n_r), its allowed
    direction for this step being -sign(g). The expected kept count is then n_v.
    """

    def __init__(self, params: dict[str, torch.Tensor], signs: Signs, random: Signs, seed: int,
                 optimizer: torch.optim.Optimizer, reset_moments: bool = False) -> None:
        super().__init__(params, random, optimizer, mask_grad=True, reset_moments=reset_moments)
        self.signs = [signs[n].to(p.device) for n, p in params.items()]
        self.random = [random[n].to(p.device) for n, p in params.items()]
        self.generator = torch.Generator().manual_seed(seed)

    def _step_bounds(self, idx: list[int]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        glo, ghi = [], []
        for i in idx:
            g, v, r = self.params[i].grad, self.signs[i], self.random[i]
            descent = -torch.sign(g).to(torch.int8)
            kept_r, n_v = descent * r > 0, int((descent * v > 0).sum())
            n_r, support = int(kept_r.sum()), int(v.count_nonzero())
            u = torch.rand(g.shape, generator=self.generator).to(g.device)
            step_mask = r.clone()
            if n_r > n_v:
                step_mask[kept_r & (u >= n_v / n_r)] = 0
            elif n_r < n_v:
                opened = (v != 0) & ~kept_r & (u < (n_v - n_r) / (support - n_r))
                step_mask[opened] = descent[opened]
            lo_i, hi_i = grad_bounds(step_mask, g.dtype, g.device)
            glo.append(lo_i)
            ghi.append(hi_i)
        return glo, ghi


class SubspaceConstraint:
    """GEO section 4.2: for each 2-D weight with a basis V_K ([in, K]), G <- G V_K V_K^T before the step.

    AdamW's per-weight normalisation and its weight decay take the step itself out of the subspace even when
    the gradient lies in it. With ``project_update`` (mode ``subspace-update``) the step is projected too:
    theta <- theta_old + (theta_new - theta_old) V_K V_K^T after every step, so the whole update from the
    start stays in the subspace (one copy of each constrained weight is kept for the step)."""

    def __init__(self, params: dict[str, torch.Tensor], bases: Mapping[str, torch.Tensor], rank: int,
                 project_update: bool = False) -> None:
        self.pairs = []
        self.project_update = project_update
        self._before: list[torch.Tensor] = []
        for name, basis in bases.items():
            if name not in params:
                raise ValueError(f"subspace basis {name!r} is not a parameter the optimizer updates")
            p = params[name]
            if p.dim() != 2 or basis.dim() != 2 or basis.shape[0] != p.shape[1]:
                raise ValueError(
                    f"subspace basis {name!r} has shape {list(basis.shape)}; parameter shape {list(p.shape)} "
                    f"needs [{p.shape[-1]}, K]"
                )
            self.pairs.append((p, replicate_as(basis[:, :rank].to(device=p.device, dtype=p.dtype).contiguous(), p)))

    @torch.no_grad()
    def pre_step(self, *_: Any) -> None:
        """G <- (G V_K) V_K^T for every weight with a basis; keep theta_old when the step is projected too."""
        for p, basis in self.pairs:
            if p.grad is not None:
                p.grad.copy_((p.grad @ basis) @ basis.T)
        if self.project_update:
            self._before = [p.detach().clone() for p, _ in self.pairs]

    @torch.no_grad()
    def post_step(self, *_: Any) -> None:
        """With ``project_update``: theta <- theta_old + ((theta - theta_old) V_K) V_K^T; else nothing."""
        for (p, basis), old in zip(self.pairs, self._before, strict=False):
            p.copy_(old + ((p - old) @ basis) @ basis.T)
        self._before = []


class ConstraintHandle:
    """What ``constrain`` returns: ``.remove()`` detaches the hooks; ``.rule`` is the active constraint."""

    def __init__(self, rule: MaskConstraint | SubspaceConstraint | FusedMaskConstraint | None, hooks: list[RemovableHandle]) -> None:
        self.rule = rule
        self._hooks = hooks

    def remove(self) -> None:
        """Detach the step hooks and free the mask buffers; the optimizer behaves as before ``constrain``."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self.rule = None


def _signs_of(direction: Direction | Signs | None, mode: str) -> Signs:
    if direction is None:
        raise ValueError(f"mode {mode!r} needs a direction (a Direction or a name -> int8 signs mapping)")
    return direction.signs if isinstance(direction, Direction) else direction


def build_masks(mode: str, direction: Direction | Signs | None, masks: Signs | None, seed: int) -> Signs:
    """The mask a mode applies: v (sign, sign-update), -v (flipped), random signs on v's support
    (random-sign), v != 0 (location; or ``masks`` when given, e.g. a Fisher top-rho mask), or the same count
    of random positions per tensor (random-location)."""
    if masks is not None:
        return masks
    signs = _signs_of(direction, mode)
    builders: dict[str, Callable[[], Signs]] = {
        "sign": lambda: signs,
        "sign-update": lambda: signs,
        "flipped": lambda: mask_lib.flipped(signs),
        "random-sign": lambda: mask_lib.random_signs(signs, seed),
        "location": lambda: mask_lib.location(signs),
        "random-location": lambda: mask_lib.random_locations(signs, seed),
    }
    return builders[mode]()


def constrain(
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    direction: Direction | Signs | None = None,
    *,
    mode: str = "sign",
    masks: Signs | None = None,
    seed: int = 0,
    rank: int = 16,
    bases: Mapping[str, torch.Tensor] | None = None,
    reset_moments: bool = False,
    match_kept_fraction: bool = False,
    fused: bool = False,
) -> ConstraintHandle:
    """Constrain every ``optimizer.step()`` of ``model`` by ``mode`` (see MODES and the module docstring).

    ``direction``: v as a Direction or name -> int8 signs; ``masks`` overrides the mask a mode derives from
    v (int8 signs for sign-like modes, bool for location-like modes). ``seed`` draws the random controls.
    ``bases`` (name -> V_K, from ``opsft.masks.subspace_bases``) and ``rank`` K serve modes ``subspace``
    (the gradient projected) and ``subspace-update`` (the gradient and the optimizer's step projected).
    ``reset_moments`` zeroes the optimizer's moment tensors where a step was undone (the ratchet control).
    ``match_kept_fraction`` (random-sign only) matches the kept-gradient count to the real sign mask's.
    ``fused`` (torch AdamW, fp32 CPU weights, mask modes) does the masked step in one C++ pass per weight
    instead of AdamW plus the hooks (``opsft.fused_adamw``; same invariants, ~1 ulp from torch's AdamW).
    Mode ``none`` registers nothing, so training is bit-identical to an unconstrained run.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if match_kept_fraction and mode != "random-sign":
        raise ValueError(f"match_kept_fraction applies to mode 'random-sign' only, not {mode!r}")
    if fused and (mode in (*SUBSPACE_MODES, "none") or match_kept_fraction or reset_moments):
        raise ValueError(f"fused=True serves the fixed-mask modes; not mode {mode!r}"
                         f"{' with match_kept_fraction' if match_kept_fraction else ''}"
                         f"{' with reset_moments' if reset_moments else ''}")
    if mode == "none":
        return ConstraintHandle(None, [])
    params = optimizer_params(optimizer, model)
    rule: MaskConstraint | SubspaceConstraint | FusedMaskConstraint
    if mode in SUBSPACE_MODES:
        if bases is None:
            raise ValueError(f"mode {mode!r} needs `bases` (name -> V_K, see opsft.masks.subspace_bases)")
        rule = SubspaceConstraint(params, bases, rank, project_update=mode == "subspace-update")
    else:
        for what, given in (("direction", direction), ("masks", masks)):
            if given is not None and not isinstance(given, Direction):  # a Direction checked its own signs
                check_mask_values(given, what)
        mask = build_masks(mode, direction, masks, seed)
        check_layout(mask, model, what=f"{mode} mask")
        mask = {n: mask[n] for n in params}
        if fused:
            rule = FusedMaskConstraint(params, mask, optimizer, mask_grad=mode != "sign-update")
        elif match_kept_fraction:
            signs = _signs_of(direction, mode)
            rule = MatchedRandomSign(params, signs, mask, seed, optimizer, reset_moments)
        else:
            rule = MaskConstraint(params, mask, optimizer, mask_grad=mode != "sign-update",
                                  reset_moments=reset_moments)
    hooks = [optimizer.register_step_pre_hook(rule.pre_step), optimizer.register_step_post_hook(rule.post_step)]
    return ConstraintHandle(rule, hooks)


class Extrapolation:
    """EffOPD (X03) as a step-end callback: at power-of-two steps t, try
    theta <- theta + a (theta - theta_base) on the attention and MLP weights, starting with a = 2; keep it
    if ``score_fn(model)`` rises (then a <- a / (1 + a)), otherwise roll back."""

    def __init__(self, base: WeightSource, score_fn: Callable[[torch.nn.Module], float], alpha: float = 2.0,
                 include: tuple[str, ...] = ("self_attn", "mlp")) -> None:
        self.base = {n: t.detach().clone() for n, t in iter_tensors(base) if any(k in n for k in include)}
        if not self.base:
            raise ValueError(f"no base weight name contains any of {include}")
        self.score_fn = score_fn
        self.alpha = alpha
        self.history: list[tuple[int, float, bool]] = []

    @torch.no_grad()
    def on_step_end(self, step: int, model: torch.nn.Module) -> bool | None:
        """At power-of-two ``step``: extrapolate, score, keep or roll back; returns whether it was kept
        (None at other steps)."""
        if step < 1 or step & (step - 1):
            return None
        params = {n: p for n, p in unwrap_model(model).named_parameters() if n in self.base}
        for n, t in self.base.items():
            if n not in params or params[n].shape != t.shape:
                shape = list(params[n].shape) if n in params else "missing"
                raise ValueError(f"extrapolation base {n!r} (shape {list(t.shape)}) does not match the model ({shape})")
        saved = {n: p.detach().clone() for n, p in params.items()}
        before = self.score_fn(model)
        for n, p in params.items():
            p.add_(p - self.base[n].to(p.device, p.dtype), alpha=self.alpha)
        kept = self.score_fn(model) > before
        self.history.append((step, self.alpha, kept))
        if kept:
            self.alpha = self.alpha / (1 + self.alpha)
        else:
            for n, p in params.items():
                p.copy_(saved[n])
        return kept
