"""Coverage of the verdicts' intervals under the two-level (seeds x test problems) model they are built for, and
the version-2 and version-3 intervals on closed cases (``opsft.claims.stats``).

The Gaussian model is ``D[s, p] = mu + A_s + B_p + E_sp``: a paired accuracy difference (points) of seed ``s``
on test problem ``p``, every seed scored on one shared draw of ``m`` problems. Its scales are the measured ones:
``SEED_SD`` is the spread over seeds of the per-seed paired differences at `regime` (C02's opsft - sft,
grpo - sft and sft - base: 3.5, 3.8, 3.8 points over 3 seeds, run .claims/regime/0003_regime.json); a pass/fail
difference per problem is -100, 0 or +100, and with the arms disagreeing on about a quarter of the problems its
sd is about 50 points, split here between a problem effect shared by the seeds (``PROBLEM_SD``) and a
seed-by-problem interaction (``INTERACTION_SD``).

Version 3's floor is a Bernoulli variance, so it is also checked on pass/fail scores (``PassFail``): each arm
passes a problem with a logit-normal probability (arm effect, seed effect, problem difficulty, arm-by-problem
effect). The default scales give what `regime` measured: accuracies near 55%, arms disagreeing on about a
quarter of the problems, per-seed differences spread by about 3.5 points over seeds.
"""

import functools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats as scipy_stats
from scipy.special import expit, logit

from opsft.claims.registry import Rule, gt, lt, within
from opsft.claims.stats import (
    FLOORED_LABEL,
    SEED_T_LABEL,
    T_LABEL,
    Estimate,
    Verdict,
    bootstrap_mean,
    floored_interval,
    t_interval,
    two_level_interval,
    verdict_of,
)

SEED_SD, PROBLEM_SD, INTERACTION_SD = 3.7, 30.0, 40.0
# Student-t 97.5% quantiles in closed form: df 1 is Cauchy, tan(pi (p - 1/2)); df 2 is (2p - 1) / sqrt(2p(1 - p)).
T1 = math.tan(math.pi * 0.475)
T2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)
TRIALS = 1000
TRUE_MEAN = 2.0
# Pass/fail simulations: experiments per case (Monte Carlo sd of a 95% coverage 0.56 points), cells drawn at once.
PASS_FAIL_TRIALS = 1500
CHUNK_CELLS = 2_000_000
HERMITE_NODES, HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def simulate(rng: np.random.Generator, seeds: int, problems: int) -> np.ndarray:
    """One draw of the two-way model: an (seeds, problems) array of per-problem paired differences."""
    return (TRUE_MEAN + rng.normal(0, SEED_SD, (seeds, 1)) + rng.normal(0, PROBLEM_SD, (1, problems))
            + rng.normal(0, INTERACTION_SD, (seeds, problems)))


def coverage(method, seeds: int, problems: int) -> float:
    """Share of ``TRIALS`` simulated experiments whose interval from ``method`` holds ``TRUE_MEAN``."""
    rng = np.random.default_rng(1234 + seeds)
    hits = 0
    for _ in range(TRIALS):
        estimate = method(simulate(rng, seeds, problems))
        hits += estimate.low <= TRUE_MEAN <= estimate.high
    return hits / TRIALS


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("problems", [200, 1000])
@pytest.mark.parametrize("method", [two_level_interval, floored_interval])
def test_two_level_intervals_cover_the_gaussian_model_at_least_93_percent(method, seeds, problems):
    covered = coverage(method, seeds, problems)
    print(f"{method.__name__}, Gaussian two-way model, {seeds} seeds x {problems} problems: coverage {covered:.1%}")
    assert covered >= 0.93


@pytest.mark.parametrize("seeds", [3, 5])
def test_version_1_percentile_bootstrap_over_seeds_undercovers(seeds):
    # what version 1 did: the bootstrap of the per-seed means, the test draw's sampling error left out
    covered = coverage(lambda d: bootstrap_mean(d.mean(axis=1), resamples=2000), seeds, 200)
    assert covered < 0.85


def test_t_interval_closed_form():
    # mean 2, s = 1, n = 3: half-width t(0.975, 2) / sqrt(3)
    estimate = t_interval([1.0, 2.0, 3.0])
    assert estimate.mean == 2.0 and estimate.method == SEED_T_LABEL
    assert estimate.high - 2.0 == pytest.approx(T2 / math.sqrt(3), rel=1e-10)
    one = t_interval([5.0])
    assert one.mean == 5.0 and math.isnan(one.low) and verdict_of(gt("a.x"), one) is Verdict.INCONCLUSIVE
    assert math.isnan(t_interval([1.0, math.nan]).mean)
    with pytest.raises(ValueError, match="at least one value"):
        t_interval([])


def test_two_level_interval_closed_form():
    # seed means 1 and 3 (s2 = 2, /n = 1), problem means 1.5 and 2.5 (s2 = 0.5, /m = 0.25): V = 1.25; both terms
    # have 1 degree of freedom, so Cochran-Cox's q is t(0.975, 1)
    d = np.array([[0.0, 2.0], [3.0, 3.0]])
    estimate = two_level_interval(d)
    assert estimate.mean == 2.0 and (estimate.n, estimate.problems, estimate.method) == (2, 2, T_LABEL)
    assert estimate.high - 2.0 == pytest.approx(T1 * math.sqrt(1.25), rel=1e-10)
    # 3 seeds, 3 problems: seed means 0, 1, 2 (v_seed = 1/3), problem means 0, 1, 2 (v_problem = 1/3): q is the
    # mean of t(0.975, 2) and t(0.975, 2)
    wide = two_level_interval(np.add.outer(np.arange(3.0), np.arange(3.0)))
    assert wide.high - wide.mean == pytest.approx(T2 * math.sqrt(2 / 3), rel=1e-10)
    assert two_level_interval(d, center=2.5).mean == 2.5
    same = two_level_interval(np.full((3, 4), 7.0))
    assert (same.low, same.high) == (7.0, 7.0)
    with pytest.raises(ValueError, match="seeds, problems"):
        two_level_interval(np.zeros(3))


def test_nan_is_undefined_not_inconclusive():
    estimate = two_level_interval(np.array([[1.0, math.nan], [0.0, 1.0]]))
    assert verdict_of(gt("a.x"), estimate) is Verdict.UNDEFINED
    assert verdict_of(within("a.x", None, 1.0), t_interval([0.1, math.nan, 0.2])) is Verdict.UNDEFINED


@dataclass(frozen=True)
class PassFail:
    """Pass/fail scores of one or two arms: arm ``k`` of seed ``s`` passes problem ``p`` with probability
    ``expit(logits[k] + seed_sd Z_ks + problem_sd Z_p + arm_problem_sd Z_kp)``, the ``Z`` independent standard
    normals. A cell is ``D = 100 (y_a - y_b)`` in {-100, 0, 100} for two arms, ``D = 100 y_a`` for one."""

    logits: tuple[float, ...]
    seed_sd: float = 0.3
    problem_sd: float = 3.0
    arm_problem_sd: float = 1.0

    def draw(self, rng: np.random.Generator, trials: int, seeds: int, problems: int) -> np.ndarray:
        """``trials`` independent experiments: a (trials, seeds, problems) array of cells ``D``."""
        arms = len(self.logits)
        logits = (np.reshape(self.logits, (1, arms, 1, 1)) + rng.normal(0, self.seed_sd, (trials, arms, seeds, 1))
                  + rng.normal(0, self.problem_sd, (trials, 1, 1, problems))
                  + rng.normal(0, self.arm_problem_sd, (trials, arms, 1, problems)))
        passed = 100.0 * (rng.random(logits.shape) < expit(logits))
        return passed[:, 0] - passed[:, 1] if arms == 2 else passed[:, 0]

    @property
    def mean(self) -> float:
        """The target, ``E[D]`` over the seed and problem populations: ``100 E expit(logits[k] + sigma Z)``
        (``sigma^2`` the three variances' sum) by 80-node Gauss-Hermite quadrature, arm a's minus arm b's."""
        sigma = math.hypot(self.seed_sd, self.problem_sd, self.arm_problem_sd)
        means = [100 * float(HERMITE_WEIGHTS @ expit(x + sigma * HERMITE_NODES)) / math.sqrt(2 * math.pi)
                 for x in self.logits]
        return means[0] - means[1] if len(means) == 2 else means[0]


# At `regime`'s scales: a difference of 3.3 points, two arms with equal pass rates, one accuracy (53%).
PASS_FAIL = {"difference": PassFail((0.6, 0.3)), "null difference": PassFail((0.3, 0.3)),
             "accuracy": PassFail((0.3,))}
# Pass rates of 1-3% per problem (logit sd 0.5 around 2%, or 1% and 3%), where most experiments see no pass.
TINY = {"accuracy 1%": PassFail((logit(0.01),), 0.3, 0.5, 0.0), "accuracy 3%": PassFail((logit(0.03),), 0.3, 0.5, 0.0),
        "difference 3% - 1%": PassFail((logit(0.03), logit(0.01)), 0.3, 0.5, 0.3),
        "null difference 2%": PassFail((logit(0.02), logit(0.02)), 0.3, 0.5, 0.3)}
MODELS = {**PASS_FAIL, **TINY}


@dataclass(frozen=True)
class Simulated:
    """``floored_interval`` of each simulated experiment, and the share of experiments whose cells were all equal
    (zero observed variance: version 2 gave them a zero-width interval)."""

    estimates: tuple[Estimate, ...]
    flat: float

    def share(self, event) -> float:
        """The share of the experiments whose estimate satisfies ``event(estimate)``."""
        return sum(bool(event(e)) for e in self.estimates) / len(self.estimates)

    def coverage(self, truth: float, label: str) -> float:
        """The share of intervals holding ``truth``, printed under ``label`` with the one-sided misses."""
        covered = self.share(lambda e: e.low <= truth <= e.high)
        print(f"floored_interval, pass/fail {label} (true mean {truth:.3f}): coverage {covered:.1%}, interval "
              f"above the truth {self.share(lambda e: e.low > truth):.1%}, below "
              f"{self.share(lambda e: e.high < truth):.1%}; zero observed variance in {self.flat:.1%}")
        return covered


@functools.cache
def simulated(model: PassFail, seeds: int, problems: int) -> Simulated:
    """``PASS_FAIL_TRIALS`` experiments drawn from ``model`` (a seeded stream per design; at most
    ``CHUNK_CELLS`` cells drawn at once)."""
    rng = np.random.default_rng([seeds, problems])
    chunk = max(1, CHUNK_CELLS // (len(model.logits) * seeds * problems))
    draws = [d for start in range(0, PASS_FAIL_TRIALS, chunk)
             for d in model.draw(rng, min(chunk, PASS_FAIL_TRIALS - start), seeds, problems)]
    paired = len(model.logits) == 2  # a difference of two arms, as evaluate passes it
    return Simulated(tuple(floored_interval(d, paired=paired) for d in draws),
                     float(np.mean([np.ptp(d) == 0 for d in draws])))


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("problems", [200, 1000])
@pytest.mark.parametrize("name", list(PASS_FAIL))
def test_floored_interval_covers_pass_fail_scores(name, seeds, problems):
    model = PASS_FAIL[name]
    assert simulated(model, seeds, problems).coverage(model.mean, f"{name}, {seeds} x {problems}") >= 0.93


def boundary_rules(truth: float) -> list[Rule]:
    """Rules whose boundary is the true mean ``truth``: ``> truth``, ``< truth`` and, away from 0,
    ``|x| <= |truth|``; each is false (its boundary case), so a REPRODUCED verdict is an error."""
    return [gt("a.x", boundary=truth), lt("a.x", boundary=truth)] + ([within("a.x", None, abs(truth))] if truth else [])


@pytest.mark.parametrize(("name", "seeds", "problems"),
                         [(name, seeds, problems) for name in PASS_FAIL for seeds in (3, 5) for problems in (200, 1000)]
                         + [(name, seeds, problems) for name in TINY for seeds in (2, 3) for problems in (16, 64)])
def test_floored_interval_reproduces_a_rule_at_its_boundary_at_most_4_percent_of_the_time(name, seeds, problems):
    # a 95% interval puts the truth below its low end 2.5% of the time: Monte Carlo sd 0.4 points
    model = MODELS[name]
    runs = simulated(model, seeds, problems)
    for rule in boundary_rules(model.mean):
        wrong = runs.share(lambda e, rule=rule: verdict_of(rule, e) is Verdict.REPRODUCED)
        print(f"{name}, {seeds} seeds x {problems} problems: `{rule}` REPRODUCED in {wrong:.1%}")
        assert wrong <= 0.04


@pytest.mark.parametrize("seeds", [2, 3])
@pytest.mark.parametrize("problems", [16, 64])
@pytest.mark.parametrize("name", list(TINY))
def test_floored_interval_covers_tiny_pass_rates(name, seeds, problems):
    model = TINY[name]
    assert simulated(model, seeds, problems).coverage(model.mean, f"{name}, {seeds} x {problems}") >= 0.93


def test_floored_interval_all_zero_scores_are_inconclusive():
    # every arm 0 of 16 problems on 2 seeds: plus-four p = 2 / 36 over N = 32 cells, q = t(0.975, 15)
    zeros = np.zeros((2, 16))
    estimate = floored_interval(zeros)
    p = 2 / 36
    half = float(scipy_stats.t.ppf(0.975, 15)) * math.sqrt(1e4 * p * (1 - p) / 32)
    assert estimate.method == FLOORED_LABEL and estimate.low < 0 < estimate.high
    assert estimate.half_width == pytest.approx(half, rel=1e-10) and 8 < half < 9
    for rule in (gt("a.x", "b.x"), within("a.x", "b.x", 3.0)):
        assert verdict_of(rule, estimate) is Verdict.INCONCLUSIVE


def test_floored_interval_counts_identical_seeds_once():
    row = np.array([0.0, 100.0, 100.0, 0.0, 100.0])
    once = floored_interval(np.stack([row, row]), seeds=1)
    assert once.mean == 60.0 and math.isnan(once.low) and once.n == 1
    assert verdict_of(gt("a.x", boundary=10.0), once) is Verdict.INCONCLUSIVE
    with pytest.raises(ValueError, match="3 effective seeds for 2 rows"):
        floored_interval(np.stack([row, row]), seeds=3)
