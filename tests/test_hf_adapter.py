"""The OPSFT constraint inside Hugging Face ``Trainer`` and TRL's ``SFTTrainer`` / ``GRPOTrainer`` on the nano
organism (CPU, in-memory data, no hub access). The TRL cases skip when the optional ``trl`` extra is absent."""

from __future__ import annotations

from collections.abc import Callable

import huggingface_hub.constants
import pytest
import torch
from transformers import Trainer, TrainingArguments

from opsft.constraints import Extrapolation, constrain
from opsft.directions import Direction
from opsft.hf_adapter import ConstraintCallback, ExtrapolationCallback
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer

# Shared by every trainer: a few steps, lr and weight decay large enough that most weights try to move.
COMMON = dict(use_cpu=True, report_to=[], max_steps=3, learning_rate=1e-2, weight_decay=0.1, max_grad_norm=1.0,
              save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No hub access: huggingface_hub reads HF_HUB_OFFLINE at import, so set both the variable and its constant."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 8, length: int = 12) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(4, 40, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


def sums_dataset(with_completion: bool):
    """An in-memory ``datasets.Dataset`` of prompts "a+b=" (and completions "a+b" for SFT)."""
    from datasets import Dataset

    pairs = [(a, b) for a in range(4) for b in range(4)]
    columns = {"prompt": [f"{a}+{b}=" for a, b in pairs]}
    if with_completion:
        columns["completion"] = [str(a + b) for a, b in pairs]
    return Dataset.from_dict(columns)


def digit_count(completions: list[str], **_) -> list[float]:
    """A reward that varies across samples of a random model, so GRPO advantages are nonzero."""
    return [float(sum(ch.isdigit() for ch in c)) for c in completions]


def hf_trainer(model, tmp_path, callbacks, optimizers=(None, None)) -> Trainer:
    """HF Trainer on random token rows, with gradient accumulation (the mask acts on the accumulated gradient)."""
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                             **COMMON)
    return Trainer(model=model, args=args, train_dataset=TokenDataset(), callbacks=callbacks, optimizers=optimizers)


def sft_trainer(model, tmp_path, callbacks, optimizers=(None, None)):
    """TRL's SFTTrainer with its CPU defaults kept (bf16 autocast, gradient checkpointing, completion-only loss)."""
    trl = pytest.importorskip("trl", reason="trl is not installed (optional extra: pip install -e .[trl])")
    args = trl.SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, max_length=32, **COMMON)
    return trl.SFTTrainer(model=model, args=args, train_dataset=sums_dataset(True), processing_class=build_tokenizer(),
                          callbacks=callbacks, optimizers=optimizers)


def grpo_trainer(model, tmp_path, callbacks, optimizers=(None, None)):
    """TRL's GRPOTrainer: 2 prompts x 4 samples of 4 new tokens a step."""
    trl = pytest.importorskip("trl", reason="trl is not installed (optional extra: pip install -e .[trl])")
    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
                          max_completion_length=4, **COMMON)
    return trl.GRPOTrainer(model=model, reward_funcs=[digit_count], args=args, train_dataset=sums_dataset(False),
                           processing_class=build_tokenizer(), callbacks=callbacks, optimizers=optimizers)


TRAINERS: dict[str, Callable] = {"Trainer": hf_trainer, "SFTTrainer": sft_trainer, "GRPOTrainer": grpo_trainer}


def random_direction(model: torch.nn.Module) -> Direction:
    g = torch.Generator().manual_seed(1)
    return Direction({n: torch.randint(-1, 2, p.shape, generator=g, dtype=torch.int8)
                      for n, p in model.named_parameters()})


def moved_along(direction: Direction, model: torch.nn.Module, theta0: dict[str, torch.Tensor]) -> int:
    """Assert sign(theta_t - theta_0) in {0, v} for every weight (v = 0: bit-identical); return how many moved."""
    moved = 0
    for n, p in model.named_parameters():
        v, p = direction.signs[n], p.detach()
        s = (p > theta0[n]).to(torch.int8) - (p < theta0[n]).to(torch.int8)
        assert bool(((s == 0) | (s == v)).all()), n
        assert torch.equal(p[v == 0], theta0[n][v == 0]), n
        moved += int((s != 0).sum())
    return moved


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(TRAINERS))
def test_constraint_callback_moves_weights_only_along_v(tmp_path, kind):
    model = build_model("nano", seed=0)
    direction = random_direction(model)
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    callback = ConstraintCallback(direction, mode="sign")
    trainer = TRAINERS[kind](model, tmp_path, [callback])
    trainer.train()
    assert trainer.state.global_step == 3
    assert moved_along(direction, trainer.model, theta0) > 0
    assert callback.handle is None  # detached at on_train_end


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["Trainer", "SFTTrainer"])
def test_constrained_optimizer_passed_to_trainer_moves_weights_only_along_v(tmp_path, kind):
    model = build_model("nano", seed=0)
    direction = random_direction(model)
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    handle = constrain(optimizer, model, direction, mode="sign")
    TRAINERS[kind](model, tmp_path, [], optimizers=(optimizer, None)).train()
    handle.remove()
    assert moved_along(direction, model, theta0) > 0


@pytest.mark.slow
def test_trainer_extrapolation_callback_runs_at_power_of_two_steps(tmp_path):
    base = build_model("nano", seed=0)
    scores = iter(range(100))  # every extrapolation improves the score: always kept
    ext = Extrapolation(base, lambda m: float(next(scores)))
    hf_trainer(build_model("nano", seed=0), tmp_path, [ExtrapolationCallback(ext)]).train()
    assert [step for step, _, _ in ext.history] == [1, 2]
    assert [alpha for _, alpha, _ in ext.history] == pytest.approx([2.0, 2.0 / 3.0])
