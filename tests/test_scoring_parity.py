"""The organism's greedy scorer (``opsft.organism.accuracy.correctness``: the HF-style sampler and
``tasks.is_correct``, what the claims' accuracies come from) against lm-eval on the family's local task
(``opsft.evals.parity.lm_eval_scored``), problem by problem, on every family the claims score greedily.

The nano models rarely solve a problem (1-3%), so every other problem's gold is replaced by the model's own
boxed answer: both paths must then generate the same completion and agree on a draw about half right. The
verifiers agree on what the models write, not by construction: ``test_where_the_two_verifiers_differ`` pins
the completions they would score differently.
"""

import re
from dataclasses import replace

import pytest

from opsft import calibrate
from opsft.evals.generation import generate
from opsft.evals.lm_eval_adapter import generation_kwargs
from opsft.evals.math import are_correct
from opsft.evals.parity import GREEDY, lm_eval_scored
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS, correctness

SIZE = 128
SCALE = {"eval_n": SIZE, "n_problems": SIZE}


def claim_draws() -> dict[str, dict]:
    """Every set the claims score by greedy generation: ``calibrate.scoring_draw``'s (arith test and train, the
    held-out families of ``calibrate.HELD_OUT``) and C10's other generated held-out families (``mc`` is
    scored by log-likelihood: no greedy completion)."""
    extra = [f for f in tasks.HELD_OUT if f not in calibrate.HELD_OUT and f != "mc"]
    draw = {"split": "test", "seed": calibrate.TEST_DRAW_SEED, "n_at_most": SIZE}
    return calibrate.scoring_draw(SCALE) | {f: {"family": f, **draw} for f in extra}


DRAWS = claim_draws()


def draw_problems(draw: dict) -> list[tasks.Problem]:
    """The problems of one draw, as ``calibrate.score_problems`` generates them."""
    return tasks.generate(draw["family"], draw["split"], draw.get("n", draw.get("n_at_most")), draw["seed"],
                          at_most="n_at_most" in draw)


def with_own_answers(problems: list[tasks.Problem], completions: list[str]) -> list[tasks.Problem]:
    """Every other problem with its gold replaced by the boxed answer of its completion, when that is a
    canonical integer (as every real gold is): a draw the model gets about half right."""
    out = []
    for index, (problem, completion) in enumerate(zip(problems, completions, strict=True)):
        own = tasks.boxed_answer(completion)
        canonical = own is not None and re.fullmatch(r"-?(0|[1-9]\d*)", own) is not None
        out.append(replace(problem, answer=own) if index % 2 == 0 and canonical else problem)
    return out


@pytest.fixture(scope="module")
def nano(shared_cache):
    """The nano organism (built once into the session's shared cache)."""
    from opsft.pretraining import build_organism

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPSFT_CACHE", str(shared_cache))
        return build_organism("nano")


@pytest.mark.parametrize("key", list(DRAWS))
@pytest.mark.parametrize("which", ["base", "teacher"])
def test_lm_eval_scores_every_problem_as_the_organism_scorer_does(nano, which, key):
    model, tok = getattr(nano, which).float(), nano.tokenizer
    problems = draw_problems(DRAWS[key])
    texts = [group[0] for group in generate(model, tok, [p.prompt for p in problems], GREEDY)]
    problems = with_own_answers(problems, texts)
    ours = correctness(model, tok, problems)[:, 0].int().tolist()
    theirs = lm_eval_scored(model, tok, problems)
    assert 0.25 <= sum(ours) / len(ours) <= 0.75, f"{which} {key}: {sum(ours)}/{len(ours)} right, a trivial mix"
    differ = [(i, problems[i].prompt, problems[i].answer, texts[i], theirs.completions[i])
              for i in range(len(problems)) if ours[i] != theirs.correct[i] or texts[i] != theirs.completions[i]]
    assert not differ, f"{which} {key}: {len(differ)} problems differ (index, prompt, gold, ours, lm-eval): {differ}"


def test_lm_eval_spends_the_same_token_budget(nano):
    """A random-init model never stops before the budget: the completions are equal only if both paths stop
    at ``MAX_NEW_TOKENS``."""
    from opsft.organism.models import build_model

    model, tok = build_model("nano", seed=0).float(), nano.tokenizer
    problems = draw_problems(DRAWS["in_domain"])
    texts = [group[0] for group in generate(model, tok, [p.prompt for p in problems], GREEDY)]
    lengths = {len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts}
    assert lengths == {MAX_NEW_TOKENS}
    assert list(lm_eval_scored(model, tok, problems).completions) == texts


def lm_eval_verdict(completion: str, gold: str) -> bool:
    """lm-eval's verdict on a greedy completion in a ``math_verify`` task: cut at its stop sequences
    (``generation_kwargs``), then math-verify with a ``\\boxed{}`` required (``utils.process_math_verify``)."""
    for stop in generation_kwargs(GREEDY)["until"]:
        completion = completion.split(stop, 1)[0]
    return are_correct([completion], [gold], require_boxed=True)[0]


@pytest.mark.parametrize(("completion", "gold", "organism", "lm_eval"), [
    ("1+2=3;\\boxed{3}", "3", True, True),
    ("\\boxed{ 3 }", "3", True, True),
    ("\\boxed{4};\\boxed{3}", "3", True, True),
    ("\\boxed{-3}", "-3", True, True),
    ("3", "3", False, False),
    ("\\boxed{3;}", "3", False, False),
    # math-verify accepts another spelling of the same number, the organism's verifier only the gold string:
    ("\\boxed{03}", "3", False, True),
    ("\\boxed{+3}", "3", False, True),
    ("\\boxed{3.0}", "3", False, True),
    ("\\boxed{-0}", "0", False, True),
    ("\\boxed{1+2}", "3", False, True),
    ("\\boxed{x=3}", "3", False, True),
    # lm-eval stops at a newline, the organism's greedy loop only at <eos>:
    ("\\boxed{3}\n\\boxed{4}", "3", False, True),
])
def test_where_the_two_verifiers_differ(completion, gold, organism, lm_eval):
    problem = tasks.Problem(prompt="1+2=", answer=gold, family="arith", solution="")
    assert (tasks.is_correct(problem, completion), lm_eval_verdict(completion, gold)) == (organism, lm_eval)
