"""GEO section 5 controls in the rollout source: token sparsification (top-KL, random) and off-policy
(teacher-sampled) rollouts, against hand-computed masks and float64 log-probabilities."""

from types import SimpleNamespace

import pytest
import torch

from opsft.config import ObjectiveConfig
from opsft.sampling.base import Rollout
from opsft.sources import Example, RolloutSource

VOCAB = 5


class TableLM(torch.nn.Module):
    """A 'language model' whose next-token logits depend only on the current token: logits[t] = W[x_t]."""

    def __init__(self, seed: int):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(seed)))

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        return SimpleNamespace(logits=self.table[input_ids])


class RecordingSampler:
    """Returns a fixed rollout and remembers which model it was asked to sample from."""

    def __init__(self, rollout: Rollout):
        self.rollout, self.models = rollout, []

    def sample(self, model, prompts, n, temperature, max_new_tokens, seed, top_p=1.0):
        self.models.append(model)
        return self.rollout


def fixed_rollout() -> Rollout:
    """Two sequences of five tokens; completion targets at positions 1..3 (row 0) and 1..2 (row 1)."""
    input_ids = torch.tensor([[0, 1, 2, 3, 4], [0, 4, 3, 2, 0]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]])
    return Rollout(input_ids, torch.ones_like(input_ids), mask, ["a", "b"])


def source(objective: ObjectiveConfig, sampler, teacher=None) -> RolloutSource:
    return RolloutSource([Example("p")], sampler, lambda key, text: 1.0, prompts_per_step=1, group_size=2,
                         temperature=1.0, max_new_tokens=4, seed=0, objective=objective, teacher=teacher)


def reference_logp(model: TableLM, input_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(W[x_t])[x_{t+1}] in float64."""
    logp = torch.log_softmax(model.table.detach().double()[input_ids[:, :-1]], dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def test_topkl_keeps_the_tokens_where_the_student_is_most_over_confident():
    src = source(ObjectiveConfig(name="opd", token_keep=0.5, token_select="topkl"), None, teacher=TableLM(1))
    batch = {"mask": torch.tensor([[0.0, 1, 1, 1], [0, 1, 1, 0]]),
             "old_logp": torch.tensor([[-9.0, -1.0, -2.0, -3.0], [0.0, -1.0, -1.0, 0.0]]),
             "teacher_logp": torch.tensor([[0.0, -3.0, -1.0, -2.5], [0.0, -1.5, -4.0, 0.0]])}
    # r = student - teacher: row 0 -> [., 2.0, -1.0, -0.5]: ceil(0.5 * 3) = 2 kept: positions 1 and 3 (signed, so
    # the large negative gap at position 2 is not kept, as |r| would); row 1 -> [., 0.5, 3.0, .]: one kept, position 2
    kept = src._thin(batch, step=0)
    assert kept.tolist() == [[0, 1, 0, 1], [0, 0, 1, 0]]


def test_random_thinning_keeps_ceil_share_inside_the_mask_and_is_seeded_by_step():
    src = source(ObjectiveConfig(name="opd", token_keep=0.25, token_select="random"), None, teacher=TableLM(1))
    mask = torch.zeros(3, 12)
    mask[0, 2:10], mask[1, 0:3], mask[2, 5:6] = 1, 1, 1
    batch = {"mask": mask, "old_logp": torch.zeros(3, 12), "teacher_logp": torch.zeros(3, 12)}
    kept = src._thin(batch, step=7)
    assert kept.sum(-1).tolist() == [2, 1, 1]  # ceil(0.25 * [8, 3, 1])
    assert bool((kept <= mask).all())
    assert torch.equal(kept, src._thin(batch, step=7))
    draws = {tuple(src._thin(batch, step=s)[0].tolist()) for s in range(8)}
    assert len(draws) > 1


def test_off_policy_rollouts_come_from_the_teacher_and_are_scored_by_both_models():
    student, teacher = TableLM(0), TableLM(1)
    sampler = RecordingSampler(fixed_rollout())
    batch = source(ObjectiveConfig(name="opd", rollout_policy="teacher"), sampler, teacher=teacher).batch(student, 0)
    assert sampler.models == [teacher]
    ids = fixed_rollout().input_ids
    assert "old_logp" not in batch  # the student's own log-probs come from the training forward
    assert torch.allclose(batch["teacher_logp"].double(), reference_logp(teacher, ids), atol=1e-6)
    on_policy = RecordingSampler(fixed_rollout())
    source(ObjectiveConfig(name="opd"), on_policy, teacher=teacher).batch(student, 0)
    assert on_policy.models == [student]


def test_off_policy_needs_a_teacher_and_a_known_policy():
    with pytest.raises(ValueError, match="needs a teacher"):
        source(ObjectiveConfig(name="grpo", rollout_policy="teacher"), None)
    with pytest.raises(ValueError, match="rollout_policy"):
        source(ObjectiveConfig(name="opd", rollout_policy="mentor"), None, teacher=TableLM(1))
