"""``sequence_logits`` runs right-padded batches unmasked: every real token's logits equal the masked forward's
(float64 reference, tolerance 1e-5), and left-padded batches keep their mask (bitwise the masked forward)."""

import torch

from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.sampling.base import position_ids, sequence_logits
from opsft.sources import encode_pairs


def masked_forward(model, ids, mask) -> torch.Tensor:
    """The forward with the mask always handed to the model."""
    return model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits


@torch.no_grad()
def test_right_padding_runs_unmasked_and_matches_the_masked_forward_on_real_tokens():
    tok, model = build_tokenizer(), build_model("micro", seed=0).eval()
    problems = tasks.generate("arith", "train", 16, 0, style="teacher")
    batch = encode_pairs(tok, [(p.prompt, p.solution) for p in problems])
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert bool(mask.eq(0).any())  # rows of different lengths: right padding
    real = mask.bool()
    fast = sequence_logits(model, ids, mask)[real]
    exact = masked_forward(model.double(), ids, mask)[real]
    torch.testing.assert_close(fast.double(), exact, atol=1e-5, rtol=0)


@torch.no_grad()
def test_left_padding_keeps_the_mask():
    tok, model = build_tokenizer(), build_model("micro", seed=0).eval()
    enc = tok([p.prompt for p in tasks.generate("arith", "test", 8, 1)], return_tensors="pt", padding=True,
              padding_side="left")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert bool(mask[:, 0].eq(0).any())
    assert torch.equal(sequence_logits(model, ids, mask), masked_forward(model, ids, mask))
