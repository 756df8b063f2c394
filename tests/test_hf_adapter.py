"""The OPSFT constraint inside a Hugging Face Trainer on the organism (CPU, no hub access)."""

from __future__ import annotations

import pytest
import torch
from transformers import Trainer, TrainingArguments

from opsft.constraints import Extrapolation
from opsft.directions import Direction
from opsft.hf_adapter import ConstraintCallback, ExtrapolationCallback
from opsft.organism.models import build_model


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 8, length: int = 12) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(4, 40, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


def run_trainer(tmp_path, callbacks, weight_decay: float = 0.1):
    model = build_model("nano", seed=0)
    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=3, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, learning_rate=1e-2, weight_decay=weight_decay, max_grad_norm=1.0,
        save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    Trainer(model=model, args=args, train_dataset=TokenDataset(), callbacks=callbacks).train()
    return model, theta0


def test_trainer_with_sign_constraint_moves_only_along_v(tmp_path):
    model = build_model("nano", seed=0)
    g = torch.Generator().manual_seed(1)
    direction = Direction({n: torch.randint(-1, 2, p.shape, generator=g, dtype=torch.int8)
                           for n, p in model.named_parameters()})
    callback = ConstraintCallback(direction, mode="sign")
    trained, theta0 = run_trainer(tmp_path, [callback])
    moved = 0
    for n, p in trained.named_parameters():
        v, p = direction.signs[n], p.detach()
        s = (p > theta0[n]).to(torch.int8) - (p < theta0[n]).to(torch.int8)
        assert bool(((s == 0) | (s == v)).all()), n
        assert torch.equal(p[v == 0], theta0[n][v == 0]), n
        moved += int((s != 0).sum())
    assert moved > 0 and callback.handle is None  # trained, then detached at on_train_end


def test_trainer_extrapolation_callback_runs_at_power_of_two_steps(tmp_path):
    base = build_model("nano", seed=0)
    scores = iter(range(100))  # every extrapolation improves the score: always kept
    ext = Extrapolation(base, lambda m: float(next(scores)))
    run_trainer(tmp_path, [ExtrapolationCallback(ext)])
    assert [step for step, _, _ in ext.history] == [1, 2]
    assert [alpha for _, alpha, _ in ext.history] == pytest.approx([2.0, 2.0 / 3.0])
