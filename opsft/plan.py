"""The plan of a main job: every run the selected claims, the calibration they build on and the regime map need,
listed before anything trains, with parents, cache state and estimated cost.

Claims declare their runs in their test modules (``arms``, ``opsft.claims.declared``): the plan collects the claim
tests as pytest would (the same ``-k`` selection and ``--scale``), asks each for its arms, and adds every
ancestor (the run a run starts from, the run that supplies its v). A staged arm (its config depends on a
measurement of an earlier run) is priced by its ``shape`` and listed without a digest until its parent has run.

Costs come from the cache: seconds per step of finished runs of the same shape (organism, objective, constraint
or none, precision), scaled by steps; for a shape the cache has not run, from the runs recorded in saved claims
runs (``.claims``: other commits, other loads); a shape never run has no estimate and is counted apart. The lower bound on
the wall time with W workers is max(sum / W, the longest chain of dependent runs).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

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


class Plan:
    """Runs keyed by digest, in the order first needed, each with its needers, parents and cost."""

    def __init__(self) -> None:
        self.runs: dict[str, PlannedRun] = {}
        self.organisms: set[str] = set()

    def add(self, label: str, arm: RunConfig | Staged) -> None:
        """Add ``arm`` (and every ancestor) as needed by ``label``."""
        if isinstance(arm, Staged):
            self.add(label, arm.after)
            self._note(PlannedRun(arm.shape, staged=arm), label)
            return
        for config in with_ancestors(arm):
            self._note(PlannedRun(config), label)

    def _note(self, run: PlannedRun, label: str) -> None:
        planned = self.runs.setdefault(run.key, run)
        if label not in planned.needed_by:
            planned.needed_by.append(label)
        if run.config.uses_organism():
            self.organisms.add(run.config.organism)

    def parents_of(self, run: PlannedRun) -> list[str]:
        """Keys of the runs ``run`` waits for."""
        keys = [p.digest() for p in parents(run.config)]
        return keys + ([run.staged_after] if run.staged_after else [])

    def price(self, cache: Path, storage: Path | None = None) -> None:
        """Set each run's cache state (a finished ``result.json``) and estimate: from ``cache``'s measured runs of
        its shape, else from the saved claims runs under ``storage`` (``saved_step_seconds``), else none."""
        rates = measured_step_seconds(cache)
        saved = saved_step_seconds(storage) if storage is not None else {}
        for run in self.runs.values():
            run.cached = run.staged_after is None and (cache / "runs" / run.key / "result.json").is_file()
            key = shape(run.config)
            rate = rates.get(key, saved.get(key[:3]))
            run.estimate = None if rate is None else rate * run.config.steps

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
        """Counts and hours: runs, cached, to train, unpriced; training hours; a lower bound with ``workers``."""
        todo = [r for r in self.runs.values() if not r.cached]
        total = sum(r.estimate or 0.0 for r in todo)
        return {"runs": len(self.runs), "cached": len(self.runs) - len(todo), "to_train": len(todo),
                "unpriced": sum(r.estimate is None for r in todo), "train_hours": total / 3600,
                "wall_hours_lower_bound": max(total / workers, self.critical_path()) / 3600, "workers": workers,
                "organisms": sorted(self.organisms)}


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
    from ablations.claims import calibration_of, is_recipe_scale, scale_profile
    from opsft.calibrate import calibration_configs
    from opsft.claims.regime_map import map_configs

    plan = Plan()
    if is_recipe_scale(scale_profile(scale_name)):  # the calibration and the map are grids over the organism
        calibration = regime_map = False
    if calibration:
        cal = calibration_of(scale_name)
        for config in calibration_configs(cal["scale"], cal["organisms"], cal["groups"]):
            plan.add("calibration", config)
    for label, arms in claim_arms(scale_name, expr, suite):
        for arm in arms.values():
            plan.add(label, arm)
    if regime_map:
        for label, config in map_configs(scale_name):
            plan.add(label, config)
    return plan


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
    return "\n".join(lines)


def to_json(plan: Plan, workers: int) -> dict:
    """The plan as JSON-able data: runs (key, config, parents, needers, cached, estimate) and the summary."""
    return {"runs": [{"key": r.key, "staged_after": r.staged_after, "config": r.config.to_dict(),
                      "parents": plan.parents_of(r), "needed_by": r.needed_by, "cached": r.cached,
                      "estimate_s": r.estimate} for r in plan.runs.values()],
            "summary": plan.summary(workers)}


def cmd_plan(args) -> int:
    """``opsft plan``: build, price and print the plan (text, or JSON with ``--json``)."""
    from opsft.paths import cache_root

    plan = build_plan(args.scale, args.k, Path(args.suite), not args.no_calibration, not args.no_map)
    plan.price(cache_root(), Path(args.storage))
    print(json.dumps(to_json(plan, args.workers), indent=1) if args.json else render(plan, args.workers))
    return 0

