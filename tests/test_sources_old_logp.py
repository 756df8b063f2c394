"""The old policy's log-probabilities of an on-policy batch are the training forward's, detached: a separate
no-grad forward (what RolloutSource ran before) gives bitwise the same numbers, so the loss and every gradient
are bit-identical without it (opsft.sources.RolloutSource)."""

import pytest
import torch

from opsft.config import ObjectiveConfig
from opsft.objectives import grpo_loss, token_logprobs
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.rewards import reward
from opsft.sampling.base import sequence_logits
from opsft.sampling.hf import HFSampler
from opsft.sources import Example, RolloutSource


def _forward_logp(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The training loop's forward: token log-probs of the batch with autograd on."""
    return token_logprobs(sequence_logits(model, batch["input_ids"], batch["attention_mask"]), batch["input_ids"])


def _grads(model: torch.nn.Module, batch: dict) -> list[torch.Tensor]:
    model.zero_grad()
    loss, _ = grpo_loss(_forward_logp(model, batch), batch, ObjectiveConfig(name="grpo"))
    loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_training_forward_gives_the_old_log_probs_bit_for_bit(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tok, model = build_tokenizer(), build_model("micro", seed=0)
        model.train()
        examples = [Example(p.prompt, "", p) for p in tasks.generate("arith", "train", 32, 0)]
        src = RolloutSource(examples, HFSampler(tok), reward, prompts_per_step=8, group_size=4, temperature=1.0,
                            max_new_tokens=16, seed=0, objective=ObjectiveConfig(name="grpo"))
        batch = src.batch(model, 0)
        assert "old_logp" not in batch
        with torch.no_grad():
            separate = token_logprobs(sequence_logits(model, batch["input_ids"], batch["attention_mask"]),
                                      batch["input_ids"])
        assert torch.equal(_forward_logp(model, batch).detach(), separate)
        with_old = _grads(model, {**batch, "old_logp": separate})
        assert all(torch.equal(a, b) for a, b in zip(_grads(model, batch), with_old, strict=True))
    finally:
        torch.set_num_threads(before)
