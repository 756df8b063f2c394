"""Parity with TRL's GRPOTrainer: TRL's own code computes the reference on the same batch, never a re-typed
formula.

Losses are compared in float64 on the same log-probabilities: TRL's log-probability function is replaced by
one returning a float64 leaf tensor, so its ``_compute_loss`` body runs unchanged on exactly our inputs, and
the gradients with respect to that leaf are compared too. TRL's fused LM head computes log-probabilities
in float32, so those are compared (with ours, also float32 by design) at float32 tolerance. TRL's rewards
are float32.

Loss types both implement, on one micro-batch (our loop trains one batch a step, no accumulation):
TRL ``grpo`` = our ``seq_mean``; TRL ``bnpo`` and ``dapo`` = our ``token_sum``. TRL's KL term is compared with
``use_bias_correction_kl=False`` (the plain k3 estimator; TRL's default multiplies it by the ratio).
"""

from __future__ import annotations

import huggingface_hub.constants
import pytest
import torch

from opsft.config import ObjectiveConfig
from opsft.objectives import group_advantages, grpo_loss, token_logprobs
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer

trl = pytest.importorskip("trl", reason="trl is not installed (optional extra: pip install -e .[trl])")

GROUP = 4
PROMPT, COMPLETION = 5, 6  # tokens per prompt (all the same length: no left padding) and per completion
AGGREGATION = {"grpo": "seq_mean", "bnpo": "token_sum", "dapo": "token_sum"}  # TRL loss_type -> ours
TRL_ADVANTAGE_EPS = 1e-4  # the constant TRL 1.16 adds to the group std


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No hub access: huggingface_hub reads HF_HUB_OFFLINE at import, so set both the variable and its constant."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """The nano model saved locally: with beta > 0 TRL loads its reference model from this path."""
    folder = tmp_path_factory.mktemp("nano")
    build_model("nano", seed=0).save_pretrained(folder)
    return folder


def rewards_column(rewards: list[float], **_) -> list[float]:
    """TRL reward function returning the ``rewards`` column of the batch: the test fixes the rewards."""
    return rewards


def make_trainer(folder, **config):
    """A GRPOTrainer on the nano model, fp32 (no bf16 autocast), gradient checkpointing off."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    config = {"per_device_train_batch_size": 2 * GROUP, **config}
    args = trl.GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, bf16=False, gradient_checkpointing=False,
                          report_to=[], num_generations=GROUP, max_completion_length=COMPLETION, **config)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[rewards_column], args=args, processing_class=build_tokenizer(),
                              train_dataset=Dataset.from_dict({"prompt": ["1+2=", "3+4="], "rewards": [0.0, 0.0]}))
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); _compute_loss divides by it
    trainer.model.train()
    return trainer


def token_ids(seed: int = 0) -> dict[str, torch.Tensor]:
    """2 x GROUP unpadded prompts with completions of ragged lengths (right padding, masked)."""
    g = torch.Generator().manual_seed(seed)
    n = 2 * GROUP
    prompt_ids = torch.randint(4, 90, (n, PROMPT), generator=g)
    prompt_ids[:, 0] = 1  # <bos>
    lengths = torch.randint(1, COMPLETION + 1, (n, 1), generator=g)
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids),
            "completion_ids": torch.randint(4, 90, (n, COMPLETION), generator=g),
            "completion_mask": (torch.arange(COMPLETION) < lengths).long()}


def policy_batch(seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A float64 leaf of current log-probabilities (B, C) and TRL's GRPO inputs around it: an old policy and a
    reference 0.3 nats (sd) away, so ratios leave both clip bounds, and advantages of both signs."""
    g = torch.Generator().manual_seed(seed + 1)
    ids = token_ids(seed)
    shape = ids["completion_ids"].shape
    logp = (-3 * torch.rand(shape, generator=g, dtype=torch.float64)).requires_grad_()
    return logp, {
        **ids,
        "advantages": torch.randn(shape[0], generator=g, dtype=torch.float64),
        "old_per_token_logps": logp.detach() + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64),
        "ref_per_token_logps": logp.detach() + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64),
        "num_items_in_batch": ids["completion_mask"].sum(),
    }


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", list(AGGREGATION))
def test_grpo_loss_and_gradient_equal_trl(model_folder, monkeypatch, loss_type, beta):
    trainer = make_trainer(model_folder, loss_type=loss_type, epsilon=0.2, epsilon_high=0.28, beta=beta,
                           use_bias_correction_kl=False)
    logp, batch = policy_batch()
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies",
                        lambda *args, **kwargs: (logp, torch.zeros_like(logp.detach()), None))
    theirs = trainer._compute_loss(trainer.model, batch)
    their_grad, = torch.autograd.grad(theirs, logp)

    cfg = ObjectiveConfig(name="grpo", eps_low=0.2, eps_high=0.28, beta_kl=beta, aggregation=AGGREGATION[loss_type])
    ours, metrics = grpo_loss(logp, {"mask": batch["completion_mask"].double(), "old_logp": batch["old_per_token_logps"],
                                     "ref_logp": batch["ref_per_token_logps"], "advantages": batch["advantages"],
                                     "rewards": torch.zeros(len(logp))}, cfg)
    our_grad, = torch.autograd.grad(ours, logp)

    assert theirs.dtype == ours.dtype == torch.float64
    assert metrics["clip_frac"] > 0  # the batch exercises the clip
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(our_grad, their_grad, rtol=1e-12, atol=1e-15)
    if beta > 0:
        assert metrics["kl"] == pytest.approx(trainer._metrics["train"]["kl"][-1], rel=1e-12)


def test_token_logprobs_equal_trl(model_folder):
    """Our completion-token log-probabilities equal those TRL computes with its fused LM head (both float32)."""
    trainer = make_trainer(model_folder)
    ids = token_ids()
    input_ids = torch.cat([ids["prompt_ids"], ids["completion_ids"]], dim=1)
    attention = torch.cat([ids["prompt_mask"], ids["completion_mask"]], dim=1)
    with torch.no_grad():
        theirs, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention, COMPLETION)
        logits = trainer.model(input_ids=input_ids, attention_mask=attention).logits
        ours = token_logprobs(logits, input_ids)[:, PROMPT - 1:]  # (B, C): targets of the completion tokens
    mask = ids["completion_mask"].bool()
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)


def trl_advantages(trainer, rewards: torch.Tensor) -> torch.Tensor:
    """Advantages from TRL's own ``_generate_and_score_completions`` (it samples completions; the reward
    function returns the fixed ``rewards``, one group of GROUP consecutive rows per prompt)."""
    inputs = [{"prompt": f"{i // GROUP}+1=", "rewards": float(r)} for i, r in enumerate(rewards)]
    return trainer._generate_and_score_completions(inputs)["advantages"]


# Binary outcomes (the organism's rewards), graded ones, a group with one success, and a constant group.
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.5, 0.25, 2.0, -1.0, 3.0, 3.0, 3.0, 3.0])


def test_group_advantages_equal_trl(model_folder):
    trainer = make_trainer(model_folder, per_device_train_batch_size=len(REWARDS))
    theirs = trl_advantages(trainer, REWARDS)
    ours = group_advantages(REWARDS.double(), GROUP, eps=TRL_ADVANTAGE_EPS)
    torch.testing.assert_close(ours, theirs.double(), rtol=1e-6, atol=1e-6)
