"""``batch_logprobs`` with length chunks trims a right-padded batch's padding without changing the loss: on a
float64 model every real token's log-probability and every weight gradient equal the one-forward values to
1e-12; positions past a group's longest row come back 0; a left-padded batch runs as one forward, bitwise."""

from dataclasses import replace

import pytest
import torch

from opsft.objectives import batch_logprobs, sft_loss
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.specs import ORGANISMS
from opsft.organism.tokenizer import build_tokenizer
from opsft.sources import encode_pairs


def right_padded_batch(n: int = 12) -> dict[str, torch.Tensor]:
    """Teacher-style arith and code examples of several lengths, right-padded."""
    problems = tasks.generate("arith", "train", n // 2, 0, style="teacher") + tasks.generate(
        "code", "train", n - n // 2, 0, style="teacher")
    batch = encode_pairs(build_tokenizer(), [(p.prompt, p.solution) for p in problems])
    assert len(set(batch["attention_mask"].sum(1).tolist())) > 3  # rows of many lengths
    return batch


def loss_and_grads(model: torch.nn.Module, batch: dict, chunks: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Log-probs, the SFT loss and the weight gradients of one backward."""
    model.zero_grad(set_to_none=True)
    logp = batch_logprobs(model, batch, chunks)
    loss, _ = sft_loss(logp, batch)
    loss.backward()
    return logp.detach(), loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("chunks", [2, 3, 12, 40])
def test_chunked_logprobs_and_gradients_equal_the_one_forward_in_float64(chunks):
    model, batch = build_model("nano", seed=0).double(), right_padded_batch()
    real = batch["mask"].bool()
    pads = ~batch["attention_mask"][:, 1:].bool()
    logp1, loss1, grads1 = loss_and_grads(model, batch, 1)
    logp, loss, grads = loss_and_grads(model, batch, chunks)
    torch.testing.assert_close(logp[real], logp1[real], atol=1e-12, rtol=0)
    assert logp.shape == logp1.shape
    if chunks >= len(real):  # one row a group: every pad position is past its group's width, so not computed
        assert logp[pads].eq(0).all()
    torch.testing.assert_close(loss, loss1, atol=1e-12, rtol=0)
    for g, g1 in zip(grads, grads1, strict=True):
        torch.testing.assert_close(g, g1, atol=1e-12, rtol=1e-10)


def test_one_chunk_and_left_padding_run_the_one_forward_bitwise():
    model, batch = build_model("nano", seed=0), right_padded_batch()
    assert torch.equal(batch_logprobs(model, batch, 1), batch_logprobs(model, batch))
    left = {k: v.flip(1) for k, v in batch.items()}  # pads first: a left-padded batch (content irrelevant)
    with torch.no_grad():
        assert torch.equal(batch_logprobs(model, left, 4), batch_logprobs(model, left, 1))


def test_recipes_without_chunks_keep_their_digests(native_numerics):
    nano = ORGANISMS["nano"]  # its models (and paper-tiny's stand-ins) are the ones cached before chunks existed
    assert (nano.digest(), nano.recipe("base").digest(), nano.recipe("teacher").digest()) == (
        "9d2a92bfd5f1740f", "60e2ce20415fdfcd", "cbec1abda58a0800")
    chunked = replace(nano, pretrain_length_chunks=4)
    assert chunked.recipe("teacher").length_chunks == 4 and chunked.digest() != nano.digest()
