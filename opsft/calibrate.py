"""Regime calibration: does the organism sit in the papers' regime?

For each row of the groups of ``ablations.calibration.GROUPS`` (``grid``: the claims' settings; ``horizon``:
the papers' horizon, more steps on more problems; ``gain``: the learning rates at which both methods learn in
100 steps; ``long_sft``: SFT for longer than the on-policy runs, as OPSFT's SFT stage) and each seed, trains
GRPO, OPD and SFT from the organism's base (SFT on a finite set of teacher trajectories, many epochs; GRPO and
OPD sampling prompts from the same finite set) and measures what the papers' regime requires:
the bf16-visible changed fraction of each method (papers: SFT dense > OPD > GRPO sparse), the in-domain
gain over the base on held-out problems, accuracy on the training set itself, the held-out abilities
(forgetting), and the mean cosine between consecutive interval updates; then checks, per setting, which of
the regime's conditions hold (``regime_checks``). Writes ``organism.md`` and ``organism.json``.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from ablations.calibration import GRID, GROUPS, SCALES
from opsft.claims.tables import REPO_ROOT, claims_doc_link
from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
from opsft.diagnostics.streaming import bf16_sparsity, update_cosines
from opsft.evals.organism_scores import check_against_in_house, cross_check_requested, lm_eval_scored
from opsft.evals.score_cache import cached_scores
from opsft.io import atomic_write_json, update_markdown_section
from opsft.organism import tasks
from opsft.paths import cache_root
from opsft.pretraining import build_organism
from opsft.provenance import provenance
from opsft.runs import run
from opsft.threads import pinned_threads

HELD_OUT = ("times", "neg", "format")
METHODS = ("grpo", "opd", "sft")


def row_steps(row: dict, scale: dict, method: str) -> int:
    """Optimizer steps of a calibration row's ``method`` run: the scale's, times the row's ``steps_factor``
    (default 1); SFT's times ``sft_steps_factor`` when the row has one (OPSFT's SFT stage runs for epochs after a
    short on-policy run)."""
    factor = row.get("steps_factor", 1)
    if method == "sft":
        factor = row.get("sft_steps_factor", factor)
    return scale["steps"] * factor


def row_problems(row: dict, scale: dict) -> int:
    """Size of a calibration row's finite problem set: the scale's, times the row's ``problems_factor`` (default 1)."""
    return scale["n_problems"] * row.get("problems_factor", 1)


def method_config(method: str, row: dict, scale: dict, seed: int, organism: str) -> RunConfig:
    """The RunConfig of one calibration run: GRPO/OPD on-policy at ``lr_rl``, SFT on teacher data at ``lr_sft``."""
    steps = row_steps(row, scale, method)
    snaps = tuple(sorted({steps // 4, steps // 2, 3 * steps // 4} - {0}))
    if method == "sft":
        source = SourceConfig(kind="static", family="arith", n_problems=row_problems(row, scale), batch_size=64,
                              trajectory_source=scale.get("trajectories", "teacher"))
        lr = row["lr_sft"]
    else:
        source = SourceConfig(kind="rollout", family="arith", n_problems=row_problems(row, scale), prompts_per_step=16,
                              group_size=8, max_new_tokens=40)
        lr = row["lr_rl"]
    return RunConfig(organism=organism, objective=ObjectiveConfig(name=method), source=source,
                     optim=OptimConfig(lr=lr), steps=steps, seed=seed, precision=row["precision"],
                     snapshot_steps=snaps)


# The recorded test draw: held-out problems are generated from the family's `test` split with this generator seed,
# the training-set problems from the `train` split with TRAIN_DRAW_SEED (the first problems of the SFT set).
TEST_DRAW_SEED = 1
TRAIN_DRAW_SEED = 0


def scoring_draw(scale: dict) -> dict:
    """What the scoring of ``scale`` evaluates on: split, generator seed and size of each scored set (the same
    problems for every arm and seed)."""
    n = scale["eval_n"]
    return {"in_domain": {"family": "arith", "split": "test", "seed": TEST_DRAW_SEED, "n": n},
            "train_set": {"family": "arith", "split": "train", "seed": TRAIN_DRAW_SEED,
                          "n": min(n, scale["n_problems"])},
            **{family: {"family": family, "split": "test", "seed": TEST_DRAW_SEED, "n_at_most": n}
               for family in HELD_OUT}}


def draw_problems(draw: dict) -> list[tasks.Problem]:
    """The problems of one set of ``scoring_draw``, in its order."""
    return tasks.generate(draw["family"], draw["split"], draw.get("n", draw.get("n_at_most")), draw["seed"],
                          at_most="n_at_most" in draw)


def score_problems(model: torch.nn.Module, tokenizer, scale: dict) -> dict[str, torch.Tensor]:
    """Greedy 0/1 correctness per problem of each set of ``scoring_draw(scale)`` (in the draw's order), scored
    through lm-eval (``opsft.evals.organism_scores``, the scorer of record), at the cached computations' pinned
    thread count (``opsft.threads``), so a row does not depend on who scored it; cached by weights and draw
    (``opsft.evals.score_cache``), so a model several claims score is scored once per run cache. When
    $OPSFT_SCORING_CROSS_CHECK asks for it, every scoring runs (the cache is refreshed, not read) and the in-house
    greedy scorer scores the sets too: a RuntimeError lists every problem on which the two differ."""
    model = model.float()
    draw = scoring_draw(scale)

    def scored_now() -> dict[str, tuple[int, ...]]:
        sets = {key: draw_problems(d) for key, d in draw.items()}
        with pinned_threads():
            scored = lm_eval_scored(model, tokenizer, sets)
            if cross_check_requested():
                check_against_in_house(model, tokenizer, sets, scored)
        return {key: s.correct for key, s in scored.items()}

    correct = cached_scores(model, tokenizer, draw, cache_root(), scored_now, refresh=cross_check_requested())
    return {key: torch.tensor(flags, dtype=torch.float32) for key, flags in correct.items()}


def score(model: torch.nn.Module, tokenizer, scale: dict) -> dict[str, float]:
    """Greedy accuracy (%) on held-out in-domain problems, on the training set, on each held-out ability and
    their mean ``held_out_mean`` (``score_problems`` averaged)."""
    out = {key: 100 * flags.mean().item() for key, flags in score_problems(model, tokenizer, scale).items()}
    out["held_out_mean"] = statistics.fmean(out[f] for f in HELD_OUT)
    return out


def reward_trend(result, window: int = 10) -> dict[str, float]:
    """Mean training reward (sampled at the rollout temperature) over the first and the last ``window``
    steps of an on-policy run, in %; empty for runs without rewards (SFT)."""
    rewards = [m["reward"] for m in result.metrics if "reward" in m]
    if not rewards:
        return {}
    return {"reward_first": 100 * statistics.fmean(rewards[:window]),
            "reward_last": 100 * statistics.fmean(rewards[-window:])}


def mean_consecutive_interval_cosine(result) -> float:
    """Mean of cos(d_i, d_{i+1}) over consecutive interval updates (global, all parameters)."""
    steps = [0, *result.config.snapshot_steps, result.config.steps]
    cos = update_cosines([result.snapshot(s) for s in steps])["interval"]["global"]
    return statistics.fmean(cos[i][i + 1] for i in range(len(cos) - 1))


def setting_steps(row: dict, scale: dict) -> dict[str, int]:
    """The run lengths of a calibration row's setting: ``rl_steps`` (GRPO and OPD) and ``sft_steps``."""
    return {"rl_steps": row_steps(row, scale, "grpo"), "sft_steps": row_steps(row, scale, "sft")}


def setting_key(row: dict) -> tuple:
    """What identifies a calibration setting (its methods' lines, grouped): organism, precision, learning rates,
    the on-policy and SFT run lengths and the problem-set size. (Rows that name no separate lengths ran every
    method for ``steps``.)"""
    lengths = (row["rl_steps"], row["sft_steps"]) if "rl_steps" in row else (row["steps"], row["steps"])
    return (row["organism"], row["precision"], row["lr_rl"], row["lr_sft"], *lengths, row["problems"])


def _setting_order(key: tuple) -> tuple:
    """Table order of a ``setting_key``: organism, precision, on-policy lr, run lengths and problems, SFT lr."""
    return key[:3], key[4:], key[3]


def kept_rows(path: Path, scale_name: str, recomputed: set[tuple]) -> list[dict]:
    """The rows of an earlier table at ``path`` (same scale) whose settings (``setting_key``) are not being
    recomputed, so that calibrating one organism or one group adds to the table instead of replacing it."""
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    if earlier.get("scale") != scale_name:
        return []
    return [r for r in earlier["rows"] if setting_key(r) not in recomputed]


def selected_rows(scale_name: str, organisms: tuple[str, ...] | None, groups: tuple[str, ...] | None) -> list[dict]:
    """The calibration rows a run computes: those of ``groups`` (default: all) for ``organisms`` (default: the
    scale's), each with its organism resolved (``smoke`` runs only the first grid row, on its own organism)."""
    scale = SCALES[scale_name]
    if scale_name == "smoke":
        return [{**GRID[0], "organism": scale["organisms"][0]}]
    unknown = sorted(set(groups or ()) - set(GROUPS))
    if unknown:
        raise KeyError(f"calibration group(s) {unknown}: not in {sorted(GROUPS)}")
    wanted = set(organisms or scale["organisms"]) & set(scale["organisms"])
    return [row for group in (groups or tuple(GROUPS)) for row in GROUPS[group] if row["organism"] in wanted]


def calibration_configs(scale_name: str, organisms: tuple[str, ...] | None = None,
                        groups: tuple[str, ...] | None = None) -> list[RunConfig]:
    """Every run the calibration of these groups and organisms trains at ``scale_name``: each selected row x
    seed x method (``method_config``)."""
    scale = SCALES[scale_name]
    return [method_config(method, row, scale, seed, row["organism"])
            for row in selected_rows(scale_name, organisms, groups) for seed in scale["seeds"] for method in METHODS]


def measured_row(row: dict, scale_name: str, seed: int, method: str, base: dict) -> dict:
    """One line of the calibration's JSON: train (or read from the cache) ``method`` at ``row`` and ``seed``, and
    measure its visible-update fraction, interval cosine, reward trend, wall time and accuracies."""
    scale = SCALES[scale_name]
    result = run(method_config(method, row, scale, seed, row["organism"]), progress=True)
    model = result.load_model()
    return {
        **row, "seed": seed, "method": method, "digest": result.config.digest(), "steps": result.config.steps,
        **setting_steps(row, scale),
        "problems": result.config.source.n_problems,
        "visible_updated": 100 * bf16_sparsity(result.snapshot(0), result.snapshot())["overall"]["updated"],
        "interval_cosine": mean_consecutive_interval_cosine(result),
        **reward_trend(result),
        "wall_time": result.wall_time,
        "base": base,
        **{f"acc_{k}": v for k, v in score(model, build_organism(row["organism"]).tokenizer, scale).items()},
    }


def _measured_row_in_worker(args: tuple) -> dict:
    torch.set_num_threads(1)
    return measured_row(*args)


def calibrate(scale_name: str, out: Path, organisms: tuple[str, ...] | None = None,
              groups: tuple[str, ...] | None = None, jobs: int = 1) -> dict:
    """Run the calibration rows of some groups at a scale (default: every group; optionally only for some
    organisms), keeping the rows of other settings in the table already in ``out``, and write the table;
    returns the JSON it wrote. With ``jobs`` > 1 the runs train and are scored in that many worker processes
    (one torch thread each; runs are cached under a file lock, so their weights are the same either way)."""
    if jobs < 1:
        raise ValueError(f"calibrate: jobs={jobs}, must be at least 1")
    scale = SCALES[scale_name]
    todo = selected_rows(scale_name, organisms, groups)
    recomputed = {setting_key({**row, **setting_steps(row, scale), "problems": row_problems(row, scale)})
                  for row in todo}
    work = []
    for row in todo:
        org = build_organism(row["organism"])
        base = score(org.base, org.tokenizer, scale)
        work += [(row, scale_name, seed, method, base) for seed in scale["seeds"] for method in METHODS]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            rows = list(pool.map(_measured_row_in_worker, work))
    else:
        rows = [measured_row(*task) for task in work]
    stamp = {k: v for k, v in provenance().items() if k in ("commit", "dirty", "utc")}
    rows = [{**r, "provenance": stamp} for r in rows]
    report = {"scale": scale_name, "test_draw": scoring_draw(scale),
              "rows": kept_rows(out / "organism.json", scale_name, recomputed) + rows}
    atomic_write_json(out / "organism.json", report)
    update_markdown_section(out / "organism.md", "calibration", render(report, out / "organism.md"))
    return report


def _mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def _reward_cell(group: list[dict]) -> str:
    if "reward_first" not in group[0]:
        return "-"
    return f"{_mean_sd([r['reward_first'] for r in group])} -> {_mean_sd([r['reward_last'] for r in group])}"


def render(report: dict, page: Path | None = None) -> str:
    """The calibration table in markdown (mean ± sd over seeds): one line per setting and method. ``page`` is
    the file it is written to, which its link to the claims list is relative to (default ``results/organism.md``,
    where ``opsft calibrate`` writes it without ``-o``)."""
    link = claims_doc_link(page or REPO_ROOT / "results" / "organism.md")
    lines = [
        f"# Organism regime calibration (scale `{report['scale']}`)",
        "",
        "Generated by `opsft calibrate`; do not edit. Mean ± sd over seeds. Accuracies are greedy % on held-out "
        "problems (in-domain gain = method minus base); `visible updated` is the share of weights changed after "
        "casting to bf16 (papers: SFT > OPD > GRPO; GEO Table 1 measures 91.9% / 48.4% / 22.8% changed, claim C16 "
        f"of the claims list, [CLAIMS.md]({link})); "
        "`interval cos` is the mean cosine between consecutive quarter-run updates; `steps / problems` is each "
        "run's length and the size of its finite problem set. SFT trains on a finite set of teacher-style "
        "trajectories (many epochs); GRPO and OPD sample prompts from the same set.",
        "",
        "| organism | precision | lr (rl / sft) | steps / problems | method | visible updated % | in-domain gain | train-set acc |"
        " held-out mean (base) | sampled reward, first -> last 10 steps | interval cos | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(setting_key(r), r["method"]) for r in report["rows"]},
                  key=lambda k: (*_setting_order(k[0]), METHODS.index(k[1])))
    for setting, method in keys:
        group = [r for r in report["rows"] if setting_key(r) == setting and r["method"] == method]
        key = (*setting[:4], f"{group[0]['steps']} / {setting[-1]}", method)
        gain = _gains(group)
        held = [r["acc_held_out_mean"] for r in group]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]:g} / {key[3]:g} | {key[4]} | {key[5]} | {_mean_sd([r['visible_updated'] for r in group])}"
            f" | {_mean_sd(gain)} | {_mean_sd([r['acc_train_set'] for r in group])}"
            f" | {_mean_sd(held)} ({group[0]['base']['held_out_mean']:.1f}) | {_reward_cell(group)} | "
            f"{_mean_sd([r['interval_cosine'] for r in group])} | {_mean_sd([r['wall_time'] for r in group])} |")
    bases = {(r["organism"]): r["base"] for r in report["rows"]}
    lines += ["", "Base accuracies: " + "; ".join(
        f"{o}: in-domain {b['in_domain']:.1f}, train set {b['train_set']:.1f}, "
        + ", ".join(f"{f} {b[f]:.1f}" for f in HELD_OUT) for o, b in bases.items())]
    lines += ["", *render_regime_checks(report), "", *render_provenance(report)]
    return "\n".join(lines) + "\n"


def render_provenance(report: dict) -> list[str]:
    """Where the table's rows come from: each commit (with its dirty flag and date) and how many rows it
    measured, the seeds, the test draw, and the config digest of every run, per setting and method. Rows
    written before provenance was stamped are counted as such."""
    stamps: dict[tuple, int] = {}
    for r in report["rows"]:
        p = r.get("provenance") or {}
        key = (p.get("commit") or "not recorded", {True: "dirty", False: "clean"}.get(p.get("dirty"), "unknown"),
               p.get("utc", "date not recorded"))
        stamps[key] = stamps.get(key, 0) + 1
    draw = report.get("test_draw") or {}
    lines = ["## Provenance", "",
             *[f"- commit `{c}` ({d} tree), {u}: {n} rows" for (c, d, u), n in sorted(stamps.items())],
             f"- seeds: {', '.join(str(s) for s in sorted({r['seed'] for r in report['rows']}))}",
             "- test draw: " + ("; ".join(f"{k}: {v['split']} seed {v['seed']}, "
                                          f"{v.get('n', v.get('n_at_most'))} problems" for k, v in draw.items())
                                or "not recorded"),
             "", "| setting | method | run digests (by seed) |", "|---|---|---|"]
    groups: dict[tuple, list[str]] = {}
    for r in report["rows"]:
        groups.setdefault((setting_key(r), r["method"]), []).append(f"{r.get('digest', '?')} ({r['seed']})")
    for (setting, method), digests in sorted(groups.items(), key=lambda g: (*_setting_order(g[0][0]),
                                                                            METHODS.index(g[0][1]))):
        lines.append(f"| {' / '.join(str(x) for x in setting)} | {method} | {', '.join(sorted(digests))} |")
    return lines


# The papers' regime, as issue 2 states it: bf16-visible fractions SFT > OPD > GRPO with GRPO sparse and SFT dense,
# GRPO and SFT both improving in-domain by more than their seed spread, and SFT able to erase held-out abilities.
GRPO_SPARSE = (5.0, 30.0)  # % visible (the geometry paper measures 22.8% for RLVR)
SFT_DENSE = 80.0  # % visible, at least


# An effect counts as measured when its mean over seeds exceeds both its sd over seeds (the margin) and
# one point (two of the 200 problems a family is scored on): a 0.7-point drop with identical seeds is not a loss.
MIN_EFFECT = 1.0


def _measured_effect(values: list[float]) -> bool:
    """Whether the mean of ``values`` (one per seed) is larger than their sd (0 for one seed) and than
    ``MIN_EFFECT`` points."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values) > max(spread, MIN_EFFECT)


def _gains(group: list[dict]) -> list[float]:
    return [r["acc_in_domain"] - r["base"]["in_domain"] for r in group]


def _held_out_drops(group: list[dict]) -> list[float]:
    return [r["base"]["held_out_mean"] - r["acc_held_out_mean"] for r in group]


def regime_checks(report: dict) -> list[dict]:
    """For each setting (organism, precision, learning rates, steps, problems) with GRPO, OPD and SFT rows,
    which of the regime's conditions its measurements meet:
    ``ordering``: mean visible % SFT > OPD > GRPO, GRPO within ``GRPO_SPARSE`` and SFT at least ``SFT_DENSE``;
    ``both_learn``: GRPO's and SFT's in-domain gains each a measured effect (``MIN_EFFECT``);
    ``sft_forgets``: SFT's held-out-ability accuracy below the base's by a measured effect."""
    by_setting: dict[tuple, dict[str, list[dict]]] = {}
    for r in report["rows"]:
        by_setting.setdefault(setting_key(r), {}).setdefault(r["method"], []).append(r)
    out = []
    for key in sorted(by_setting, key=_setting_order):
        methods = by_setting[key]
        if set(methods) != set(METHODS):
            continue
        visible = {m: statistics.fmean(r["visible_updated"] for r in methods[m]) for m in METHODS}
        ordering = (visible["sft"] > visible["opd"] > visible["grpo"]
                    and GRPO_SPARSE[0] <= visible["grpo"] <= GRPO_SPARSE[1] and visible["sft"] >= SFT_DENSE)
        checks = {"ordering": ordering,
                  "both_learn": all(_measured_effect(_gains(methods[m])) for m in ("grpo", "sft")),
                  "sft_forgets": _measured_effect(_held_out_drops(methods["sft"]))}
        out.append({"setting": key, **checks, "all": all(checks.values())})
    return out


def render_regime_checks(report: dict) -> list[str]:
    """Markdown lines: per setting, which regime conditions hold (``regime_checks``), and the settings meeting
    all of them (or a line saying none does)."""
    checks = regime_checks(report)
    mark = {True: "yes", False: "no"}
    lines = [
        "## Regime check",
        "",
        f"Computed from the rows above. `ordering`: visible % SFT > OPD > GRPO with GRPO in {GRPO_SPARSE[0]:g}-"
        f"{GRPO_SPARSE[1]:g}% and SFT at least {SFT_DENSE:g}%; `both learn`: GRPO's and SFT's mean in-domain gains "
        f"each larger than their sd over seeds and than {MIN_EFFECT:g} point; `SFT forgets`: SFT's mean held-out-"
        "ability accuracy below the base's by more than its sd and than "
        f"{MIN_EFFECT:g} point.",
        "",
        "| organism | precision | lr (rl / sft) | steps / problems | ordering | both learn | SFT forgets | all three |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        org, precision, lr_rl, lr_sft, rl_steps, sft_steps, problems = c["setting"]
        steps = rl_steps if rl_steps == sft_steps else f"{rl_steps} (SFT {sft_steps})"
        lines.append(f"| {org} | {precision} | {lr_rl:g} / {lr_sft:g} | {steps} / {problems} | {mark[c['ordering']]}"
                     f" | {mark[c['both_learn']]} | {mark[c['sft_forgets']]} | {mark[c['all']]} |")
    meeting = [c for c in checks if c["all"]]
    lines += ["", f"Settings meeting all three: {len(meeting)} of {len(checks)}."
              + ("" if meeting else " No calibrated setting is in the papers' regime on every count.")]
    return lines
