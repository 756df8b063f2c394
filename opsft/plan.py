"""The plan of a main job: every run the selected claims, the calibration they build on and the regime map need,
listed before anything trains, with parents, cache state and estimated cost.

Claims declare their runs in their test modules (``arms``, ``opsft.claims.declared``): the plan collects the claim
tests as pytest would (the same ``-k`` selection and ``--scale``), asks each for its arms, and adds every
ancestor (the run a run starts from, the run that supplies its v). A staged arm (its config depends on a
measurement of an earlier run) is priced by its ``shape`` and listed without a digest until its parent has run.

Costs come from the cache: seconds per step of finished runs of the same shape (organism, objective, constraint
or none, precision), scaled by steps; for a shape the cache has not run, from the shipped run shapes measured on
this CPU model (``ablations/run_shapes.json``, written by ``scripts/measure_run_shapes.py``), so that a first run
on an empty cache has its estimate from the first minute; else from the runs recorded in saved claims runs
(``.claims``: other commits, other loads); a shape never run has no estimate and is counted apart. The lower bound on
the training's wall time with W workers is max(sum / W, the longest chain of dependent runs).

The whole job costs more than its training (issue 34: the estimate within 20% of the job's wall time from an empty
cache). Before any run trains, the organisms the plan needs are built when the cache lacks them (base and teacher
pretrain in parallel, then an accuracy measurement) and the teacher trajectories of its SFT sets are sampled once;
after training, the calibration, the claims and the map score models (greedy accuracy through lm-eval). Both are
priced from the shipped file's ``organisms`` section of this CPU model (``shipped_organisms``): a cold build's
seconds and seconds per scoring at an evaluation size. The scorings counted are the distinct models scored
(``Plan.scorings``: every planned run's final weights, the map's horizon snapshots and drifted bases, each
organism's base) at each evaluation size: the score cache (``opsft.evals.score_cache``) scores each once. The whole job's estimate with W workers is
build + max(training / W, critical path) + scoring / W (``Plan.summary``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsft.claims.declared import Staged, parents, with_ancestors
from opsft.config import RunConfig, model_label


@dataclass
class PlannedRun:
    """One run of the plan: its config (a staged arm's ``shape``), who needs it, and its cost."""

    config: RunConfig
    staged: Staged | None = None  # the staged arm this run stands for (``config`` is its shape)
    needed_by: list[str] = field(default_factory=list)
    cached: bool = False
    estimate: float | None = None  # seconds

    @property
    def staged_after(self) -> str | None:
        """Digest of the run a staged arm is built from (None for a declared config)."""
        return None if self.staged is None else self.staged.after.digest()

    @property
    def key(self) -> str:
        """The digest, or ``staged:<parent digest>:<shape digest>`` for a staged arm."""
        return self.config.digest() if self.staged_after is None else f"staged:{self.staged_after}:{self.config.digest()}"


def shape(config: RunConfig) -> tuple:
    """What a run's seconds per step depend on: the model (organism or folder), objective, whether it is
    constrained, precision."""
    return (config.model_label(), config.objective.name, config.constraint.mode != "none", config.precision)


def measured_step_seconds(cache: Path) -> dict[tuple, float]:
    """Median seconds per step of the finished runs in ``cache``, per ``shape``."""
    per_shape: dict[tuple, list[float]] = {}
    for result_file in (cache / "runs").glob("*/result.json"):
        try:
            result = json.loads(result_file.read_text())
            cfg = json.loads((result_file.parent / "config.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        key = (stored_model_label(cfg), cfg["objective"]["name"], cfg["constraint"]["mode"] != "none", cfg["precision"])
        per_shape.setdefault(key, []).append(result["wall_time"] / cfg["steps"])
    return {k: statistics.median(v) for k, v in per_shape.items()}


def stored_model_label(cfg: dict) -> str:
    """``RunConfig.model_label`` of a config as stored beside its run (``to_dict``)."""
    init = cfg["init"]
    while isinstance(init, dict):
        init = init["init"]
    return model_label(cfg["organism"], str(init))


def saved_step_seconds(storage: Path) -> dict[tuple, float]:
    """Median seconds per step of the runs recorded in saved claims runs under ``storage`` (every
    ``<scale>/*.json``), per ``shape`` less precision (not recorded there): the fallback for shapes the cache has
    not measured, e.g. a fresh cache after a change of bits (such times were taken at other commits and loads)."""
    per_shape: dict[tuple, dict[str, float]] = {}
    for path in storage.glob("*/*.json"):
        try:
            claims = json.loads(path.read_text())["claims"]
        except (OSError, json.JSONDecodeError, KeyError):
            continue
        for claim in claims.values():
            for run in claim.get("runs", []):
                key = (run["organism"], run["objective"], run["constraint"] != "none")
                per_shape.setdefault(key, {})[run["digest"]] = run["wall_time"] / run["steps"]
    return {k: statistics.median(v.values()) for k, v in per_shape.items()}


SHIPPED_SHAPES = Path(__file__).resolve().parent.parent / "ablations" / "run_shapes.json"


def shipped_entry(path: Path, cpu: str | None, section: str) -> Any:
    """Section ``section`` of CPU model ``cpu``'s entry (default: this machine's) in the shipped shapes file
    (``{"cpus": {cpu: {section: ...}}}``); None when the file or that CPU model or section is absent; a
    ValueError names a file that is not JSON of that form."""
    from opsft.provenance import cpu_model

    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["cpus"].get(cpu or cpu_model(), {}).get(section)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"run shapes file {path}: not the shipped shapes format ({type(err).__name__}: {err})") from err


def shipped_step_seconds(path: Path = SHIPPED_SHAPES, cpu: str | None = None) -> dict[tuple, float]:
    """Seconds per step per ``shape`` measured on CPU model ``cpu`` (default: this machine's) in the shipped
    shapes file (``{"cpus": {cpu: {"shapes": [{"model", "objective", "constrained", "precision", "s_per_step"},
    ...]}}}``); empty when the file or that CPU model is absent; a ValueError names a malformed file."""
    entries = shipped_entry(path, cpu, "shapes") or []
    try:
        return {(e["model"], e["objective"], e["constrained"], e["precision"]): float(e["s_per_step"])
                for e in entries}
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as err:
        raise ValueError(f"run shapes file {path}: not the shipped shapes format ({type(err).__name__}: {err})") from err


BUILD_PARTS = ("base_s", "teacher_s", "measure_s", "trajectories_s")


def shipped_organisms(path: Path = SHIPPED_SHAPES, cpu: str | None = None) -> dict[str, dict]:
    """The organisms measured on CPU model ``cpu`` (default: this machine's) in the shipped shapes file
    (``{"cpus": {cpu: {"organisms": {name: {...}}}}}``), per organism: the cold build's seconds ``base_s`` and
    ``teacher_s`` (each model's pretraining; they run in parallel), ``measure_s`` (the accuracy measurement after
    them) and ``trajectories_s`` (the scale's SFT teacher trajectories, all sets), optionally ``trajectory_sets``
    (seconds per set, by file stem ``<family>-<n>-<tries>-<seed>``), and ``score_s``, the seconds of one scoring
    at ``score_eval_n`` problems a family. Empty when the file or that CPU model is absent; a ValueError names a
    malformed file."""
    found = shipped_entry(path, cpu, "organisms") or {}
    try:
        out = {}
        for name, entry in found.items():
            parsed = {part: float(entry[part]) for part in BUILD_PARTS}
            parsed["trajectory_sets"] = {str(k): float(v) for k, v in entry.get("trajectory_sets", {}).items()}
            if "score_s" in entry:
                parsed["score_s"], parsed["score_eval_n"] = float(entry["score_s"]), int(entry["score_eval_n"])
            if any(not math.isfinite(v) or v < 0 for v in [*(parsed[p] for p in BUILD_PARTS),
                                                          *parsed["trajectory_sets"].values(),
                                                          parsed.get("score_s", 0.0)]):
                raise ValueError(f"organism {name!r}: a negative or non-finite number of seconds")
            out[str(name)] = parsed
        return out
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as err:
        raise ValueError(f"run shapes file {path}: not the shipped shapes format, organisms section "
                         f"({type(err).__name__}: {err})") from err


def trajectory_stem(family: str, n_problems: int) -> str:
    """The file stem under which ``opsft.trajectories.teacher_trajectories`` caches an organism's SFT set of
    ``n_problems`` problems of ``family`` (its default tries and data seed, as runs call it)."""
    import inspect

    from opsft.trajectories import teacher_trajectories

    params = inspect.signature(teacher_trajectories).parameters
    return f"{family}-{n_problems}-{params['tries'].default}-{params['data_seed'].default}"


def trajectory_set(config: RunConfig) -> tuple[str, str, int] | None:
    """``(organism, family, n_problems)`` of the teacher trajectory set a run trains on (an SFT-style run on the
    organism's teacher samples: ``opsft.runs``), else None."""
    src = config.source
    if src.kind == "static" and src.trajectory_source == "teacher" and src.dataset_path is None \
            and config.uses_organism():
        return config.organism, src.family, src.n_problems
    return None


def build_todo(name: str, cache: Path, sets: list[tuple[str, int]]) -> dict:
    """What the cold build of organism ``name`` still has to do in ``cache``: ``organism`` (no organism.json),
    ``base`` / ``teacher`` (that model is not pretrained: models are cached apart, and organisms share a
    teacher), and the SFT trajectory sets (file stems) of ``sets`` (``(family, n_problems)``) not yet sampled."""
    from opsft.organism.specs import ORGANISMS
    from opsft.pretraining import model_folder, organism_folder

    spec, folder = ORGANISMS[name], organism_folder(name, cache / "organisms")
    built = (folder / "organism.json").is_file()
    models = {role: built or (model_folder(spec.recipe(role), cache / "organisms") / "model.json").is_file()
              for role in ("base", "teacher")}
    stems = sorted({trajectory_stem(f, n) for f, n in sets})
    return {"organism": not built, "base": not models["base"], "teacher": not models["teacher"],
            "trajectories": [s for s in stems
                             if not (folder / "trajectories" / f"{s}.jsonl.provenance.json").is_file()]}


def build_seconds(todo: dict, shipped: dict | None) -> float | None:
    """Seconds of a cold build's remaining work (``build_todo``) from an organism's shipped entry: the longer of
    the two pretrainings left, plus the measurement, when the organism is not built; plus each unsampled SFT set
    (its own measured seconds, else the entry's ``trajectories_s``). 0 when nothing is left; None when something
    is and the entry is missing."""
    if not todo["organism"] and not todo["trajectories"]:
        return 0.0
    if shipped is None:
        return None
    seconds = 0.0
    if todo["organism"]:
        seconds += max(shipped["base_s"] if todo["base"] else 0.0,
                       shipped["teacher_s"] if todo["teacher"] else 0.0) + shipped["measure_s"]
    return seconds + sum(shipped["trajectory_sets"].get(s, shipped["trajectories_s"]) for s in todo["trajectories"])


class Plan:
    """Runs keyed by digest, in the order first needed, each with its needers, parents and cost; the models the
    job scores (``scorings``); and, once priced, the organism builds it waits for."""

    def __init__(self, eval_n: int | None = None) -> None:
        self.runs: dict[str, PlannedRun] = {}
        self.organisms: set[str] = set()
        self.eval_n = eval_n  # problems a family each added run is scored on (None: its scoring is not counted)
        # the distinct models scored: (what, ..., eval_n) -> the model's label (``RunConfig.model_label``)
        self.scorings: dict[tuple, str] = {}
        self.builds: dict[str, dict] = {}  # organism -> build_todo, with its "seconds" (None: unpriced)
        self.score_rates: dict[tuple[str, int], float | None] = {}  # (model label, eval_n) -> seconds a scoring

    def add(self, label: str, arm: RunConfig | Staged, eval_n: int | None = None) -> None:
        """Add ``arm`` (and every ancestor) as needed by ``label``, each scored once (its final weights) on
        ``eval_n`` problems a family (default the plan's ``eval_n``), its organism's base too."""
        eval_n = eval_n or self.eval_n
        if isinstance(arm, Staged):
            self.add(label, arm.after, eval_n)
            self._note(PlannedRun(arm.shape, staged=arm), label, eval_n)
            return
        for config in with_ancestors(arm):
            self._note(PlannedRun(config), label, eval_n)

    def _note(self, run: PlannedRun, label: str, eval_n: int | None) -> None:
        planned = self.runs.setdefault(run.key, run)
        if label not in planned.needed_by:
            planned.needed_by.append(label)
        if run.config.uses_organism():
            self.organisms.add(run.config.organism)
        if eval_n is not None:
            self.add_scoring(("run", run.key, run.config.steps), run.config, eval_n)
            if run.config.uses_organism():
                self.add_scoring(("base", run.config.organism), run.config, eval_n)

    def add_scoring(self, model: tuple, config: RunConfig, eval_n: int) -> None:
        """Count one scoring of ``model`` (a key naming the weights: ``("run", key, step)``, ``("base",
        organism)``, ...) of ``config``'s model on ``eval_n`` problems a family; a model already counted at that
        size is not counted again (scores depend on the weights and the draw alone)."""
        self.scorings.setdefault((*model, eval_n), config.model_label())

    def parents_of(self, run: PlannedRun) -> list[str]:
        """Keys of the runs ``run`` waits for."""
        keys = [p.digest() for p in parents(run.config)]
        return keys + ([run.staged_after] if run.staged_after else [])

    def price(self, cache: Path, storage: Path | None = None, shipped: Path = SHIPPED_SHAPES) -> None:
        """Set each run's cache state (a finished ``result.json``) and estimate: from ``cache``'s measured runs of
        its shape, else the shipped shapes of this CPU model (``shipped_step_seconds``), else the saved claims
        runs under ``storage`` (``saved_step_seconds``), else none."""
        rates = {**shipped_step_seconds(shipped), **measured_step_seconds(cache)}
        saved = saved_step_seconds(storage) if storage is not None else {}
        for run in self.runs.values():
            run.cached = run.staged_after is None and (cache / "runs" / run.key / "result.json").is_file()
            key = shape(run.config)
            rate = rates.get(key, saved.get(key[:3]))
            run.estimate = None if rate is None else rate * run.config.steps
        self.price_builds_and_scorings(cache, shipped)

    def price_builds_and_scorings(self, cache: Path, shipped: Path = SHIPPED_SHAPES) -> None:
        """Set each needed organism's remaining build (``build_todo``: what ``cache`` lacks, the trajectory sets
        of the plan's SFT runs whose own runs are not cached) and its seconds (``build_seconds``), and the seconds
        of a scoring per (model, evaluation size) from the shipped organisms of this CPU model (``score_s``
        scaled by the number of problems a family; None where the model has none)."""
        organisms = shipped_organisms(shipped)
        sets: dict[str, set[tuple[str, int]]] = {}
        for run in self.runs.values():
            if not run.cached and (found := trajectory_set(run.config)) is not None:
                sets.setdefault(found[0], set()).add(found[1:])
        self.builds = {}
        for name in sorted(self.organisms):
            todo = build_todo(name, cache, sorted(sets.get(name, ())))
            self.builds[name] = {**todo, "seconds": build_seconds(todo, organisms.get(name))}
        self.score_rates = {}
        for key, label in self.scorings.items():
            entry, eval_n = organisms.get(label, {}), key[-1]
            self.score_rates[(label, eval_n)] = (entry["score_s"] * eval_n / entry["score_eval_n"]
                                                 if "score_s" in entry else None)

    def chain_seconds(self, towards: str) -> dict[str, float]:
        """Per run key, the estimated seconds of the longest chain of dependent uncached runs through it, itself
        included, towards its ``"parents"`` (what must finish before it does) or its ``"children"`` (what waits
        on it: a ready run's priority). A run without an estimate counts 0."""
        parents = {k: [p for p in self.parents_of(r) if p in self.runs] for k, r in self.runs.items()}
        children: dict[str, list[str]] = {k: [] for k in self.runs}
        for key, keys in parents.items():
            for parent in keys:
                children[parent].append(key)
        step = {"parents": parents, "children": children}[towards]
        memo: dict[str, float] = {}

        def chain(key: str) -> float:
            if key not in memo:
                run = self.runs[key]
                own = 0.0 if run.cached else (run.estimate or 0.0)
                memo[key] = own + max((chain(k) for k in step[key]), default=0.0)
            return memo[key]

        return {k: chain(k) for k in self.runs}

    def critical_path(self) -> float:
        """Seconds of the longest chain of dependent uncached runs (runs without an estimate count 0)."""
        return max(self.chain_seconds("parents").values(), default=0.0)

    def summary(self, workers: int) -> dict:
        """Counts and hours: runs, cached, to train, unpriced; training hours; the training's lower bound with
        ``workers`` (``wall_hours_lower_bound``: max(training / workers, critical path)); the organism builds
        left (minutes; organisms without a shipped measurement in ``build_unpriced``); the distinct scorings and
        their minutes on one worker (those without a shipped rate in ``scorings_unpriced``); and the whole job's
        estimate ``wall_hours``: build + training's bound + scoring / ``workers`` (the builds before any run,
        as serial time; every scoring counted, cached runs' too: the score cache is not read here, so a warm cache's
        scoring is overestimated)."""
        todo = [r for r in self.runs.values() if not r.cached]
        total = sum(r.estimate or 0.0 for r in todo)
        train_wall = max(total / workers, self.critical_path())
        build = sum(b["seconds"] or 0.0 for b in self.builds.values())
        rates = [self.score_rates.get((label, key[-1])) for key, label in self.scorings.items()]
        scoring = sum(r or 0.0 for r in rates)
        return {"runs": len(self.runs), "cached": len(self.runs) - len(todo), "to_train": len(todo),
                "unpriced": sum(r.estimate is None for r in todo), "train_hours": total / 3600,
                "wall_hours_lower_bound": train_wall / 3600, "workers": workers,
                "organisms": sorted(self.organisms),
                "build_minutes": build / 60,
                "build_unpriced": sorted(n for n, b in self.builds.items() if b["seconds"] is None),
                "to_build": sorted(n for n, b in self.builds.items() if b["seconds"] != 0.0),
                "scorings": len(self.scorings), "scorings_unpriced": sum(r is None for r in rates),
                "scoring_minutes": scoring / 60,
                "wall_hours": (build + train_wall + scoring / workers) / 3600}


def claim_arms(scale_name: str, expr: str | None, suite: Path) -> list[tuple[str, dict]]:
    """``(label, arms)`` of every claim test pytest collects from ``suite`` at ``scale_name`` (``-k expr``),
    label ``CLAIM [params] seedN``."""
    import pytest

    from ablations.claims import scale_profile, skip_reason
    from opsft.claims.declared import declared_arms
    from opsft.claims.plugin import claim_id, test_params

    class Collector:
        items: list = []

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            Collector.items = list(session.items)

    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "--scale", scale_name, str(suite)]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = pytest.main(args + (["-k", expr] if expr else []), plugins=[Collector()])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise RuntimeError(f"collecting the claim tests of {suite} failed (pytest exit {int(code)}):\n"
                           f"{out.getvalue()[-2000:]}")
    scale, found = scale_profile(scale_name), []
    for item in Collector.items:
        cid = claim_id(item)
        if cid is None or skip_reason(cid, scale_name, scale):
            continue
        params = test_params(item)
        seed = item.callspec.params["seed"]
        label = " ".join([cid, *(str(v) for v in params.values()), f"seed{seed}"])
        found.append((label, dict(declared_arms(item.module, scale_name, scale, seed, params))))
    return found


def build_plan(scale_name: str, expr: str | None = None, suite: Path = Path("suite"), calibration: bool = True,
               regime_map: bool = True) -> Plan:
    """The plan of the main job at ``scale_name``: the calibration, the claims (``-k expr``) and the map (at a
    recipe scale, ``paper`` / ``paper-tiny``, the claims alone: the other two are grids over the organism)."""
    from ablations.calibration import SCALES
    from ablations.claims import calibration_of, is_recipe_scale, scale_profile
    from opsft.calibrate import calibration_configs
    from opsft.claims.regime_map import map_configs

    scale = scale_profile(scale_name)
    plan = Plan(eval_n=scale.get("eval_n"))
    if is_recipe_scale(scale):  # the calibration and the map are grids over the organism
        calibration = regime_map = False
    if calibration:
        cal = calibration_of(scale_name)
        for config in calibration_configs(cal["scale"], cal["organisms"], cal["groups"]):
            plan.add("calibration", config, eval_n=SCALES[cal["scale"]]["eval_n"])
    for label, arms in claim_arms(scale_name, expr, suite):
        for arm in arms.values():
            plan.add(label, arm)
    if regime_map:
        for label, config in map_configs(scale_name):
            plan.add(label, config)
        add_map_scorings(plan, scale_name)
    return plan


def add_map_scorings(plan: Plan, scale_name: str) -> None:
    """Count the models the regime map scores beyond the runs' final weights (``opsft.claims.regime_map
    .measure_cell``): per (cell, seed), every trained arm at each horizon short of its full length, and the base
    drifted by the sign arm's distance at every horizon."""
    from ablations import regime_map as grid
    from ablations.claims import scale_profile
    from opsft.claims.regime_map import cell_runs, cell_seeds, grid_cells, horizons

    scale = scale_profile(scale_name)
    eval_n = scale["eval_n"]
    for cell in grid_cells(scale_name):
        for seed in cell_seeds(scale_name, scale, cell):
            arms = cell_runs(cell, scale, seed)[1]
            for h in horizons(cell, arms["sft"].steps):
                for arm in grid.TRAINED_ARMS:
                    if arm in arms:
                        plan.add_scoring(("run", arms[arm].digest(), h), arms[arm], eval_n)
                plan.add_scoring(("drift_sign", cell.label, seed, h), arms["sft"], eval_n)


def render(plan: Plan, workers: int) -> str:
    """The plan as text: one line per run (key, method, organism, steps, constraint, cached, estimated seconds,
    parents, needed by), then the summary."""
    lines = [f"{'run':<16} {'method':<6} {'organism':<8} {'steps':>5} {'constraint':<16} {'cached':<6} "
             f"{'est s':>7}  parents / needed by"]
    for run in plan.runs.values():
        cfg, est = run.config, "-" if run.estimate is None else f"{run.estimate:.0f}"
        key = "staged" if run.staged_after else run.key
        needers = ", ".join(run.needed_by[:3]) + (f" (+{len(run.needed_by) - 3})" if len(run.needed_by) > 3 else "")
        parents_text = ",".join(p[:8] for p in plan.parents_of(run)) or "-"
        lines.append(f"{key:<16} {cfg.objective.name:<6} {cfg.model_label():<8} {cfg.steps:>5} {cfg.constraint.mode:<16} "
                     f"{'yes' if run.cached else 'no':<6} {est:>7}  {parents_text} / {needers}")
    s = plan.summary(workers)
    lines.append(f"\n{s['runs']} runs ({s['cached']} cached, {s['to_train']} to train, {s['unpriced']} of them "
                 f"without a measured shape); organisms {', '.join(s['organisms']) or 'none'}; about {s['train_hours']:.1f} h "
                 f"of training, at least {s['wall_hours_lower_bound']:.1f} h on {workers} workers")
    lines.append(job_line(s))
    return "\n".join(lines)


def job_line(s: dict) -> str:
    """The whole job's estimate in one line (``Plan.summary``): its hours, then the organism build, the
    training's bound and the scoring that make them, and what is not counted for want of a measurement."""
    build = (f"organism build {s['build_minutes']:.0f} min ({', '.join(s['to_build'])})" if s["to_build"]
             else "organisms built")
    missing = [f"{what} {n}" for n, what in ((s["unpriced"], "runs"), (len(s["build_unpriced"]), "organism builds"),
                                             (s["scorings_unpriced"], "scorings")) if n]
    return (f"whole job on {s['workers']} workers: about {s['wall_hours']:.1f} h = {build} + training "
            f"{60 * s['wall_hours_lower_bound']:.0f} min + scoring {s['scoring_minutes']:.0f} min / {s['workers']} "
            f"({s['scorings']} models scored)"
            + (f"; unmeasured, not counted: {', '.join(missing)}" if missing else ""))


def to_json(plan: Plan, workers: int) -> dict:
    """The plan as JSON-able data: runs (key, config, parents, needers, cached, estimate), the organism builds
    left, the scorings per model and evaluation size, and the summary."""
    return {"runs": [{"key": r.key, "staged_after": r.staged_after, "config": r.config.to_dict(),
                      "parents": plan.parents_of(r), "needed_by": r.needed_by, "cached": r.cached,
                      "estimate_s": r.estimate} for r in plan.runs.values()],
            "builds": plan.builds,
            "scoring": [{"model": label, "eval_n": eval_n, "count": count,
                         "seconds_each": plan.score_rates.get((label, eval_n))}
                        for (label, eval_n), count in sorted(scoring_counts(plan).items())],
            "summary": plan.summary(workers)}


def scoring_counts(plan: Plan) -> dict[tuple[str, int], int]:
    """Distinct scorings per (model label, problems a family)."""
    counts: dict[tuple[str, int], int] = {}
    for key, label in plan.scorings.items():
        counts[(label, key[-1])] = counts.get((label, key[-1]), 0) + 1
    return counts


def cmd_plan(args) -> int:
    """``opsft plan``: build, price and print the plan (text, or JSON with ``--json``)."""
    from opsft.paths import cache_root

    plan = build_plan(args.scale, args.k, Path(args.suite), not args.no_calibration, not args.no_map)
    plan.price(cache_root(), Path(args.storage))
    print(json.dumps(to_json(plan, args.workers), indent=1) if args.json else render(plan, args.workers))
    return 0

