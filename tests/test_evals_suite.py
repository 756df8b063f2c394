"""The one entry point: a tidy frame over the organism's whole suite, at a tiny size."""

import pytest

from opsft.evals.generation import Sampling
from opsft.evals.suite import COLUMNS, SUITES, Suite, evaluate, family_test_problems
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer


@pytest.fixture(autouse=True)
def _private_caches(tmp_path, monkeypatch):
    for var in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))


def test_evaluate_returns_a_tidy_frame_over_every_family():
    suite = Suite(n=3, sampling=Sampling(k=2, temperature=1.0, max_new_tokens=6))
    frame = evaluate(build_model("nano", seed=1), build_tokenizer(), suite)
    assert tuple(frame.columns) == COLUMNS
    expected_tasks = {"arith", "arith_alt", "code", *(f"organism_{f}" for f in tasks.HELD_OUT)}
    assert set(frame["task"]) == expected_tasks
    assert frame["value"].between(0, float("inf")).all()
    assert set(frame.loc[frame.task == "arith", "metric"]) >= {"avg_at_k", "pass_at_k", "maj_at_k", "accuracy_std",
                                                              "response_length", "logical_per_1k_words"}
    assert (frame.loc[frame.task == "arith", "k"] == 2).all()


def test_unknown_suite_is_named():
    with pytest.raises(KeyError, match="huge"):
        evaluate(None, None, "huge")
    assert {"smoke", "ci", "full"} <= set(SUITES)


def test_small_families_give_all_their_test_problems():
    times = family_test_problems("times", 1000, seed=0)
    assert 0 < len(times) < 81 and len({p.prompt for p in times}) == len(times)
