"""The scorer of record (lm-eval, ``opsft.evals.organism_scores.lm_eval_scored``) against the in-house greedy
scorer (``opsft.organism.accuracy.correctness``: the training sampler and ``tasks.is_correct``), problem by
problem, on every family the claims score greedily; and one verdict per answer on both paths.

The nano models rarely solve a problem (1-3%), so every other problem's gold is replaced by the model's own
boxed answer: both paths must then generate the same completion and agree on a draw about half right. On the
claims' own models, $OPSFT_SCORING_CROSS_CHECK makes every scoring of record run this comparison
(``calibrate.score_problems``); the ``ci`` claims run of ``nox -s tests`` sets it.
"""

import re
from dataclasses import replace

import pytest
from lm_eval.api.model import LM
from lm_eval.models.utils import handle_stop_sequences, postprocess_generated_text

from opsft import calibrate
from opsft.evals.generation import generate
from opsft.evals.lm_eval_adapter import hub_offline, logged_samples, write_local_tasks
from opsft.evals.organism_scores import GREEDY, disagreements, lm_eval_scored, set_task
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS

SIZE = 128
SCALE = {"eval_n": SIZE, "n_problems": SIZE}


def claim_draws() -> dict[str, dict]:
    """Every set the claims score by greedy generation: ``calibrate.scoring_draw``'s (arith test and train, the
    held-out families of ``calibrate.HELD_OUT``) and C10's other generated held-out families (``mc`` is
    scored by log-likelihood: no greedy completion)."""
    extra = [f for f in tasks.HELD_OUT if f not in calibrate.HELD_OUT and f != "mc"]
    draw = {"split": "test", "seed": calibrate.TEST_DRAW_SEED, "n_at_most": SIZE}
    return calibrate.scoring_draw(SCALE) | {f: {"family": f, **draw} for f in extra}


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


@pytest.mark.parametrize("which", ["base", "teacher"])
def test_lm_eval_scores_every_problem_as_the_in_house_scorer_does(nano, which):
    model, tok = getattr(nano, which).float(), nano.tokenizer
    sets = {}
    for key, draw in claim_draws().items():
        problems = calibrate.draw_problems(draw)
        texts = [group[0] for group in generate(model, tok, [p.prompt for p in problems], GREEDY)]
        sets[key] = with_own_answers(problems, texts)
    scored = lm_eval_scored(model, tok, sets)  # one run, every set: lm-eval batches them together
    for key, problems in sets.items():
        right = sum(scored[key].correct)
        assert 0.25 <= right / len(problems) <= 0.75, f"{which} {key}: {right}/{len(problems)} right, a trivial mix"
    assert disagreements(model, tok, sets, scored) == []


def test_lm_eval_spends_the_same_token_budget(nano):
    """A random-init model never stops before the budget: the completions are equal only if both paths stop
    at ``MAX_NEW_TOKENS``."""
    from opsft.organism.models import build_model

    model, tok = build_model("nano", seed=0).float(), nano.tokenizer
    problems = calibrate.draw_problems(calibrate.scoring_draw(SCALE)["in_domain"])
    texts = [group[0] for group in generate(model, tok, [p.prompt for p in problems], GREEDY)]
    lengths = {len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts}
    assert lengths == {MAX_NEW_TOKENS}
    assert list(lm_eval_scored(model, tok, {"in_domain": problems})["in_domain"].completions) == texts


# (completion, gold, verdict): the organism's rule is the gold string in the last \boxed{}; its golds are
# canonical integers, so another spelling of the number or an expression for it is wrong.
FORMS = [
    ("1+2=3;\\boxed{3}", "3", True),
    ("\\boxed{ 3 }", "3", True),
    ("\\boxed{4};\\boxed{3}", "3", True),
    ("\\boxed{-3}", "-3", True),
    ("3", "3", False),
    ("\\boxed{3;}", "3", False),
    ("\\boxed{3", "3", False),
    ("\\boxed{{3}}", "3", False),
    ("\\boxed{03}", "3", False),
    ("\\boxed{+3}", "3", False),
    ("\\boxed{3.0}", "3", False),
    ("\\boxed{-0}", "0", False),
    ("\\boxed{1+2}", "3", False),
    ("\\boxed{x=3}", "3", False),
    ("\\boxed{\\frac{6}{2}}", "3", False),
    # the completion runs to <eos>: a newline ends nothing, the last box counts
    ("\\boxed{3}\n\\boxed{4}", "3", False),
    ("\\boxed{4}\n\\boxed{3}", "3", True),
    ("\\boxed{3}\n", "3", True),
]


class Scripted(LM):
    """A stand-in for HFLM that "generates" a fixed completion per prompt, ended by <eos>, and post-processes
    it as HFLM does (cut at the request's stop sequences and the end-of-text string)."""

    def __init__(self, completions: dict[str, str]):
        super().__init__()
        self.completions = completions

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for request in requests:
            context, kwargs = request.args
            stop = handle_stop_sequences(kwargs.get("until"), eos="<eos>")
            out.append(postprocess_generated_text(self.completions[context] + "<eos>", stop, None))
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError("generation tasks only")

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError("generation tasks only")


@pytest.fixture(scope="module")
def lm_eval_verdicts(tmp_path_factory):
    """lm-eval's verdict on each of FORMS: the scorer of record's task (``set_task``, rendered with ``GREEDY``)
    run by lm-eval on a model that writes the form as its completion."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    problems = [tasks.Problem(prompt=f"{i}:1+2=", answer=gold, family="arith", solution="")
                for i, (_, gold, _) in enumerate(FORMS)]
    task = set_task("forms", problems)
    folder = write_local_tasks([task], tmp_path_factory.mktemp("forms"), GREEDY)
    model = Scripted({p.prompt: completion for p, (completion, _, _) in zip(problems, FORMS, strict=True)})
    with hub_offline():
        out = lm_eval.simple_evaluate(model=model, tasks=[task.name], log_samples=True,
                                      task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    return [(int(s["avg_at_k"]), s["filtered_resps"][0][0]) for s in logged_samples(out, task.name, len(FORMS))]


@pytest.mark.parametrize(("index", "form"), list(enumerate(FORMS)))
def test_both_paths_give_an_answer_one_verdict(lm_eval_verdicts, index, form):
    completion, gold, verdict = form
    problem = tasks.Problem(prompt="1+2=", answer=gold, family="arith", solution="")
    assert tasks.is_correct(problem, completion) is verdict
    assert lm_eval_verdicts[index] == (int(verdict), completion), "lm-eval judged another completion or verdict"


def test_a_cross_checked_scoring_names_each_problem_the_two_paths_score_differently(monkeypatch):
    import torch

    from opsft.evals import organism_scores

    def lm_eval(model, tokenizer, sets):
        return {key: organism_scores.Scored((1,) * len(ps), ("\\boxed{1}",) * len(ps)) for key, ps in sets.items()}

    def in_house(model, tokenizer, problems):  # differs on the second problem of every set
        return organism_scores.Scored((1, 0), ("\\boxed{1}", "\\boxed{2}"))

    monkeypatch.setattr(calibrate, "lm_eval_scored", lm_eval)
    monkeypatch.setattr(organism_scores, "in_house_scored", in_house)
    monkeypatch.delenv(organism_scores.CROSS_CHECK_ENV, raising=False)
    scale = {"eval_n": 2, "n_problems": 2}
    assert calibrate.score_problems(torch.nn.Linear(1, 1), None, scale)["in_domain"].tolist() == [1.0, 1.0]
    monkeypatch.setenv(organism_scores.CROSS_CHECK_ENV, "1")
    second = calibrate.draw_problems(calibrate.scoring_draw(scale)["in_domain"])[1]
    with pytest.raises(RuntimeError, match=re.escape(
            f"5 problem(s) scored differently by lm-eval and the in-house scorer:\nin_domain[1] {second.prompt!r} "
            f"gold {second.answer!r}: in-house 0 '\\\\boxed{{2}}', lm-eval 1 '\\\\boxed{{1}}'\ntrain_set[1]")):
        calibrate.score_problems(torch.nn.Linear(1, 1), None, scale)
