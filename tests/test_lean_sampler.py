"""The lean decode loop samples ``model.generate``'s distribution: greedy tokens are ``generate``'s, and every
step's logits (one prefill per prompt, finished rows dropped) equal those of a full forward of the decoded
sequences to float tolerance, on left-padded prompts of different lengths."""

import pytest
import torch

import opsft.sampling.lean as lean
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.sampling.base import position_ids
from opsft.sampling.hf import HFSampler, generate_tokens
from opsft.sampling.lean import Decoding, lean_decodes, lean_tokens

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


def step_logits(monkeypatch, decode) -> tuple[object, list[torch.Tensor]]:
    """``decode()``'s result and the (A, V) logits of every draw it made (before the warpers), A the rows
    still decoding at that step."""
    seen: list[torch.Tensor] = []
    draw = lean.next_tokens

    def recording(logits, chain, d):
        seen.append(logits.clone())
        return draw(logits, chain, d)

    monkeypatch.setattr(lean, "next_tokens", recording)
    return decode(), seen


@torch.no_grad()
def forward_logits(model, roll) -> torch.Tensor:
    """(N, L, V) float32 logits of a full forward of the rollout's sequences."""
    return model(input_ids=roll.input_ids, attention_mask=roll.attention_mask,
                 position_ids=position_ids(roll.attention_mask)).logits.float()


def assert_same_distribution(monkeypatch, tok, model, prompts, n, temperature, top_p=1.0, budget=BUDGET, seed=0):
    """Every step's logits of the lean loop equal a full forward's at the position that drew the token (the
    rows still decoding, in batch order); greedy tokens are ``generate``'s. Returns the rollout."""
    assert lean_decodes(model)
    roll, seen = step_logits(monkeypatch, lambda: HFSampler(tok).sample(
        model, prompts, n, temperature, budget, seed, top_p=top_p))
    full, prompt_len = forward_logits(model, roll), roll.input_ids.shape[1] - len(seen)
    completion = roll.input_ids[:, prompt_len:]  # (N, Lc)
    for step, logits in enumerate(seen):
        ended = completion[:, :step].eq(tok.eos_token_id).any(1) if step else torch.zeros(len(completion), dtype=bool)
        live = (~ended).nonzero().squeeze(1)  # (A,) rows that drew a token at this step
        expected = full[live, prompt_len + step - 1]  # (A, V)
        torch.testing.assert_close(logits.log_softmax(-1), expected.log_softmax(-1), atol=1e-5, rtol=0)
    if temperature == 0:
        ref = HFSampler(tok, reference=True).sample(model, prompts, n, temperature, budget, seed)
        assert torch.equal(roll.input_ids, ref.input_ids) and roll.texts == ref.texts
    return roll


def lengths(roll) -> list[int]:
    """Completion tokens of each row (its <eos> included)."""
    return roll.completion_mask.sum(1).tolist()


def full_length(tok, prompts, budget=BUDGET) -> int:
    """Columns of a rollout that ran to the budget: the longest prompt plus ``budget``."""
    return max(len(tok(p)["input_ids"]) for p in prompts) + budget


def test_prompts_are_left_padded_to_different_lengths(tok):
    assert len({len(tok(p)["input_ids"]) for p in PROMPTS}) > 1


def test_greedy_tokens_are_generates(monkeypatch, tok):
    assert_same_distribution(monkeypatch, tok, build_model("nano", seed=3), PROMPTS, 1, 0.0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_sampled_logprobs_are_a_full_forwards_and_samples_of_a_prompt_are_drawn_apart(monkeypatch, tok,
                                                                                      temperature, top_p):
    roll = assert_same_distribution(monkeypatch, tok, build_model("micro", seed=0), PROMPTS, 4, temperature, top_p)
    assert roll.input_ids.shape[0] == 4 * len(PROMPTS)
    groups = roll.input_ids.view(len(PROMPTS), 4, -1)  # (P, n, L): one prefill, then independent draws
    assert any(len({tuple(row.tolist()) for row in group}) > 1 for group in groups)


def test_the_same_seed_draws_the_same_rollout(tok):
    model = build_model("micro", seed=0)
    first, again = (HFSampler(tok).sample(model, PROMPTS, 4, 1.0, BUDGET, 5) for _ in range(2))
    assert torch.equal(first.input_ids, again.input_ids)


def test_rows_that_reach_the_budget_and_rows_that_stop_early_side_by_side(monkeypatch, tok):
    roll = assert_same_distribution(monkeypatch, tok, build_model("nano", seed=3), PROMPTS, 4, 1.0, seed=1)
    assert BUDGET in lengths(roll) and min(lengths(roll)) < BUDGET
    assert roll.input_ids.shape[1] == full_length(tok, PROMPTS)


@pytest.mark.parametrize(("temperature", "bias"), [(0.0, 1.2), (1.0, 4.0), (0.7, 3.0)])
def test_decoding_stops_once_every_row_has_emitted_eos(monkeypatch, tok, temperature, bias):
    n = 1 if temperature == 0 else 4
    roll = assert_same_distribution(monkeypatch, tok, eos_biased(bias), PROMPTS, n, temperature)
    assert roll.input_ids.shape[1] < full_length(tok, PROMPTS)  # stopped before the budget
    assert len(set(lengths(roll))) > 1  # rows finished at different steps: padding after <eos>


def test_same_distribution_with_two_threads(monkeypatch, tok):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_same_distribution(monkeypatch, tok, build_model("micro", seed=0), PROMPTS, 4, 0.7, top_p=0.9)
    finally:
        torch.set_num_threads(threads)


def test_prompts_without_padding_and_a_one_token_budget(monkeypatch, tok):
    same = [PROMPTS[0]] * 3
    assert_same_distribution(monkeypatch, tok, build_model("micro", seed=0), same, 4, 1.0, top_p=0.9)
    roll = assert_same_distribution(monkeypatch, tok, build_model("micro", seed=0), PROMPTS, 2, 0.7, budget=1)
    assert roll.input_ids.shape[1] == full_length(tok, PROMPTS, budget=1)


@pytest.mark.parametrize(("temperature", "top_p", "bias"),
                         [(0.0, 1.0, 1.2), (1.0, 0.9, 3.0), (0.7, 1.0, 0.0)])
def test_raw_decoded_ids_are_laid_out_as_generates(tok, temperature, top_p, bias):
    """Prompt copies adjacent, ``pad`` after a row's <eos>, as many columns as the longest row needs; greedy:
    ``generate``'s ids exactly."""
    model = eos_biased(bias).eval()
    enc = tok(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    n = 1 if temperature == 0 else 3
    d = Decoding(n, temperature, top_p, BUDGET, tok.pad_token_id, tok.eos_token_id)
    torch.manual_seed(7)
    ids = lean_tokens(model, enc["input_ids"], enc["attention_mask"], d)  # (P*n, Lp + Lc)
    prompt_len = enc["input_ids"].shape[1]
    assert torch.equal(ids[:, :prompt_len], enc["input_ids"].repeat_interleave(n, dim=0))
    completion = ids[:, prompt_len:]  # (N, Lc)
    is_eos = completion.eq(tok.eos_token_id)
    after = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # strictly after the first <eos>
    assert bool(completion[after].eq(tok.pad_token_id).all())
    ended = is_eos.any(1)
    assert completion.shape[1] == BUDGET or bool(ended.all())
    assert completion.shape[1] == int(torch.where(ended, is_eos.float().argmax(1) + 1, completion.shape[1]).max())
    if temperature == 0:
        torch.manual_seed(7)
        assert torch.equal(ids, generate_tokens(model, enc["input_ids"], enc["attention_mask"], d))


def test_greedy_with_several_samples_is_refused_as_generate_refuses_it(tok):
    with pytest.raises(ValueError, match="one completion per prompt"):
        HFSampler(tok).sample(build_model("nano", seed=3), PROMPTS, 2, 0.0, BUDGET, 0)


def test_a_generation_config_of_its_own_falls_back_to_generate(tok):
    model = build_model("nano", seed=3)
    model.generation_config.repetition_penalty = 1.3
    assert not lean_decodes(model)
    ref = HFSampler(tok, reference=True).sample(model, PROMPTS, 2, 1.0, BUDGET, 0)
    roll = HFSampler(tok).sample(model, PROMPTS, 2, 1.0, BUDGET, 0)
    assert torch.equal(roll.input_ids, ref.input_ids)
