"""Batch sources: the loop asks ``source.batch(model, step)`` and never knows which method it runs.

``StaticSource`` serves fixed trajectories (SFT, DFT, pretraining) in a seeded epoch order;
``RolloutSource`` samples the current policy on prompts of a finite set and scores the samples
(GRPO rewards and advantages; OPD teacher log-probabilities). Both are pure functions of (seed, step),
so a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from opsft.config import ObjectiveConfig
from opsft.objectives import batch_logprobs, group_advantages
from opsft.sampling.base import Sampler

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Example:
    """A prompt, the completion to train on (empty for prompt-only sets), and a reward function input."""

    prompt: str
    completion: str = ""
    key: object = None  # what the reward function needs (an organism Problem, a gold answer, ...)


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A per-step seed that differs across runs, steps and uses, identical on resume."""
    return (seed * 1_000_003 + step * 7_919 + salt * 104_729) % (2**31 - 1)


def encode_pair(tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """``<bos> prompt completion <eos>`` token ids and the target mask over its positions but the last: 1 where
    the next token is a completion token or the <eos> (target t predicts token t + 1)."""
    p = tokenizer(prompt)["input_ids"]  # includes <bos>
    c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return p + c, [0] * (len(p) - 1) + [1] * len(c)


def pad_encoded(rows: Sequence[tuple[list[int], list[int]]], pad_id: int) -> Batch:
    """Right-padded ``input_ids`` / ``attention_mask`` (B, L) and target ``mask`` (B, L - 1) of encoded pairs."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.tensor([ids + [pad_id] * (width - len(ids)) for ids, _ in rows], dtype=torch.long)
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows], dtype=torch.long)
    target = torch.tensor([mask + [0] * (width - 1 - len(mask)) for _, mask in rows], dtype=torch.float32)
    return {"input_ids": input_ids, "attention_mask": attention, "mask": target}


def encode_pairs(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[tuple[str, str]]) -> Batch:
    """Right-padded ``<bos> prompt completion <eos>`` sequences with a target mask on completion + <eos>."""
    return pad_encoded([encode_pair(tokenizer, p, c) for p, c in pairs], tokenizer.pad_token_id)


class StaticSource:
    """Fixed trajectories, ``batch_size`` a step, reshuffled each epoch with a seed of (seed, epoch)."""

    def __init__(self, examples: Sequence[Example], tokenizer: PreTrainedTokenizerBase, batch_size: int, seed: int):
        if not examples:
            raise ValueError("StaticSource needs at least one example")
        self.examples, self.tokenizer, self.batch_size, self.seed = list(examples), tokenizer, batch_size, seed
        self._encoded: dict[int, tuple[list[int], list[int]]] = {}

    def indices(self, step: int) -> list[int]:
        """Example indices of a step: epochs are seeded permutations laid end to end."""
        n, out, perms = len(self.examples), [], {}
        start = step * self.batch_size
        for pos in range(start, start + self.batch_size):
            epoch, offset = divmod(pos, n)
            if epoch not in perms:
                perms[epoch] = torch.randperm(n, generator=torch.Generator().manual_seed(step_seed(self.seed, epoch, 1)))
            out.append(int(perms[epoch][offset]))
        return out

    def encoded(self, index: int) -> tuple[list[int], list[int]]:
        """Token ids and target mask of example ``index``, tokenized on first use only."""
        if index not in self._encoded:
            e = self.examples[index]
            self._encoded[index] = encode_pair(self.tokenizer, e.prompt, e.completion)
        return self._encoded[index]

    def batch(self, model: torch.nn.Module, step: int) -> Batch:
        """The step's trajectories, encoded for the loss (the model is not consulted)."""
        return pad_encoded([self.encoded(i) for i in self.indices(step)], self.tokenizer.pad_token_id)


RewardFn = Callable[[object, str], float]


class RolloutSource:
    """On-policy batches: ``prompts_per_step`` prompts x ``group_size`` samples from the current model.

    Adds ``rewards`` and group-normalised ``advantages`` (B,) and, with a teacher, ``teacher_logp`` (B, T); with a
    reference model, ``ref_logp``. The student's log-probabilities before the update (``old_logp``) come from
    the training forward itself (``opsft.objectives.clipped_policy_loss`` detaches them): with one update per
    batch the old policy is the current one, and a separate no-grad forward gives bitwise the same numbers
    (tests/test_sources_old_logp.py), so it is run only where the batch needs them first (token thinning by
    the student-teacher gap). With
    ``objective.rollout_policy == "teacher"`` (GEO section 5.1, off-policy rollouts) the teacher samples and
    the student is trained on the teacher's tokens: ``old_logp`` is then the student's own log-probability of
    them, so the one update per batch has importance ratio 1 (GEO sets the clip to 1.0, "effectively
    inactive"; here there is nothing to clip).
    """

    def __init__(
        self,
        examples: Sequence[Example],
        sampler: Sampler,
        reward_fn: RewardFn,
        *,
        prompts_per_step: int,
        group_size: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        objective: ObjectiveConfig,
        teacher: torch.nn.Module | None = None,
        reference: torch.nn.Module | None = None,
    ):
        if objective.name == "opd" and teacher is None:
            raise ValueError("an OPD rollout source needs a teacher model")
        if objective.rollout_policy not in ("student", "teacher"):
            raise ValueError(f"ObjectiveConfig.rollout_policy must be student|teacher, got {objective.rollout_policy!r}")
        if objective.rollout_policy == "teacher" and teacher is None:
            raise ValueError("ObjectiveConfig.rollout_policy='teacher' needs a teacher model (an OPD objective)")
        if objective.beta_kl > 0 and reference is None:
            raise ValueError("ObjectiveConfig.beta_kl > 0 needs a reference model")
        self.examples, self.sampler, self.reward_fn = list(examples), sampler, reward_fn
        self.prompts_per_step, self.group_size = prompts_per_step, group_size
        self.temperature, self.max_new_tokens, self.seed = temperature, max_new_tokens, seed
        self.objective, self.teacher, self.reference = objective, teacher, reference

    def to(self, device: torch.device) -> RolloutSource:
        """Move the teacher and reference models to ``device`` (where the rollouts are sampled: a rank's GPU
        under torchrun); returns the source."""
        for model in (self.teacher, self.reference):
            if model is not None:
                model.to(device)
        return self

    def prompts(self, step: int) -> list[Example]:
        """The step's prompts: a seeded draw without replacement from the finite prompt set."""
        g = torch.Generator().manual_seed(step_seed(self.seed, step, 2))
        idx = torch.randperm(len(self.examples), generator=g)[: self.prompts_per_step]
        return [self.examples[int(i)] for i in idx]

    def batch(self, model: torch.nn.Module, step: int) -> Batch:
        """Sample, score and lay out one on-policy batch."""
        chosen = self.prompts(step)
        policy = self.teacher if self.objective.rollout_policy == "teacher" else model
        roll = self.sampler.sample(policy, [e.prompt for e in chosen], self.group_size, self.temperature,
                                   self.max_new_tokens, step_seed(self.seed, step, 3))
        keys = [e.key for e in chosen for _ in range(self.group_size)]
        rewards = torch.tensor([self.reward_fn(k, t) for k, t in zip(keys, roll.texts, strict=True)])  # (B,)
        batch: Batch = {
            "input_ids": roll.input_ids,
            "attention_mask": roll.attention_mask,
            "mask": roll.completion_mask.float(),
            "rewards": rewards,
            "advantages": group_advantages(rewards, self.group_size),
        }
        if self.teacher is not None and self.objective.token_keep < 1 and self.objective.token_select == "topkl":
            batch["old_logp"] = self._logp(model, batch)
        if self.teacher is not None:
            batch["teacher_logp"] = self._logp(self.teacher, batch)
            batch["mask"] = self._thin(batch, step)
        if self.reference is not None:
            batch["ref_logp"] = self._logp(self.reference, batch)
        return batch

    @torch.no_grad()
    def _logp(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return batch_logprobs(model, batch)  # (B, T)

    def _thin(self, batch: Batch, step: int) -> torch.Tensor:
        """GEO section 5.1 / appendix G.2 token sparsification: keep ``token_keep`` of each sequence's
        completion tokens (ceil, at least one): for ``topkl`` those of largest sampled-token gap
        r_t = log pi_student(y_t) - log pi_teacher(y_t) ("where the student is most over-confident relative to
        the teacher"), for ``random`` a seeded uniform subset. Dropped tokens leave the loss's token mean, which
        renormalises the kept ones."""
        keep, mask = self.objective.token_keep, batch["mask"]
        if keep >= 1:
            return mask
        if self.objective.token_select == "topkl":
            score = batch["old_logp"] - batch["teacher_logp"]  # (B, T)
        else:
            g = torch.Generator().manual_seed(step_seed(self.seed, step, 4))
            score = torch.rand(mask.shape, generator=g)
        score = score.masked_fill(mask == 0, float("-inf"))
        k = (mask.sum(-1) * keep).ceil().long().clamp(min=1)  # (B,)
        order = score.argsort(dim=-1, descending=True).argsort(dim=-1)  # (B, T) rank of each token
        return ((order < k.unsqueeze(-1)) & (mask > 0)).float()
