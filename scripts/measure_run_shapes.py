"""Measure the run shapes a scale's plan needs and ship them (``ablations/run_shapes.json``), so that ``opsft plan``
and ``opsft execute`` estimate a first run on an empty cache from the first minute (issue 34: the ETA within 20%).

For every shape of the plan (model, objective, constrained or not, precision: ``opsft.plan.shape``) one planned run
of that shape trains for ``--steps`` steps through the run cache (its parents, e.g. the GRPO run a constrained run
takes v from, train in full first), one torch thread as every worker, in ``--concurrent`` processes at once (copies
with other seeds), as the main job's workers train side by side (on this 2-core machine two concurrent SFT runs
took 1.29x the seconds per step of one alone); seconds per step is the median of their per-step times after the
first ``--warmup`` steps. The entry is keyed by this machine's CPU model and replaces that
CPU's earlier entry for the same shapes; other CPUs' entries are kept.

For every organism of the plan, its ``organisms`` entry: the cold build's seconds as the cache recorded them when it
built the organism (``organism.json``'s ``build_seconds``: each model's pretraining, base and teacher in parallel,
and the accuracy measurement; built here first when the cache lacks it), the seconds of each SFT teacher trajectory
set the plan's runs train on (each set's provenance records them; a set the cache lacks is sampled here first), and
the seconds of one scoring at the scale's evaluation size (``opsft.calibrate.score_problems``'s lm-eval scoring,
past the score cache, timed here on the base and on the final weights of at most ``--score-runs`` cached runs of the
plan, one per objective; their mean).

    OPSFT_CACHE=... python scripts/measure_run_shapes.py --scale reference
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import torch

from opsft.io import atomic_write_json
from opsft.plan import SHIPPED_SHAPES, build_plan, shape, trajectory_set, trajectory_stem
from opsft.provenance import cpu_model, provenance
from opsft.runs import run
from opsft.threads import pinned_threads


def representatives(scale: str) -> dict[tuple, object]:
    """One planned (declared, not staged) run config per shape of the scale's plan: the first of each."""
    found: dict[tuple, object] = {}
    for planned in build_plan(scale).runs.values():
        if planned.staged is None:
            found.setdefault(shape(planned.config), planned.config)
    return found


def _step_times(config, warmup: int) -> list[float]:
    """Per-step seconds of ``config`` (trained through the run cache at one torch thread), past ``warmup``."""
    torch.set_num_threads(1)
    times = [m["t_step"] for m in run(config).metrics]
    return times[warmup:] or times


def measured(config, steps: int, warmup: int, concurrent: int) -> float:
    """Median seconds per step of ``config`` cut to ``steps`` steps, past its first ``warmup`` steps, over
    ``concurrent`` copies (seeds 1000 + i past its own) trained at once in as many processes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    copies = [dataclasses.replace(config, steps=min(steps, config.steps), snapshot_steps=(), seed=config.seed + 1000 + i)
              for i in range(concurrent)]
    with ProcessPoolExecutor(max_workers=concurrent, mp_context=multiprocessing.get_context("spawn")) as pool:
        times = [t for part in pool.map(_step_times, copies, [warmup] * concurrent) for t in part]
    return statistics.median(times)


def trajectory_seconds(org, family: str, n_problems: int) -> float:
    """Seconds the teacher trajectory set ``(family, n_problems)`` of organism ``org`` took to sample, from its
    provenance (``opsft.trajectories``); sampled first (one torch thread, as in a run) when the cache lacks it."""
    from opsft.trajectories import teacher_trajectories

    manifest = org.folder / "trajectories" / f"{trajectory_stem(family, n_problems)}.jsonl.provenance.json"
    if not manifest.is_file():
        print(f"{org.folder.name} {family}-{n_problems}: sampling the teacher trajectories", flush=True)
        with pinned_threads():
            teacher_trajectories(org, family, n_problems)
    return float(json.loads(manifest.read_text(encoding="utf-8"))["seconds"])


def scoring_seconds(org, scale: dict, cached: list) -> tuple[float, list[str]]:
    """Mean seconds of one scoring of record at ``scale`` (``opsft.calibrate.score_problems``'s computation:
    lm-eval on every set of the scale's draw, one torch thread), timed past the score cache (a cached score takes
    no time, a job from an empty cache computes every one): of the organism's base and of the final weights of
    each run in ``cached`` (finished RunResults); and what was timed. lm-eval is imported beforehand (a worker
    imports it once)."""
    import time

    from opsft.calibrate import draw_problems, scoring_draw
    from opsft.evals.organism_scores import lm_eval_scored

    sets = {key: draw_problems(d) for key, d in scoring_draw(scale).items()}
    times, timed = [], []
    for name, load in [("base", lambda: org.base), *((r.config.digest(), r.load_model) for r in cached)]:
        model = load().float()
        t0 = time.perf_counter()
        with pinned_threads():
            lm_eval_scored(model, org.tokenizer, sets)
        times.append(time.perf_counter() - t0)
        timed.append(name)
        print(f"score {name}: {times[-1]:.2f} s", flush=True)
    return statistics.fmean(times), timed


def organism_entries(scale_name: str, score_runs: int) -> dict[str, dict]:
    """The shipped ``organisms`` entry of every organism of ``scale_name``'s plan (see the module's text)."""
    from ablations.claims import scale_profile
    from opsft.paths import cache_root
    from opsft.pretraining import build_organism

    plan, cache = build_plan(scale_name), cache_root()
    scale = scale_profile(scale_name)
    out = {}
    for name in sorted(plan.organisms):
        org = build_organism(name)
        built = org.report["build_seconds"]
        sets = sorted({found[1:] for r in plan.runs.values()
                       if (found := trajectory_set(r.config)) is not None and found[0] == name})
        per_set = {trajectory_stem(f, n): round(trajectory_seconds(org, f, n), 3) for f, n in sets}
        cached, objectives = [], set()
        for r in plan.runs.values():
            cfg = r.config
            if (len(cached) < score_runs and r.staged is None and cfg.organism == name and cfg.uses_organism()
                    and cfg.objective.name not in objectives and (cache / "runs" / r.key / "result.json").is_file()):
                cached.append(run(cfg))
                objectives.add(cfg.objective.name)
        score_s, timed = scoring_seconds(org, scale, cached)
        out[name] = {"base_s": round(built["base"], 3), "teacher_s": round(built["teacher"], 3),
                     "measure_s": round(built["measure"], 3), "trajectories_s": round(sum(per_set.values()), 3),
                     "trajectory_sets": per_set, "score_s": round(score_s, 3), "score_eval_n": scale["eval_n"],
                     "scores_timed": timed, "spec_digest": org.folder.name.rsplit("-", 1)[1]}
        print(f"{name}: {out[name]}", flush=True)
    return out


def main() -> None:
    """Measure every organism and shape of ``--scale``'s plan and merge them into the shipped shapes file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="reference")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--concurrent", type=int, default=2, help="copies trained at once (the job's workers)")
    parser.add_argument("--out", type=Path, default=SHIPPED_SHAPES)
    parser.add_argument("--score-runs", type=int, default=3,
                        help="cached runs of the plan (one per objective) timed with the base for a scoring's seconds")
    parser.add_argument("--no-shapes", action="store_true", help="keep the shipped shapes; measure the organisms only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    organisms = organism_entries(args.scale, args.score_runs)
    shapes = []
    for key, config in ({} if args.no_shapes else representatives(args.scale)).items():
        seconds = measured(config, args.steps, args.warmup, args.concurrent)
        shapes.append({"model": key[0], "objective": key[1], "constrained": key[2], "precision": key[3],
                       "s_per_step": round(seconds, 5), "steps_timed": min(args.steps, config.steps),
                       "concurrent": args.concurrent,
                       "constraint": config.constraint.mode, "digest_of_full_run": config.digest()})
        print(f"{'/'.join(map(str, key))}: {seconds:.4f} s/step", flush=True)
    data = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {"cpus": {}}
    cpu = cpu_model()
    kept = [e for e in data["cpus"].get(cpu, {}).get("shapes", [])
            if (e["model"], e["objective"], e["constrained"], e["precision"]) not in {tuple(s[k] for k in (
                "model", "objective", "constrained", "precision")) for s in shapes}]
    stamp = {k: v for k, v in provenance().items() if k in ("commit", "dirty", "utc")}
    earlier = data["cpus"].get(cpu, {})
    data["cpus"][cpu] = {**earlier, "shapes": kept + shapes, "organisms": {**earlier.get("organisms", {}), **organisms},
                         "scale": args.scale, "provenance": stamp}
    atomic_write_json(args.out, data)


if __name__ == "__main__":
    main()
