"""Measurements that claim tests share, built on the diagnostics, the evaluators and the calibration's scoring."""

from __future__ import annotations

import dataclasses
import math
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from transformers import PreTrainedTokenizerBase

from ablations.claims import is_recipe_scale
from opsft.calibrate import HELD_OUT, score_problems
from opsft.checkpoints import iter_tensors
from opsft.claims.scored import Accuracy, family_mean
from opsft.diagnostics import endpoint_summary, trajectory_summary, update_cosines, update_locations
from opsft.directions import Direction
from opsft.evals.generation import Sampling
from opsft.evals.lm_eval_adapter import logged_samples, output_rows
from opsft.evals.suite import SUITES, Suite, code_family_verdicts, evaluate, held_out_output
from opsft.io import file_sha256
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS, correctness
from opsft.runs import RunResult

ACCURACIES = ("in_domain", "train_set", "held_out_mean")


def principal_k(result: RunResult) -> int:
    """k for principal angles at the same k/d ratio as GEO's k = 512 on Qwen3-8B's d = 4096 (1/8): at the
    organism's width, k = 512 would span the whole space and every angle would be 0 by construction."""
    return max(1, result.load_model().config.hidden_size // 8)


def endpoint_metrics(result: RunResult) -> dict[str, float]:
    """GEO Table 1 quantities of a run's update (step 0 -> final), from ``endpoint_summary``:
    ``updated_pct`` (bf16-visible updated share, %), ``angle`` (principal angle between top-k singular
    subspaces, radians, mean of the left and right sides, averaged over layer matrices), ``nss``, and
    ``principal_excess`` / ``low_excess``: overlap of the visible updates with the principal / low-magnitude
    mask minus the random baseline alpha (< 0: below random)."""
    summary = endpoint_summary(result.snapshot(0), result.snapshot(), k=principal_k(result))
    mats, alpha = summary["matrices"], summary["settings"]["alpha"]
    return {
        "updated_pct": 100 * summary["bf16_sparsity"]["overall"]["updated"],
        "angle": (mats["angle_left_mean"]["mean"] + mats["angle_right_mean"]["mean"]) / 2,
        "nss": mats["nss"]["mean"],
        "principal_excess": mats["principal"]["mean"] - alpha,
        "low_excess": mats["low_magnitude"]["mean"] - alpha,
    }


def flags_accuracy(flags: torch.Tensor) -> Accuracy:
    """Accuracy (%) of a 0/1 vector of per-problem verdicts, carrying them (0 or 100 each)."""
    return Accuracy(100 * flags.mean().item(), (100 * flags).tolist())


def per_problem_mean(scores: Sequence[float]) -> Accuracy:
    """Accuracy (%) of per-problem scores in [0, 1] (a pass, or a problem's avg@k), carrying them in %."""
    percent = [100 * x for x in scores]
    return Accuracy(statistics.fmean(percent), percent)


def accuracies(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
               scale: Mapping[str, Any]) -> dict[str, float]:
    """Greedy accuracy (%) on held-out in-domain problems, on the training set (X06: matched fit) and the
    mean over held-out abilities, as the calibration scores them (``opsft.calibrate.score_problems``), each an
    ``Accuracy`` carrying its per-problem scores (every arm is scored on the same recorded draw, so claims pair
    arms problem by problem); ``held_out_mean``, the unweighted mean of the families, is their ``family_mean``.
    At a recipe scale, the same three from the real benchmarks (``recipe_accuracies``)."""
    if is_recipe_scale(dict(scale)):
        return recipe_accuracies(model, tokenizer, scale)
    flags = score_problems(model, tokenizer, dict(scale))
    out: dict[str, float] = {key: flags_accuracy(flags[key]) for key in ACCURACIES[:2]}
    out["held_out_mean"] = family_mean([flags_accuracy(flags[f]) for f in HELD_OUT])
    return out


def recipe_accuracies(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                      scale: Mapping[str, Any]) -> dict[str, float]:
    """The recipe's evaluation (``opsft.evals.paper``), in %: ``in_domain``, each math benchmark problem's avg@k
    (the papers' headline, the mean of the benchmarks' avg@k, when they hold as many problems each);
    ``train_set``, greedy accuracy on the first ``eval.train_problems`` rows of the SFT run's data; and
    ``held_out_mean``, the share of the code benchmarks' problems whose greedy program passes every test.
    Each carries its per-problem scores; a quantity the recipe does not ask for is left out."""
    from opsft.claims.arms import scale_recipe
    from opsft.data.real import load_examples
    from opsft.evals.paper import code_problem_scores, math_problem_scores, train_problem_scores

    recipe = scale_recipe(scale)
    settings = recipe.eval
    if torch.cuda.is_available():  # a real model is scored on the GPU (lm-eval and generate use its device)
        model = model.to("cuda")
    sampling = Sampling(k=settings.k, temperature=settings.temperature, top_p=settings.top_p,
                        max_new_tokens=settings.max_new_tokens)
    math_scores = math_problem_scores(model, tokenizer, settings.benchmarks, settings.protocol(), sampling,
                                      settings.limit)
    out: dict[str, float] = {"in_domain": per_problem_mean([x for name in settings.benchmarks
                                                            for x in math_scores[name]])}
    if settings.train_problems:
        examples = load_examples(recipe.runs["sft"].source.dataset_path, limit=settings.train_problems)
        out["train_set"] = per_problem_mean(train_problem_scores(model, tokenizer, examples,
                                                                 recipe.runs["sft"].source.max_new_tokens))
    if settings.code:
        out["held_out_mean"] = per_problem_mean(code_problem_scores(model, tokenizer, settings.max_new_tokens,
                                                                    settings.limit))
    return out


def recipe_test_draw(scale: Mapping[str, Any]) -> dict[str, dict]:
    """What ``recipe_accuracies`` scores every arm on, in the form of ``opsft.calibrate.scoring_draw``: the
    benchmarks (the first ``eval.limit`` problems of each, sampled with seed 0, under the recipe's name and the
    SHA-256 of its file) and the training rows."""
    from opsft.claims.arms import scale_recipe
    from opsft.evals.paper import benchmark_items

    recipe = scale_recipe(scale)
    settings = recipe.eval
    label = f"recipe {recipe.name} (sha256 {file_sha256(recipe.path)[:12]}): "
    draw = {"in_domain": {"family": label + " + ".join(settings.benchmarks), "split": "test", "seed": 0,
                          "n": sum(len(benchmark_items(b, settings.limit)) for b in settings.benchmarks)}}
    if settings.train_problems:
        draw["train_set"] = {"family": Path(recipe.runs["sft"].source.dataset_path).name, "split": "train",
                             "seed": 0, "n_at_most": settings.train_problems}
    if settings.code:
        draw["held_out_mean"] = {"family": " + ".join(settings.code), "split": "test", "seed": 0,
                                 "n_at_most": settings.limit or "all"}
    return draw


def stage_steps(result: RunResult) -> list[int]:
    """The training stages the trajectory claims (C01, C17, C18) read: ``[0, *snapshot_steps, steps]``, as in
    ``opsft.calibrate.mean_consecutive_interval_cosine``."""
    return [0, *result.config.snapshot_steps, result.config.steps]


def stage_snapshots(result: RunResult, minimum: int = 3) -> list[Path]:
    """Snapshot folders of ``stage_steps``; a ValueError when there are fewer than ``minimum`` (step 0 and
    at least two later stages by default: with one later stage every trajectory statistic is trivial)."""
    steps = stage_steps(result)
    if len(steps) < minimum:
        raise ValueError(f"run {result.config.digest()}: stages {steps} give fewer than {minimum} snapshots; "
                         "the scale has too few steps for snapshot_steps")
    return [result.snapshot(s) for s in steps]


def direction_consistency(result: RunResult) -> dict[str, float]:
    """OPSFT Fig 2 statistics of a run (claim C01), from ``update_cosines`` over ``stage_snapshots``:
    ``interval_cos``, the mean of cos(d_i, d_{i+1}) over consecutive interval updates (global, all
    parameters: the calibration's ``interval_cosine`` column), and ``cumulative_cos``, the cosine of the first
    cumulative update theta_{t_1} - theta_0 with the final one theta_T - theta_0 (global). ``*_matrix``:
    the same from the per-layer-matrix cosine matrices averaged over matrices (NaN if any matrix is)."""
    cos = update_cosines(stage_snapshots(result))
    out = {}
    for level, suffix in (("global", ""), ("matrix", "_matrix")):
        interval, final = cos["interval"][level], cos["final_cumulative"][level]  # matrix: None/[] without matrices
        consecutive = _consecutive(interval)
        out[f"interval_cos{suffix}"] = statistics.fmean(consecutive) if consecutive else math.nan
        out[f"cumulative_cos{suffix}"] = final[0] if final else math.nan
    return out


def _consecutive(cosines: Sequence[Sequence[float]] | None) -> list[float]:
    """The entries C[i][i+1] of a cosine matrix between consecutive updates (empty for no matrix)."""
    return [cosines[i][i + 1] for i in range(len(cosines) - 1)] if cosines else []


def _trajectory_means(result: RunResult) -> dict[str, list[float]]:
    """``trajectory_summary`` means over layer matrices of the cumulative update at each stage after step 0."""
    return trajectory_summary(stage_snapshots(result))["mean"]


def _log_ratio(last: float, first: float) -> float:
    """log(last / first); NaN unless both are positive (inf stays inf, inf / inf is NaN)."""
    if not (first > 0 and last > 0):
        return math.nan
    ratio = last / first
    return math.log(ratio) if ratio == ratio else math.nan


def low_dim_band(result: RunResult) -> dict[str, float]:
    """GEO section 4.1 / Fig 4 statistics of a run's cumulative update dW_t = W_t - W_0 (claim C17), from
    ``trajectory_summary`` over ``stage_snapshots`` (means over layer matrices at t = first stage after 0 ..
    final): ``stable_rank_log_change`` and ``hill_log_change``, log(last / first) of the mean stable rank and
    of the mean Hill tail index (top half of the singular values, ``default_hill_k``); ``frobenius``, the
    mean ||dW_T||_F at the end; and the first / last values themselves."""
    mean = _trajectory_means(result)
    rank, hill, fro = mean["stable_rank"], mean["hill_index"], mean["frobenius_norm"]
    return {
        "stable_rank_log_change": _log_ratio(rank[-1], rank[0]),
        "hill_log_change": _log_ratio(hill[-1], hill[0]),
        "frobenius": fro[-1],
        "stable_rank_first": rank[0], "stable_rank_last": rank[-1],
        "hill_first": hill[0], "hill_last": hill[-1],
    }


def early_subspace(result: RunResult) -> dict[str, float]:
    """GEO section 4.2 / Fig 5 statistic of a run (claim C18): ``first_similarity``, the subspace similarity
    ||V_K(t_1)^T V_K(end)||_F^2 / K of the top-K (K = 16, capped at the matrix size) right singular subspaces of
    the first cumulative update after step 0 and the final one, mean over layer matrices
    (``trajectory_summary`` over ``stage_snapshots``). ``first_similarity_random``: the same mean for a random
    K-dim subspace, K / n for an m x n matrix (at the organism's width far above GEO's 16 / 4096);
    ``mid_similarity``: the similarity at the middle stage."""
    summary = trajectory_summary(stage_snapshots(result))
    sim, k = summary["mean"]["subspace_similarity"], summary["settings"]["subspace_k"]
    names = sorted(summary["per_matrix"])
    chance = [min(k, *w.shape) / w.shape[1] for _, w in iter_tensors(result.snapshot(), names)]
    return {
        "first_similarity": sim[0],
        "mid_similarity": sim[(len(sim) - 1) // 2],
        "first_similarity_random": statistics.fmean(chance) if chance else math.nan,
    }


# ---------------------------------------------------------------- OPSFT Fig 6 and GEO Fig 7 series (C12, C20)


def update_behaviour(result: RunResult) -> dict[str, list[float]]:
    """OPSFT Fig 6 series of a run over ``stage_snapshots`` (claim C12), locations bf16-visible (GEO 3.1):
    ``sparsity``, 1 - |M_t| / n of the cumulative update theta_t - theta_0 at each stage t after step 0;
    ``jaccard``, |M_i & M_{i-1}| / |M_i | M_{i-1}| of consecutive interval-update locations (i = 2..T);
    ``cosine``, the matrix-level cosines (``update_cosines``, averaged over layer matrices) of consecutive
    interval updates cos(d_i, d_{i+1}), followed by those of each cumulative update with the final one."""
    snapshots = stage_snapshots(result)
    locations, cos = update_locations(snapshots), update_cosines(snapshots)
    return {
        "sparsity": locations["cumulative"]["sparsity"],
        "jaccard": locations["interval"]["jaccard_previous"][1:],
        "cosine": _consecutive(cos["interval"]["matrix"]) + list(cos["final_cumulative"]["matrix"][:-1]),
    }


def stable_rank_curve(result: RunResult) -> list[float]:
    """GEO Fig 7's quantity (claim C20): the mean over layer matrices of the stable rank
    ||dW_t||_F^2 / ||dW_t||_2^2 of the cumulative update dW_t = W_t - W_0 at each stage after step 0."""
    return _trajectory_means(result)["stable_rank"]


def _paired(series: Sequence[float], reference: Sequence[float]) -> None:
    """A ValueError unless both series are non-empty and of one length (stage by stage)."""
    if not series or len(series) != len(reference):
        raise ValueError(f"series of lengths {len(series)} and {len(reference)}: need equal, non-zero lengths")


def log_gap(series: Sequence[float], reference: Sequence[float]) -> float:
    """mean_i |log x_i - log r_i|: how far a positive series stays from a reference, scale-free (C20); NaN
    when any value is not positive."""
    _paired(series, reference)
    if not all(x > 0 for x in (*series, *reference)):
        return math.nan
    return statistics.fmean(abs(math.log(x) - math.log(r)) for x, r in zip(series, reference, strict=True))


def closer_to(series: Sequence[float], reference: Sequence[float], other: Sequence[float]) -> float:
    """mean_i |x_i - o_i| - mean_i |x_i - r_i|: positive when ``series`` stays closer to ``reference`` than to
    ``other`` stage by stage (C12, C13: OPSFT against GRPO and SFT); NaN propagates."""
    _paired(series, reference)
    _paired(series, other)
    return (statistics.fmean(abs(x - o) for x, o in zip(series, other, strict=True))
            - statistics.fmean(abs(x - r) for x, r in zip(series, reference, strict=True)))


def relative_gap(series: Sequence[float], reference: Sequence[float]) -> float:
    """mean_i (x_i - r_i) / r_i, the mean relative difference stage by stage (C13's response length)."""
    _paired(series, reference)
    return statistics.fmean((x - r) / r for x, r in zip(series, reference, strict=True))


# ---------------------------------------------------------------- the evaluators' suites (C10, C11, C13)

GREEDY = Sampling(k=1, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS)
# The test-problem draw of ``opsft.calibrate.score``, so that every claim scores the same held-out problems.
TEST_DRAW = 1
# OPSFT Fig 7's four quantities: name -> the metric of ``opsft.evals.suite.math_family_rows``.
BEHAVIOUR_METRICS = {"length": "response_length", "acc_std": "accuracy_std",
                     "case_split": "case_split_per_1k_words", "logic_cue": "logical_per_1k_words"}


def frame_value(frame: pd.DataFrame, task: str, metric: str) -> float:
    """The one value of ``metric`` for ``task`` in an ``opsft.evals.suite.evaluate`` frame (KeyError otherwise)."""
    hit = frame.loc[(frame["task"] == task) & (frame["metric"] == metric), "value"]
    if len(hit) != 1:
        raise KeyError(f"evaluation frame holds {len(hit)} rows for task {task!r}, metric {metric!r}")
    return float(hit.iloc[0])


def _suite(scale: Mapping[str, Any], **fields: Any) -> Suite:
    """An evaluation suite of the scale's size (``eval_n`` problems per family) that runs only ``fields``."""
    return Suite(**{"math_families": (), "code_family": None, "held_out": (), "n": scale["eval_n"],
                    "sampling": GREEDY, "seed": TEST_DRAW, **fields})


def ood_accuracies(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                   scale: Mapping[str, Any]) -> dict[str, float]:
    """OPSFT Table 1 on the organism (claim C10): accuracy (%) on each held-out ability family
    (``tasks.HELD_OUT``: six families, as Table 1 has six tasks) through lm-eval, generation tasks greedy (one
    sample, judged by the organism's verifier ``tasks.answer_is_correct``), multiple choice by log-likelihood
    (``acc``); and
    ``ood_mean``, their unweighted mean (Table 1's "Mean"). Each family is the ``Accuracy`` lm-eval reports,
    carrying its per-document metric from lm-eval's logged samples (a RuntimeError naming the family when their
    mean is not the reported accuracy); ``ood_mean`` is their ``family_mean``."""
    with tempfile.TemporaryDirectory(prefix="opsft-ood-") as tmp:
        local, output = held_out_output(model.float(), tokenizer, _suite(scale, held_out=tasks.HELD_OUT), Path(tmp),
                                        log_samples=True)
    frame = pd.DataFrame(output_rows(output))
    out: dict[str, float] = {}
    for family, task in zip(tasks.HELD_OUT, local, strict=True):
        metric = "acc" if task.template == "multiple_choice" else "avg_at_k"
        scores = [100 * float(s[metric]) for s in logged_samples(output, task.name, len(task.rows))]
        try:
            out[family] = Accuracy(100 * frame_value(frame, task.name, metric), scores)
        except ValueError as error:
            raise RuntimeError(f"{task.name}: lm-eval's {metric} is not the mean of its logged samples: {error}") \
                from error
    out["ood_mean"] = family_mean([out[f] for f in tasks.HELD_OUT])
    return out


def code_accuracies(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, scale: Mapping[str, Any],
                    n_train: int) -> dict[str, float]:
    """The organism's code family (claim C11; its Eurus) scored through evalplus, greedy: ``in_domain``, the
    share (%) of held-out code problems whose program passes the base and the extra "plus" tests (the
    EvalPlus "+" score); ``base_tests``, the share passing the problems' own tests only; ``train_set``, greedy
    accuracy (%) on the first ``n_train`` training problems (the organism's verifier; X06's fit). Each is an
    ``Accuracy`` carrying its per-problem scores (a held-out problem's: its mean over the suite's samples)."""
    with tempfile.TemporaryDirectory(prefix="opsft-code-") as tmp:
        base, plus = code_family_verdicts(model.float(), tokenizer, "code", _suite(scale, code_family="code"),
                                          Path(tmp))
    train = tasks.generate("code", "train", min(scale["eval_n"], n_train), 0, at_most=True)
    return {"in_domain": per_problem_mean([statistics.fmean(r) for r in plus]),
            "base_tests": per_problem_mean([statistics.fmean(r) for r in base]),
            "train_set": flags_accuracy(correctness(model, tokenizer, train)[:, 0])}


def behaviour_curves(result: RunResult, tokenizer: PreTrainedTokenizerBase,
                     scale: Mapping[str, Any]) -> dict[str, list[float]]:
    """OPSFT Fig 7 over training (claim C13): at each stage after step 0, k completions (the sampling of the
    scale's evaluation suite ``scale["suite"]``: temperature 1, k = 2 / 4 / 8 at smoke / ci / full) for
    ``eval_n`` held-out problems of the run's own family, and the four ``BEHAVIOUR_METRICS``: mean response
    length (tokens), the std over sample slots of accuracy, and case-split and logical cues per 1k words
    (``opsft.evals.behaviour``)."""
    family = result.config.source.family
    sampling = dataclasses.replace(SUITES[scale["suite"]].sampling, max_new_tokens=MAX_NEW_TOKENS)
    suite = _suite(scale, math_families=(family,), sampling=sampling)
    curves: dict[str, list[float]] = {name: [] for name in BEHAVIOUR_METRICS}
    for step in stage_steps(result)[1:]:
        frame = evaluate(result.load_model(step).float(), tokenizer, suite)
        for name, metric in BEHAVIOUR_METRICS.items():
            curves[name].append(frame_value(frame, family, metric))
    return curves


# ---------------------------------------------------------------- steps to an accuracy (X03)


def steps_to_reach(curve: Mapping[int, float], target: float) -> int | None:
    """The first step (in step order) whose accuracy is at least ``target``; None when none is."""
    return next((step for step in sorted(curve) if curve[step] >= target), None)


def speedup(reference: Mapping[int, float], faster: Mapping[int, float]) -> float:
    """EffOPD's acceleration (X03): with target = ``reference``'s accuracy at its last step, steps_ref / steps_fast,
    each the first step of its curve (``{step: accuracy}``, the same steps) reaching the target. When ``faster``
    never reaches it within the last step T, its steps exceed T and steps_ref / T is returned, an upper bound."""
    if sorted(reference) != sorted(faster) or not reference:
        raise ValueError(f"curves over different steps: {sorted(reference)} vs {sorted(faster)}")
    target, last = reference[max(reference)], max(reference)
    fast = steps_to_reach(faster, target)
    return steps_to_reach(reference, target) / (fast if fast is not None else last)


# ---------------------------------------------------------------- one computation from two sources (X04)


def sign_agreement(a: Direction, b: Direction) -> float:
    """Share of entries on which two directions hold the same sign, over the union of their tensors (a tensor
    one of them lacks, or of another shape, counts as disagreeing everywhere)."""
    agree = total = 0
    for name in sorted(set(a.signs) | set(b.signs)):
        sa, sb = a.signs.get(name), b.signs.get(name)
        if sa is not None and sb is not None and sa.shape == sb.shape:
            agree += int((sa == sb).sum())
        total += max(t.numel() for t in (sa, sb) if t is not None)
    return agree / total if total else math.nan


def largest_difference(a: Any, b: Any, path: str = "") -> float:
    """The largest |x - y| over the numbers of two nested results of one structure (dicts, lists, numbers;
    strings must be equal; two NaN agree). A ValueError names the first place where the structures differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            raise ValueError(f"{path or 'result'}: keys differ: {sorted(set(a) ^ set(b))}")
        return max((largest_difference(a[k], b[k], f"{path}.{k}") for k in a), default=0.0)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            raise ValueError(f"{path or 'result'}: lengths differ: {len(a)} vs {len(b)}")
        return max((largest_difference(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))),
                   default=0.0)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return 0.0 if a == b or (math.isnan(a) and math.isnan(b)) else abs(a - b)
    if a != b:
        raise ValueError(f"{path or 'result'}: {a!r} != {b!r}")
    return 0.0
