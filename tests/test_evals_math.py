"""Math checking (fast path, math-verify pool, timeouts), sample metrics, real benchmark loaders, behaviour."""

import itertools
import json
import math
import time

import pytest

from opsft.evals.behaviour import CASE_SPLIT_CUES, LOGICAL_CUES, behaviour, cue_count, per_thousand_words
from opsft.evals.benchmarks import (
    BOXED_SUFFIX,
    MATH_BENCHMARKS,
    MathProtocol,
    benchmark_mean,
    load_math_benchmark,
    score_math_benchmarks,
)
from opsft.evals.math import (
    are_correct,
    avg_at_k,
    extract_boxed,
    is_correct,
    maj_at_k,
    mean_pass_at_k,
    pass_at_k,
    sample_accuracy_std,
    score_completions,
)


def test_extract_boxed_takes_the_last_box_with_nested_braces():
    assert extract_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert extract_boxed("no box") is None
    assert extract_boxed("\\boxed{unclosed") is None


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("so \\boxed{47}", "47", True),  # integer fast path
        ("\\boxed{-3}", "-3", True),
        ("\\boxed{48}", "47", False),
        ("x \\boxed{0.5}", "\\frac{1}{2}", True),  # math-verify path
        ("3/4", "\\frac{3}{4}", True),
        ("\\boxed{(x+1)^2}", "(x+1)^2", True),  # bare gold needs $...$
        ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", False),
    ],
)
def test_is_correct_matches_math_verify_gold_first(prediction, gold, expected):
    assert is_correct(prediction, gold) is expected


def test_require_boxed_rejects_unanchored_numbers():
    assert are_correct(["the answer is 47"], ["47"]) == [True]
    assert are_correct(["the answer is 47"], ["47"], require_boxed=True) == [False]


def test_pathological_answer_times_out_as_wrong_and_the_pool_recovers():
    start = time.monotonic()
    assert is_correct("\\boxed{9^{9^{9^{9}}}}", "\\frac{1}{2}", timeout=1.0) is False
    assert time.monotonic() - start < 8
    assert is_correct("\\boxed{0.5}", "\\frac{1}{2}")  # a fresh worker took the stuck one's place


def test_mismatched_lengths_are_named():
    with pytest.raises(ValueError, match="2 predictions but 1 golds"):
        are_correct(["1", "2"], ["1"])


def _brute_force_pass_at_k(n, c, k):
    """Share of k-subsets of n samples (c correct) containing a correct one: the definition of pass@k."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (5, 2, 3), (6, 1, 6), (8, 3, 4)])
def test_pass_at_k_equals_its_definition(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_brute_force_pass_at_k(n, c, k))


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_sample_metrics_by_hand():
    correct = [[True, False, False, True], [False, False, False, False], [True, True, True, False]]
    assert avg_at_k(correct) == pytest.approx((2 / 4 + 0 + 3 / 4) / 3)
    assert mean_pass_at_k(correct, 1) == pytest.approx(avg_at_k(correct))
    assert mean_pass_at_k(correct, 4) == pytest.approx(2 / 3)
    # slot accuracies: 2/3, 1/3, 1/3, 1/3 -> mean 5/12
    accs = [2 / 3, 1 / 3, 1 / 3, 1 / 3]
    assert sample_accuracy_std(correct) == pytest.approx(math.sqrt(sum((a - 5 / 12) ** 2 for a in accs) / 4))
    answers = [["1", "2", "2", "1"], ["5", "5", None, "6"], ["3", "3", "3", "4"]]
    # problem 0: tie 1 vs 2 -> first seen "1" (correct); problem 1: "5" wrong; problem 2: "3" correct
    assert maj_at_k(answers, correct) == pytest.approx(2 / 3)


def test_score_completions_summarises_a_matrix():
    completions = [["\\boxed{2}", "\\boxed{3}"], ["\\boxed{7}", "\\boxed{7}"]]
    score, correct = score_completions(completions, ["2", "7"])
    assert correct == [[True, False], [True, True]]
    assert (score.avg, score.pass_k, score.maj, score.n, score.k) == (0.75, 1.0, 1.0, 2, 2)
    with pytest.raises(ValueError, match="same number k"):
        score_completions([["a"], ["b", "c"]], ["1", "2"])


def test_real_benchmarks_load_with_normalised_types():
    for name in MATH_BENCHMARKS:
        items = load_math_benchmark(name)
        assert len(items) == 30
        assert all(isinstance(i.id, str) and isinstance(i.answer, str) and i.problem for i in items)
    assert load_math_benchmark("aime25")[0].answer == "70"  # an int in the file


def test_benchmark_loader_names_file_line_and_key(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": 1, "problem": "p", "answer": "1"}) + "\n" + json.dumps({"id": 2, "problem": "q"}))
    with pytest.raises(ValueError, match=r"bad.jsonl:2: key 'answer'"):
        load_math_benchmark("bad", path)


def test_protocol_scores_each_benchmark_and_their_mean():
    golds = {item.problem + BOXED_SUFFIX: item.answer for n in MATH_BENCHMARKS for item in load_math_benchmark(n)}
    aime24 = {item.problem + BOXED_SUFFIX for item in load_math_benchmark("aime24")}

    def oracle(prompts, k):  # right on aime24, every second sample right elsewhere
        return [[f"\\boxed{{{golds[p]}}}" if p in aime24 or j % 2 == 0 else "\\boxed{0}" for j in range(k)]
                for p in prompts]

    scores = score_math_benchmarks(oracle, MathProtocol(k=2))
    assert scores["aime24"].avg == 1.0 and scores["hmmt25_feb"].avg == 0.5
    assert benchmark_mean(scores) == pytest.approx((1 + 0.5 * 3) / 4)


def test_behaviour_counts_cues_per_thousand_words():
    text = "If x is odd, consider case one; otherwise 3. So 5, therefore \\boxed{5}"
    assert cue_count(text, CASE_SPLIT_CUES) == 4  # if, consider, case, otherwise
    assert cue_count(text, LOGICAL_CUES) == 2  # so, therefore
    assert cue_count("on the other hand", CASE_SPLIT_CUES) == 1
    n_words = 14  # if x is odd consider case one otherwise 3 so 5 therefore boxed 5
    assert per_thousand_words([text], LOGICAL_CUES) == pytest.approx(1000 * 2 / n_words)
    habits = behaviour(["ab", "abcd"])
    assert habits.length == 3 and habits.logical_per_1k == 0.0


def test_a_missing_prediction_is_wrong_and_a_missing_gold_is_named():
    assert is_correct(None, "47") is False
    assert are_correct([None, "\\boxed{47}"], ["47", "47"]) == [False, True]
    with pytest.raises(ValueError, match=r"^gold is None"):
        is_correct("\\boxed{47}", None)
    with pytest.raises(ValueError, match=r"golds\[1\] is None"):
        are_correct(["1", "2"], ["1", None])
