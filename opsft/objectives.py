"""Training objectives as pure functions: (token log-probabilities, batch) -> (loss, metrics).

The loop computes ``logp[b, t] = log pi_theta(y_t | y_<t)`` for every target token once
(:func:`batch_logprobs`: the forward the loop, the rollout source's scoring and the Fisher estimate share)
and hands it here; no objective touches the model. Shapes: B sequences,
T target positions (the input shifted by one); ``mask[b, t] = 1`` where token t is trained on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from opsft.config import ObjectiveConfig
from opsft.sampling.base import sequence_logits

Metrics = dict[str, float]
Objective = Callable[[torch.Tensor, dict[str, torch.Tensor]], tuple[torch.Tensor, Metrics]]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[t, y_{t+1}]: the log-probability of each next token, computed in fp32."""
    logits = logits[:, :-1].float()  # (B, T, V)
    targets = input_ids[:, 1:]  # (B, T)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)



def batch_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor], length_chunks: int = 1) -> torch.Tensor:
    """(B, L-1) log pi(x_t | x_<t) of a padded batch's tokens (``sequence_logits`` then ``token_logprobs``).

    ``length_chunks`` = c > 1 on a right-padded batch trims the padding: its rows, stably sorted by length, are
    cut into c groups of about B / c rows, each group runs trimmed to its longest row, and the log-probs go back
    to their rows, 0 past the group's length (pad positions, which every objective masks). Each real token's
    log-probability is the one-forward value up to float rounding (under causal attention a real token never
    attends to a later position, pad or not), and the backward reaches the weights through the same tokens;
    only padded positions are not computed. A left-padded batch, or c = 1, runs as one forward."""
    ids, attention = batch["input_ids"], batch["attention_mask"]
    right_padded = bool((attention[:, 1:] <= attention[:, :-1]).all())
    if length_chunks <= 1 or not right_padded:
        return token_logprobs(sequence_logits(model, ids, attention), ids)
    lengths, order = attention.sum(1), torch.sort(attention.sum(1), stable=True).indices
    pieces = []
    for rows in order.chunk(length_chunks):
        width = int(lengths[rows].max())
        sub_ids = ids[rows, :width]
        logp = token_logprobs(sequence_logits(model, sub_ids, attention[rows, :width]), sub_ids)  # (b, width-1)
        pieces.append(torch.nn.functional.pad(logp, (0, ids.shape[1] - width)))
    return torch.cat(pieces)[torch.argsort(order)]

def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def sft_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
    """Token-level NLL on the trained tokens: L = -sum_t m_t log pi(y_t) / sum_t m_t."""
    mask = batch["mask"]  # (B, T)
    loss = -_masked_mean(logp, mask)  # ()
    return loss, {"nll": loss.item(), "tokens": mask.sum().item()}


def dft_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Metrics]:
    """Dynamic Fine-Tuning (arXiv 2508.05629, vanilla): each token's NLL weighted by its detached
    probability, L = -sum_t m_t sg(pi(y_t)) log pi(y_t) / sum_t m_t."""
    mask = batch["mask"]  # (B, T)
    weight = logp.detach().exp()  # (B, T)
    loss = -_masked_mean(weight * logp, mask)  # ()
    return loss, {"nll": -_masked_mean(logp.detach(), mask).item(), "mean_p": _masked_mean(weight, mask).item()}


def _aggregate(per_token: torch.Tensor, mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """``seq_mean``: mean over each sequence's tokens, then over sequences (original GRPO);
    ``token_sum``: sum over all tokens of the batch divided by their count (DAPO)."""
    if aggregation == "seq_mean":
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
        return per_seq.mean()
    return _masked_mean(per_token, mask)


def clipped_policy_loss(
    logp: torch.Tensor, batch: dict[str, torch.Tensor], advantages: torch.Tensor, cfg: ObjectiveConfig
) -> tuple[torch.Tensor, Metrics]:
    """PPO-style clipped surrogate with token advantages A_t, old policy from the batch (``old_logp``):
    r_t = exp(logp_t - old_t); l_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
    (+ beta * k3 KL to ``ref_logp``: exp(ref - logp) - (ref - logp) - 1)."""
    mask = batch["mask"]  # (B, T)
    old = batch.get("old_logp", logp.detach())  # (B, T)
    ratio = torch.exp(logp - old)  # (B, T)
    clipped = ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)  # (B, T)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)  # (B, T)
    metrics: Metrics = {}
    if cfg.beta_kl > 0:
        delta = batch["ref_logp"] - logp  # (B, T)
        kl = torch.exp(delta) - delta - 1  # (B, T) k3 estimator, >= 0
        per_token = per_token + cfg.beta_kl * kl
        metrics["kl"] = _masked_mean(kl.detach(), mask).item()
    loss = _aggregate(per_token, mask, cfg.aggregation)  # ()
    was_clipped = ((ratio - clipped).abs() > 0).float()  # (B, T)
    metrics["clip_frac"] = _masked_mean(was_clipped, mask).item()
    return loss, metrics


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantages: A_i = (r_i - mean(r_group)) / (std(r_group) + eps), groups of consecutive samples;
    std is the sample standard deviation (Bessel-corrected, 1/(G-1)), as TRL and verl compute it."""
    grouped = rewards.view(-1, group_size)  # (P, G)
    mean = grouped.mean(-1, keepdim=True)  # (P, 1)
    std = grouped.std(-1, keepdim=True)  # (P, 1)
    return ((grouped - mean) / (std + eps)).view(-1)  # (P*G,)


def grpo_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor], cfg: ObjectiveConfig) -> tuple[torch.Tensor, Metrics]:
    """GRPO: the sequence advantage ``batch["advantages"]`` (B,) shared by every token of a completion."""
    adv = batch["advantages"].unsqueeze(-1).expand_as(logp)  # (B, T)
    loss, metrics = clipped_policy_loss(logp, batch, adv, cfg)
    metrics["reward"] = batch["rewards"].mean().item()
    return loss, metrics


def opd_advantages(logp: torch.Tensor, batch: dict[str, torch.Tensor], cfg: ObjectiveConfig) -> torch.Tensor:
    """On-policy distillation token advantage (GEO appendix D): the negative per-token reverse KL estimate
    on the sampled token, a_t = log pi_teacher(y_t) - log pi_student(y_t); mixed with the GRPO sequence
    advantage as alpha * a_t + (1 - alpha) * A (GEO section 5.2; "raw signal mixing": the mix is not
    renormalised per batch). Token sparsification (GEO section 5.1) is the source's: it thins the batch's
    ``mask``."""
    adv = batch["teacher_logp"] - logp.detach()  # (B, T)
    if cfg.opd_alpha < 1:
        seq_adv = batch["advantages"].unsqueeze(-1).expand_as(adv)  # (B, T)
        adv = cfg.opd_alpha * adv + (1 - cfg.opd_alpha) * seq_adv
    return adv


def opd_loss(logp: torch.Tensor, batch: dict[str, torch.Tensor], cfg: ObjectiveConfig) -> tuple[torch.Tensor, Metrics]:
    """OPD: the clipped policy loss with per-token advantages from :func:`opd_advantages`; the batch's
    ``mask`` already holds the token sparsification chosen by the source."""
    adv = opd_advantages(logp, batch, cfg)  # (B, T)
    loss, metrics = clipped_policy_loss(logp, batch, adv, cfg)
    metrics["reverse_kl"] = _masked_mean(logp.detach() - batch["teacher_logp"], batch["mask"]).item()
    if "rewards" in batch:
        metrics["reward"] = batch["rewards"].mean().item()
    return loss, metrics


def make_objective(cfg: ObjectiveConfig) -> Objective:
    """The objective named by ``cfg.name`` bound to its hyper-parameters."""
    table: dict[str, Objective] = {
        "sft": sft_loss,
        "dft": dft_loss,
        "grpo": lambda logp, batch: grpo_loss(logp, batch, cfg),
        "opd": lambda logp, batch: opd_loss(logp, batch, cfg),
    }
    return table[cfg.name]
