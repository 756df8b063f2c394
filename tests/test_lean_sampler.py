"""The lean decode loop is bit-identical to ``model.generate``: the same logits at every step and the same
tokens (greedy and sampled, same seed), hence the same rollouts and per-token log-probabilities, on
left-padded prompts of different lengths."""

import pytest
import torch

from opsft.objectives import token_logprobs
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.sampling.base import position_ids
from opsft.sampling.hf import HFSampler, generate_tokens
from opsft.sampling.lean import Decoding, lean_tokens, reproduces_generate

PROMPTS = [p.prompt for p in tasks.generate("arith", "test", 12, 1)]
BUDGET = 24


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def eos_biased(bias: float) -> torch.nn.Module:
    """The untrained nano model with ``bias`` added to the <eos> logit (a hook: both decoders see it)."""
    model = build_model("nano", seed=3)
    eos = model.generation_config.eos_token_id
    model.lm_head.register_forward_hook(lambda _m, _i, logits: logits + torch.nn.functional.one_hot(
        torch.tensor(eos), logits.shape[-1]) * bias)
    return model


@torch.no_grad()
def logprobs(model, roll) -> torch.Tensor:
    """(N, L-1) log-probabilities of the rollout's tokens under ``model``, masked to the completion."""
    logits = model(input_ids=roll.input_ids, attention_mask=roll.attention_mask,
                   position_ids=position_ids(roll.attention_mask)).logits  # (N, L, V)
    return token_logprobs(logits, roll.input_ids) * roll.completion_mask  # (N, L-1)


def recorded_logits(model, decode) -> tuple[object, list[torch.Tensor]]:
    """``decode()``'s result and the LM head's output of every forward it ran (prefill and each step)."""
    seen: list[torch.Tensor] = []
    handle = model.lm_head.register_forward_hook(lambda _m, _i, logits: seen.append(logits.clone()))
    try:
        return decode(), seen
    finally:
        handle.remove()


def assert_identical(tok, model, prompts, n, temperature, top_p=1.0, budget=BUDGET, seed=0):
    """Lean and ``generate`` rollouts agree exactly (tokens, masks, texts, log-probs), and so does every logit
    either computed on the way; returns the rollout."""
    assert reproduces_generate(model)
    ref, ref_logits = recorded_logits(model, lambda: HFSampler(tok, reference=True).sample(
        model, prompts, n, temperature, budget, seed, top_p=top_p))
    lean, lean_logits = recorded_logits(model, lambda: HFSampler(tok).sample(
        model, prompts, n, temperature, budget, seed, top_p=top_p))
    assert len(lean_logits) == len(ref_logits)
    assert all(torch.equal(a, b) for a, b in zip(lean_logits, ref_logits, strict=True))
    assert torch.equal(lean.input_ids, ref.input_ids)
    assert torch.equal(lean.attention_mask, ref.attention_mask)
    assert torch.equal(lean.completion_mask, ref.completion_mask)
    assert lean.texts == ref.texts
    assert torch.equal(logprobs(model, lean), logprobs(model, ref))
    return ref


def lengths(roll) -> list[int]:
    """Completion tokens of each row (its <eos> included)."""
    return roll.completion_mask.sum(1).tolist()


def full_length(tok, prompts, budget=BUDGET) -> int:
    """Columns of a rollout that ran to the budget: the longest prompt plus ``budget``."""
    return max(len(tok(p)["input_ids"]) for p in prompts) + budget


def test_prompts_are_left_padded_to_different_lengths(tok):
    assert len({len(tok(p)["input_ids"]) for p in PROMPTS}) > 1


def test_greedy_tokens_are_generates(tok):
    assert_identical(tok, build_model("nano", seed=3), PROMPTS, 1, 0.0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_sampled_tokens_and_logprobs_are_generates_on_the_same_seed(tok, temperature, top_p):
    roll = assert_identical(tok, build_model("micro", seed=0), PROMPTS, 4, temperature, top_p)
    assert roll.input_ids.shape[0] == 4 * len(PROMPTS)


def test_rows_that_reach_the_budget_and_rows_that_stop_early_side_by_side(tok):
    roll = assert_identical(tok, build_model("nano", seed=3), PROMPTS, 4, 1.0, seed=1)
    assert BUDGET in lengths(roll) and min(lengths(roll)) < BUDGET
    assert roll.input_ids.shape[1] == full_length(tok, PROMPTS)


@pytest.mark.parametrize(("temperature", "bias"), [(0.0, 1.2), (1.0, 4.0), (0.7, 3.0)])
def test_decoding_stops_once_every_row_has_emitted_eos(tok, temperature, bias):
    n = 1 if temperature == 0 else 4
    roll = assert_identical(tok, eos_biased(bias), PROMPTS, n, temperature)
    assert roll.input_ids.shape[1] < full_length(tok, PROMPTS)  # stopped before the budget
    assert len(set(lengths(roll))) > 1  # rows finished at different steps: padding after <eos>


def test_identical_with_two_threads(tok):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_identical(tok, build_model("micro", seed=0), PROMPTS, 4, 0.7, top_p=0.9)
    finally:
        torch.set_num_threads(threads)


def test_prompts_without_padding_and_a_one_token_budget(tok):
    same = [PROMPTS[0]] * 3
    assert_identical(tok, build_model("micro", seed=0), same, 4, 1.0, top_p=0.9)
    roll = assert_identical(tok, build_model("micro", seed=0), PROMPTS, 2, 0.7, budget=1)
    assert roll.input_ids.shape[1] == full_length(tok, PROMPTS, budget=1)


@pytest.mark.parametrize(("temperature", "top_p", "bias"),
                         [(0.0, 1.0, 1.2), (1.0, 0.9, 3.0), (0.7, 1.0, 0.0)])
def test_raw_decoded_ids_are_generates_padding_after_eos_included(tok, temperature, top_p, bias):
    model = eos_biased(bias).eval()
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    d = Decoding(1 if temperature == 0 else 3, temperature, top_p, BUDGET, tok.pad_token_id, tok.eos_token_id)
    drawn = []
    for decode in (generate_tokens, lean_tokens):
        torch.manual_seed(7)
        drawn.append(decode(model, enc["input_ids"], enc["attention_mask"], d))  # (P*n, Lp + Lc)
    assert torch.equal(drawn[0], drawn[1])


def test_greedy_with_several_samples_is_refused_as_generate_refuses_it(tok):
    with pytest.raises(ValueError, match="one completion per prompt"):
        HFSampler(tok).sample(build_model("nano", seed=3), PROMPTS, 2, 0.0, BUDGET, 0)


def test_a_generation_config_of_its_own_falls_back_to_generate(tok):
    model = build_model("nano", seed=3)
    model.generation_config.repetition_penalty = 1.3
    assert not reproduces_generate(model)
    ref = HFSampler(tok, reference=True).sample(model, PROMPTS, 2, 1.0, BUDGET, 0)
    roll = HFSampler(tok).sample(model, PROMPTS, 2, 1.0, BUDGET, 0)
    assert torch.equal(roll.input_ids, ref.input_ids)
