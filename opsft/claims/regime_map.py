"""The regime map (issue "Where each claim holds"): train and score every cell of ``ablations.regime_map``.

A cell is one SFT learning rate (and schedule, and v rule) of the OPSFT family; its arms train SFT's full
length from the base and are scored at every horizon's snapshot. Each (cell, seed) is measured once into
``<out>/cells/<cell>_seed<seed>.json`` (written atomically, keyed by the arms' config digests): a killed map
resumes where it stopped, and re-running a finished one trains and scores nothing. The rows use the claims'
arm names, so ``opsft.claims.evaluate`` decides each claim's version-2 rules per (cell, horizon)
(``opsft.claims.map_report``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablations import regime_map as grid
from ablations.claims import claims_row
from opsft.claims.arms import baseline, masked_family, with_horizons
from opsft.claims.drift_law import lr_sum
from opsft.claims.fit import scored_gap
from opsft.claims.measure import accuracies
from opsft.claims.scored import Accuracy, encode
from opsft.claims.travel import distance, drifted, share_along, travel_per_weight
from opsft.config import RunConfig
from opsft.constraints import build_masks
from opsft.directions import extract, paired_tensors
from opsft.io import atomic_write_json

CELLS_FOLDER = "cells"


@dataclass(frozen=True)
class Cell:
    """One cell of the map: SFT learning rate, schedule (``constant`` or the recipe's ``cosine``) and v rule."""

    lr: float
    schedule: str = "constant"
    rule: str = grid.REFERENCE_RULE

    @property
    def label(self) -> str:
        """A file- and table-safe name, e.g. ``lr1e-04``, ``lr1e-05_cosine``, ``lr1e-04_fp32v``."""
        cosine = "_cosine" if self.schedule != "constant" else ""
        rule = f"_{self.rule}v" if self.rule != grid.REFERENCE_RULE else ""
        return f"lr{self.lr:.0e}{cosine}{rule}"


def grid_cells(scale_name: str) -> tuple[Cell, ...]:
    """Every cell of the scale's grid (``ablations.regime_map.grid_of``): each constant learning rate with the
    reference v rule, the main rate with each other v rule, and the cosine schedule."""
    cfg = grid.grid_of(scale_name)
    constant = tuple(Cell(lr) for lr in cfg["lrs"])
    rules = tuple(Cell(cfg["main_lr"], rule=r) for r in cfg["rules"] if r != grid.REFERENCE_RULE)
    return (*constant, *rules, Cell(cfg["cosine_lr"], schedule=grid.COSINE["schedule"]))


def main_cell(scale_name: str) -> Cell:
    """The scale's main cell: its main rate under the reference v rule (the claims' row; the drift law's fit)."""
    return Cell(grid.grid_of(scale_name)["main_lr"])


def cell_seeds(scale_name: str, scale: Mapping[str, Any], cell: Cell) -> tuple[int, ...]:
    """The seeds a cell trains: the scale's, except that a grid with ``side_seeds`` trains only those in the cells
    no claim shares (a constant rate that is none of the scale's rows' SFT rates, the cosine cell, another v
    rule)."""
    side = grid.grid_of(scale_name).get("side_seeds")
    shared = cell.schedule == "constant" and cell.rule == grid.REFERENCE_RULE and cell.lr in {
        row["lr_sft"] for row in scale.get("rows", (claims_row(dict(scale)),))}
    return tuple(scale["seeds"]) if side is None or shared else tuple(side)


def horizons(cell: Cell, steps: int) -> tuple[int, ...]:
    """The constrained-step counts a cell is read at: ``HORIZON_FRACTIONS`` of ``steps`` (distinct, at least
    1); the full length alone for a decaying schedule, whose snapshots are not shorter runs."""
    if cell.schedule != "constant":
        return (steps,)
    return tuple(sorted({max(1, round(f * steps)) for f in grid.HORIZON_FRACTIONS}))


def cell_runs(cell: Cell, scale: Mapping[str, Any], seed: int) -> tuple[RunConfig, dict[str, RunConfig]]:
    """The GRPO run that supplies v (the scale's claims row, v at half its steps) and each trained arm's config
    (``masked_family``): SFT at the cell's learning rate and schedule, snapshotted at every horizon beside its
    own snapshots, and its constrained variants."""
    row = {**claims_row(dict(scale)), "lr_sft": cell.lr}
    grpo = baseline("grpo", scale, seed, row)
    sft = baseline("sft", scale, seed, row)
    if cell.schedule != "constant":
        optim = dataclasses.replace(sft.optim, lr=cell.lr, **grid.COSINE)
        sft = dataclasses.replace(sft, optim=optim)
    return grpo, masked_family(with_horizons(sft, grid.HORIZON_FRACTIONS[:-1]), grpo, seed, cell.rule)


def prefix_config(sft: RunConfig, horizon: int) -> RunConfig:
    """``sft`` trained for ``horizon`` steps only: at a constant rate, the prefix of the full run."""
    return dataclasses.replace(sft, steps=horizon, snapshot_steps=())


def max_abs_difference(a: Path, b: Path) -> float:
    """The largest |a - b| over every tensor of two snapshots (0 for bit-identical weights)."""
    return max((float((ta.double() - tb.double()).abs().max()) for _, tb, ta in paired_tensors(a, b)), default=0.0)


def _row(arm: str, seed: int, horizon: int, values: Mapping[str, float]) -> dict:
    """A claims row (``opsft.claims.evaluate``) with its horizon, per-problem scores kept for ``Accuracy``."""
    row: dict[str, Any] = {"arm": arm, "seed": seed, "horizon": horizon,
                           "values": {k: float(v) for k, v in values.items()}}
    problems = {k: encode(v.per_problem) for k, v in values.items() if isinstance(v, Accuracy)}
    if problems:
        row["problems"] = problems
    return row


def measure_cell(cell: Cell, scale: Mapping[str, Any], seed: int, run: Callable[[RunConfig], Any]) -> dict:
    """Train (through ``run``, the cached run graph) and score one cell at one seed: per horizon, every arm's
    accuracies, the sign arm's travel (distance, share along v, travel per allowed weight, the schedule's lr
    sum), the random-sign arm's share along its own signs, the base drifted by the sign arm's distance, and
    OPSFT's matched gap against SFT's checkpoints up to that horizon. Arms whose loss went non-finite are
    listed under ``diverged`` (arm -> step) and not scored from that step on."""
    from opsft.pretraining import build_organism

    grpo, arms = cell_runs(cell, scale, seed)
    org = build_organism(arms["sft"].organism)
    results = {arm: run(cfg) for arm, cfg in arms.items()}
    source = run(grpo)
    step = arms["opsft"].constraint.direction_step
    v = extract(source.snapshot(0), source.snapshot(step), rule=cell.rule, step=step)
    random_signs = build_masks("random-sign", v, None, seed)
    diverged = {arm: r.diverged for arm, r in results.items() if r.diverged is not None}  # opsft.runs
    base = accuracies(org.base, org.tokenizer, scale)
    grpo_acc = accuracies(source.load_model(), org.tokenizer, scale)
    rows, fit = [], [(base["train_set"], base["in_domain"])]
    for h in horizons(cell, arms["sft"].steps):
        rows += [_row("base", seed, h, base), _row("grpo", seed, h, grpo_acc)]
        scored = {arm: accuracies(r.load_model(h), org.tokenizer, scale) for arm, r in results.items()
                  if diverged.get(arm, math.inf) > h}
        for arm, acc in scored.items():
            rows.append(_row(arm, seed, h, acc))
        if "sft" in scored:
            fit.append((scored["sft"]["train_set"], scored["sft"]["in_domain"]))
        if "opsft" in scored:
            rows.append(_row("opsft", seed, h, {"matched_gap": scored_gap(
                (scored["opsft"]["train_set"], scored["opsft"]["in_domain"]), fit)}))
            rows += _travel_rows(results, v.signs, random_signs, seed, h, arms["opsft"])
            travelled = distance(results["opsft"].snapshot(0), results["opsft"].snapshot(h))
            moved = drifted(results["sft"].load_model(0), v.signs, travelled)  # a fresh copy of the base
            rows.append(_row("drift_sign", seed, h, {**accuracies(moved, org.tokenizer, scale),
                                                     "distance": travelled}))
    return {"cell": cell.label, "seed": seed, "digests": {a: c.digest() for a, c in arms.items()},
            "rows": rows, "diverged": diverged}


def _travel_rows(results: Mapping[str, Any], signs: Mapping[str, torch.Tensor], random_signs, seed: int,
                 h: int, opsft: RunConfig) -> list[dict]:
    """X05's quantities at horizon ``h``: the sign arm's distance, share along v (its mask: ``share_along_mask``
    and ``share_along_v`` are one number), travel per allowed weight and the schedule's lr sum; the random-sign
    arm's share along its own signs; the sign-update arm's distance and share along v; SFT's distance (rules v3:
    the ratchet against ``sign_update``, and "travels further than SFT")."""
    sign = results["opsft"]
    before, after = sign.snapshot(0), sign.snapshot(h)
    along = share_along(before, after, signs)
    rows = [_row("sign", seed, h, {"distance": distance(before, after), "share_along_mask": along,
                                   "share_along_v": along, "travel_per_weight": travel_per_weight(before, after, signs),
                                   "lr_sum": lr_sum(opsft.optim, opsft.steps, h)})]
    if "sft" in results:
        r = results["sft"]
        rows.append(_row("sft", seed, h, {"distance": distance(r.snapshot(0), r.snapshot(h))}))
    if "random_sign" in results:
        r = results["random_sign"]
        rows.append(_row("random_sign", seed, h, {"share_along_mask": share_along(
            r.snapshot(0), r.snapshot(h), random_signs), "distance": distance(r.snapshot(0), r.snapshot(h))}))
    if "sign_update" in results:
        r = results["sign_update"]
        rows.append(_row("sign_update", seed, h, {"distance": distance(r.snapshot(0), r.snapshot(h)),
                                                  "share_along_v": share_along(r.snapshot(0), r.snapshot(h), signs)}))
    return rows


def prefix_run(cell: Cell, scale: Mapping[str, Any], seed: int) -> RunConfig | None:
    """The short SFT run the prefix check trains: the cell's SFT for its second horizon alone (its first, with
    only two); None for a decaying schedule or a single horizon."""
    sft = cell_runs(cell, scale, seed)[1]["sft"]
    points = horizons(cell, sft.steps)
    if cell.schedule != "constant" or len(points) < 2:
        return None
    return prefix_config(sft, points[1] if len(points) > 2 else points[0])


def prefix_check(cell: Cell, scale: Mapping[str, Any], seed: int, run: Callable[[RunConfig], Any]) -> float | None:
    """Whether a shorter constant-rate run is the full run's prefix: the max |difference| between SFT trained
    for a horizon alone (``prefix_run``) and the full SFT run's snapshot there (0: bit-identical). None where
    there is no prefix run."""
    short = prefix_run(cell, scale, seed)
    if short is None:
        return None
    return max_abs_difference(run(short).snapshot(), run(cell_runs(cell, scale, seed)[1]["sft"]).snapshot(short.steps))


def map_configs(scale_name: str) -> list[tuple[str, RunConfig]]:
    """Every run ``run_map`` trains at ``scale_name``, labelled ``map CELL seedN``: each (cell, seed)'s arms and
    v's GRPO run, and seed 0's prefix-check run."""
    from ablations.claims import scale_profile

    scale, out = scale_profile(scale_name), []
    for cell in grid_cells(scale_name):
        for seed in cell_seeds(scale_name, scale, cell):
            grpo, arms = cell_runs(cell, scale, seed)
            short = prefix_run(cell, scale, seed) if seed == 0 else None
            out += [(f"map {cell.label} seed{seed}", cfg) for cfg in (grpo, *arms.values(), short) if cfg is not None]
    return out


def cell_path(out: Path, cell: Cell, seed: int) -> Path:
    """Where one (cell, seed) measurement lives."""
    return out / CELLS_FOLDER / f"{cell.label}_seed{seed}.json"


def measured(out: Path, cell: Cell, scale: Mapping[str, Any], seed: int,
             run: Callable[[RunConfig], Any]) -> dict:
    """The (cell, seed) measurement: read back when its file holds the same arms' digests, else measured (with
    the prefix check on seed 0) and written atomically."""
    path = cell_path(out, cell, seed)
    digests = {a: c.digest() for a, c in cell_runs(cell, scale, seed)[1].items()}
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"regime map cell file {path} is corrupt ({err}); delete it to measure again") from err
        if saved.get("digests") == digests:
            return saved
    result = measure_cell(cell, scale, seed, run)
    result["prefix_max_abs_diff"] = prefix_check(cell, scale, seed, run) if seed == 0 else None
    atomic_write_json(path, result)
    return result


def _measured_in_worker(out: Path, cell: Cell, scale_name: str, seed: int) -> dict:
    """``measured`` in a worker process of ``run_map``, through the cached run graph, at the pinned thread count."""
    from ablations.claims import scale_profile
    from opsft.runs import run as cached_run
    from opsft.threads import pinned_threads

    with pinned_threads():
        return measured(out, cell, scale_profile(scale_name), seed, cached_run)


def run_map(scale_name: str, out: Path, labels: tuple[str, ...] = (), seeds: tuple[int, ...] = (),
            run: Callable[[RunConfig], Any] | None = None, jobs: int = 1) -> list[dict]:
    """Measure every (cell, seed) of the map at ``scale_name`` (only the cells named in ``labels`` and the
    ``seeds`` given, when given), printing progress with an ETA, then write ``out/README.md`` and the figures
    (``opsft.claims.map_report.write_map``). Returns the records. With ``jobs`` > 1 (and the cached run graph as
    ``run``) the (cell, seed) measurements run in that many worker processes: each writes its own cell file and
    scores at the pinned thread count, so the records are the same either way."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from ablations.claims import scale_profile
    from opsft.claims.map_report import write_map
    from opsft.progress import progress_text

    if jobs < 1:
        raise ValueError(f"run_map: jobs={jobs}, must be at least 1")
    scale = scale_profile(scale_name)
    every = grid_cells(scale_name)
    cells = [c for c in every if not labels or c.label in labels]
    unknown = set(labels) - {c.label for c in every}
    if unknown:
        raise ValueError(f"unknown map cell(s) {sorted(unknown)} at scale {scale_name!r}; cells: "
                         f"{', '.join(c.label for c in every)}")
    todo = [(c, s) for c in cells for s in (seeds or cell_seeds(scale_name, scale, c))]
    found: dict[int, dict] = {}
    start = time.monotonic()

    def note(index: int, record: dict) -> None:
        found[index] = record
        cell, seed = todo[index]
        print(f"map: {progress_text(len(found), len(todo), time.monotonic() - start, 'cell')} ({cell.label} seed "
              f"{seed})", flush=True)

    if jobs > 1 and run is None:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_measured_in_worker, out, cell, scale_name, seed): i
                       for i, (cell, seed) in enumerate(todo)}
            for future in as_completed(futures):
                note(futures[future], future.result())
    else:
        from opsft.runs import run as cached_run
        from opsft.threads import pinned_threads

        with pinned_threads():
            for i, (cell, seed) in enumerate(todo):
                note(i, measured(out, cell, scale, seed, run or cached_run))
    records = [found[i] for i in range(len(todo))]
    write_map(out, records, main_cell(scale_name).label)
    return records
