"""The claims' evaluator accuracies (``opsft.claims.measure``) carry their per-problem scores, the evaluators faked."""

import statistics

import pytest
import torch

from opsft.claims import measure
from opsft.evals.lm_eval_adapter import LocalTask
from opsft.organism import tasks


def _fake_held_out(per_doc: dict[str, list[float]]):
    """A stand-in for ``held_out_output``: lm-eval's dict for the held-out families with per-document scores
    ``per_doc`` (logged out of order, as lm-eval may), each task's reported metric their mean."""
    def held_out_output(model, tokenizer, suite, folder, log_samples=False):
        assert suite.held_out == tasks.HELD_OUT and log_samples
        local = [LocalTask(f"organism_{f}", "multiple_choice" if f == "mc" else "math_verify",
                           tuple({} for _ in per_doc[f])) for f in suite.held_out]
        metric = {t.name: "acc,none" if t.template == "multiple_choice" else "avg_at_k,all_samples" for t in local}
        family = {t.name: t.name.removeprefix("organism_") for t in local}
        results = {t.name: {metric[t.name]: statistics.fmean(per_doc[family[t.name]])} for t in local}
        samples = {t.name: [{"doc_id": i, metric[t.name].split(",")[0]: x}
                            for i, x in reversed(list(enumerate(per_doc[family[t.name]])))] for t in local}
        return local, {"results": results, "samples": samples}
    return held_out_output


def test_ood_accuracies_carry_lm_evals_per_document_scores_and_a_family_mean(monkeypatch):
    per_doc = {f: [1.0, 0.0, 1.0, 0.0] for f in tasks.HELD_OUT} | {"times": [1.0, 1.0]}  # times: 2 problems
    monkeypatch.setattr(measure, "held_out_output", _fake_held_out(per_doc))
    out = measure.ood_accuracies(torch.nn.Linear(1, 1), None, {"eval_n": 4})
    assert out["mc"].per_problem == (100.0, 0.0, 100.0, 0.0) and out["times"].per_problem == (100.0, 100.0)
    # five families at 50% and one at 100%, each counted once however many problems it has
    assert float(out["ood_mean"]) == pytest.approx((5 * 50 + 100) / 6)
    assert statistics.fmean(out["ood_mean"].per_problem) == pytest.approx(float(out["ood_mean"]))


def test_ood_accuracies_refuse_logged_samples_that_are_not_the_reported_accuracy(monkeypatch):
    monkeypatch.setattr(measure, "held_out_output", _fake_held_out({f: [1.0, 1.0] for f in tasks.HELD_OUT}))
    monkeypatch.setattr(measure, "logged_samples", lambda out, task, n: [{"avg_at_k": 0.0, "acc": 0.0}] * n)
    with pytest.raises(RuntimeError, match=f"organism_{tasks.HELD_OUT[0]}: lm-eval's .* is not the mean"):
        measure.ood_accuracies(torch.nn.Linear(1, 1), None, {"eval_n": 2})


def test_code_accuracies_score_each_problem_by_its_mean_over_samples(monkeypatch):
    base = [[True, True], [True, False], [False, False]]
    plus = [[True, False], [False, False], [False, False]]
    monkeypatch.setattr(measure, "code_family_verdicts", lambda model, tok, family, suite, folder: (base, plus))
    monkeypatch.setattr(measure, "correctness", lambda model, tok, problems: torch.tensor([[1.0], [0.0]]))
    out = measure.code_accuracies(torch.nn.Linear(1, 1), None, {"eval_n": 3}, n_train=2)
    assert out["in_domain"].per_problem == (50.0, 0.0, 0.0) and float(out["in_domain"]) == pytest.approx(100 / 6)
    assert out["base_tests"].per_problem == (100.0, 50.0, 0.0) and float(out["base_tests"]) == pytest.approx(50.0)
    assert out["train_set"].per_problem == (100.0, 0.0) and float(out["train_set"]) == 50.0
