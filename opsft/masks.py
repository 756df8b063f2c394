"""Masks derived from a direction (claims C03, C04, X02) and the subspace bases of GEO section 4.2.

A *sign mask* is int8 in {-1, 0, +1} (allowed update direction per weight); a *location mask* is bool
(True: the weight may move either way). Random masks draw from a generator seeded by (seed, name), so
they are the same on every rank and in every process.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import torch

from opsft.checkpoints import WeightSource
from opsft.directions import paired_tensors

Signs = Mapping[str, torch.Tensor]


def generator_for(seed: int, name: str) -> torch.Generator:
    """A CPU generator seeded by CRC32(f"{seed}:{name}"), 32 bits as the Mersenne Twister uses (stable across
    processes and ranks)."""
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}:{name}".encode()))


def location(signs: Signs) -> dict[str, torch.Tensor]:
    """Location-only mask: m = (v != 0), either sign allowed (C03)."""
    return {n: v != 0 for n, v in signs.items()}


def flipped(signs: Signs) -> dict[str, torch.Tensor]:
    """The sanity control -v."""
    return {n: -v for n, v in signs.items()}


def random_signs(signs: Signs, seed: int) -> dict[str, torch.Tensor]:
    """Same support as v, signs drawn uniformly from {-1, +1}: r_i = s_i * |v_i|, s_i ~ U{-1, 1} (C04)."""
    out = {}
    for n, v in signs.items():
        draw = torch.randint(0, 2, v.shape, generator=generator_for(seed, n), dtype=torch.int8) * 2 - 1
        out[n] = draw * (v != 0).to(torch.int8)
    return out


def random_locations(signs: Signs, seed: int) -> dict[str, torch.Tensor]:
    """Location mask with the same count |{i : v_i != 0}| per tensor at uniformly random positions (C04)."""
    out = {}
    for n, v in signs.items():
        k = int(v.count_nonzero())
        m = torch.zeros(v.numel(), dtype=torch.bool)
        m[torch.randperm(v.numel(), generator=generator_for(seed, n))[:k]] = True
        out[n] = m.view(v.shape)
    return out


def sequence_logprob(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     labels: torch.Tensor) -> torch.Tensor:
    """log p(y | x) per sequence: sum_t log softmax(logits_{t-1})[labels_t] over positions with labels != -100."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]  # [B, T-1, V]
    targets = labels[:, 1:]  # [B, T-1]
    keep = targets != -100  # [B, T-1]
    logp = torch.log_softmax(logits.float(), dim=-1)  # [B, T-1, V]
    tok = logp.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)  # [B, T-1]
    return (tok * keep).sum(-1)  # [B]


def fisher_diagonal(
    model: torch.nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Diagonal (empirical-on-own-samples) Fisher, F_i = E_y~p_theta [ (d log p_theta(y) / d theta_i)^2 ].

    ``batches`` yield ``input_ids``, ``attention_mask`` and ``labels`` (-100 on prompt and padding) of
    sequences sampled from the model itself; the expectation is the mean over sequences, each sequence's
    gradient taken on its own (a batch gradient squared would not be a Fisher). Returns float32 tensors.
    """
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
    count = 0
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            for i in range(batch["input_ids"].shape[0]):
                row = {k: batch[k][i : i + 1] for k in ("input_ids", "attention_mask", "labels")}
                grads = torch.autograd.grad(sequence_logprob(model, **row).sum(), list(params.values()),
                                            allow_unused=True)
                for (n, _), g in zip(params.items(), grads, strict=True):
                    if g is not None:
                        total[n].add_(g.float().square())
                count += 1
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("fisher_diagonal: `batches` yielded no sequences")
    return {n: t / count for n, t in total.items()}


def top_fraction(scores: Mapping[str, torch.Tensor], rho: float) -> dict[str, torch.Tensor]:
    """Location mask of the top-rho share of entries of ``scores`` over the whole model (ties kept):
    m_i = [s_i >= s_(k)], k = ceil(rho * N), s_(k) the k-th largest score (X02)."""
    if not 0 < rho <= 1:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    flat = torch.cat([s.reshape(-1).float() for s in scores.values()])
    k = max(1, int(torch.tensor(rho * flat.numel()).ceil()))
    threshold = torch.topk(flat, k, sorted=False).values.min()
    return {n: s.float() >= threshold for n, s in scores.items()}


def subspace_bases(before: WeightSource, after: WeightSource, rank: int = 16) -> dict[str, torch.Tensor]:
    """For each 2-D weight, V_K: the top-``rank`` right singular vectors of dW = W_after - W_before
    (dW = U S V^T, V_K = V[:, :K], shape [in, K]), computed in float64 and returned in float32."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    out = {}
    for name, tb, ta in paired_tensors(before, after):
        if tb.dim() != 2:
            continue
        _, _, vh = torch.linalg.svd(ta.to(torch.float64) - tb.to(torch.float64), full_matrices=False)
        out[name] = vh[:rank].T.contiguous().float()
    return out
