"""The training arms claim tests compare, built from the calibration's run settings so that arms shared
between claims (the GRPO run that supplies v, the SFT baseline) are trained once.

Each builder returns a new frozen RunConfig; the run cache trains each distinct config once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ablations.calibration import GRID
from ablations.claims import claims_row, is_recipe_scale, organism
from ablations.regime_map import MODES, SEEDED_MODES
from opsft.calibrate import method_config
from opsft.config import ConstraintConfig, RunConfig

# OPSFT Table 2 trains SFT and DFT for 700 steps against GRPO's 100 (and OPSFT's 50 GRPO + 100 constrained
# steps); Table 3 continues a GRPO model for another 700 steps. On the organism, GRPO runs the scale's
# `steps`, so SFT and DFT run this many times as long.
PAPER_SFT_STEPS_PER_GRPO_STEP = 7

# GEO section 4.2: "V_16 is extracted from the top right of Delta W_t around 20% training progress".
PROJECTION_START = 0.2


def baseline(method: str, scale: Mapping[str, Any], seed: int, row: Mapping[str, Any] | None = None) -> RunConfig:
    """The calibration's GRPO / OPD / SFT run of this scale and seed, at ``row`` (default: the scale's
    ``claims_row``); at a recipe scale, the recipe's run of that name (``recipe_run``)."""
    if is_recipe_scale(dict(scale)):
        return recipe_run(method, scale, seed)
    row = claims_row(dict(scale)) if row is None else row
    return method_config(method, dict(row), dict(scale), seed, organism(scale))


def scale_recipe(scale: Mapping[str, Any]):
    """The recipe a recipe scale trains, its variables from the environment (``paper``: $OPSFT_MODELS /
    $OPSFT_DATA) or, at ``paper-tiny``, naming the stand-ins (written into the run cache first:
    ``opsft.paper_tiny``)."""
    from opsft.paper_tiny import write_stand_ins
    from opsft.paths import cache_root
    from opsft.recipes import load_recipe

    env = dict(os.environ)
    if scale.get("stand_ins"):
        env.update(write_stand_ins(cache_root()))
    return load_recipe(scale["recipe"], env)


def recipe_run(name: str, scale: Mapping[str, Any], seed: int) -> RunConfig:
    """Run ``runs.NAME`` of the scale's recipe with ``seed``; a RecipeError naming the recipe when it has none."""
    from opsft.recipes import RecipeError

    recipe = scale_recipe(scale)
    if name not in recipe.runs:
        raise RecipeError(f"{recipe.path}: no [runs.{name}], which the claims at a recipe scale train "
                          f"(runs: {', '.join(recipe.runs)})")
    return dataclasses.replace(recipe.runs[name], seed=seed)


def constrained(sft: RunConfig, source: RunConfig, mode: str, **options: Any) -> RunConfig:
    """``sft`` under constraint ``mode`` with v from ``source`` at half its steps: the OPSFT efficiency
    recipe fixes v after 50 of 100 GRPO steps (OPSFT Table 2). ``options`` go to ConstraintConfig; an
    explicit ``direction_step`` overrides the half (None: ``source``'s final weights)."""
    options = {"direction_step": source.steps // 2, **options}
    return dataclasses.replace(sft, constraint=ConstraintConfig(mode=mode, direction_run=source, **options))



def opsft_recipe(sft: RunConfig, source: RunConfig, mode: str, **options: Any) -> RunConfig:
    """OPSFT as the paper's efficiency recipe trains it (OPSFT section 4, Table 2: "50 GRPO steps fix v, then 100
    constrained SFT steps", against GRPO's 100 and SFT's 700): ``constrained`` for as many steps as ``source``
    ran, snapshotted where ``source`` was. Where SFT trains as long as the on-policy run (``full``, ``ci``) this
    is ``constrained`` itself; where it trains longer (``regime``: 400 steps against 100), the constrained arm
    still trains the on-policy run's length (X05 follows it over SFT's whole length)."""
    return dataclasses.replace(constrained(sft, source, mode, **options), steps=source.steps,
                               snapshot_steps=source.snapshot_steps)

def opsft_arm(sft: RunConfig, grpo: RunConfig, scale: Mapping[str, Any]) -> RunConfig:
    """OPSFT with v from ``grpo``: ``opsft_recipe(sft, grpo, "sign")``; at a recipe scale whose recipe has a
    ``runs.opsft``, that run as the recipe states it (its rule, steps and snapshot), with ``sft``'s seed and v
    from ``grpo``."""
    if is_recipe_scale(dict(scale)):
        own = scale_recipe(scale).runs.get("opsft")
        if own is not None:
            return dataclasses.replace(own, seed=sft.seed,
                                       constraint=dataclasses.replace(own.constraint, direction_run=grpo))
    return opsft_recipe(sft, grpo, "sign")


def paper_sft_length(sft: RunConfig, grpo: RunConfig) -> RunConfig:
    """``sft`` trained for the paper's 700 steps against GRPO's 100 (OPSFT Tables 2 and 3):
    ``PAPER_SFT_STEPS_PER_GRPO_STEP`` x ``grpo.steps`` steps, snapshots at the same fractions of the run as
    ``sft``'s. The ratio is to the on-policy run, not to SFT's own length: where the calibration's SFT already
    trains longer than GRPO (``regime``, ``reference``: 400 against 100) the paper's SFT is still 700, not 2800."""
    steps = PAPER_SFT_STEPS_PER_GRPO_STEP * grpo.steps
    snapshots = tuple(sorted({round(s * steps / sft.steps) for s in sft.snapshot_steps} - {0, steps}))
    return dataclasses.replace(sft, steps=steps, snapshot_steps=snapshots)


def with_horizons(config: RunConfig, fractions: Sequence[float]) -> RunConfig:
    """``config`` also snapshotted at each of ``fractions`` of its length (at least step 1; its own snapshots
    kept), so that shorter horizons are read off one run (at a constant rate a horizon's snapshot is the shorter
    run's final weights: ``opsft.claims.regime_map.prefix_check``)."""
    extra = {max(1, round(f * config.steps)) for f in fractions}
    return dataclasses.replace(config, snapshot_steps=tuple(sorted((set(config.snapshot_steps) | extra)
                                                                   - {config.steps})))


def masked_family(sft: RunConfig, grpo: RunConfig, seed: int, rule: str = "bf16") -> dict[str, RunConfig]:
    """SFT and SFT under each mask of the OPSFT family (``ablations.regime_map.MODES``: OPSFT's sign rule, the
    ratchet-free sign-update, random signs on v's support, v's locations, random locations), v from ``grpo`` at
    half its steps under v rule ``rule``; the random masks drawn with ``seed``. The map's cells and X05 build
    their arms here, so that the same row trains the same runs for both."""
    return {"sft": sft, **{arm: constrained(sft, grpo, mode, rule=rule,
                                            **({"seed": seed} if mode in SEEDED_MODES else {}))
                           for arm, mode in MODES.items()}}


def with_objective(config: RunConfig, name: str) -> RunConfig:
    """``config`` with another loss on the same batches (e.g. ``"dft"`` on SFT's teacher trajectories)."""
    return dataclasses.replace(config, objective=dataclasses.replace(config.objective, name=name))


def on_family(config: RunConfig, family: str) -> RunConfig:
    """``config`` drawing its problems (prompts or trajectories) from task family ``family``."""
    return dataclasses.replace(config, source=dataclasses.replace(config.source, family=family))


def continued(config: RunConfig, start: RunConfig) -> RunConfig:
    """``config`` started from the final weights of ``start`` instead of the organism's base."""
    return dataclasses.replace(config, init=start)


def split_at(config: RunConfig, fraction: float) -> tuple[RunConfig, RunConfig]:
    """``(prefix, window)``: the first ``max(1, round(fraction * steps))`` steps of ``config`` as a run of
    their own, and the remaining steps as a run continued from the prefix's final weights (fresh optimizer
    state). Two arms trained over the same window from the same prefix are compared on matched windows."""
    start = max(1, round(fraction * config.steps))
    if not 0 < fraction < 1 or start >= config.steps:
        raise ValueError(f"split_at: fraction {fraction} leaves no window in a run of {config.steps} steps")
    prefix = dataclasses.replace(config, steps=start, snapshot_steps=())
    window = dataclasses.replace(config, init=prefix, steps=config.steps - start,
                                 snapshot_steps=tuple(s - start for s in config.snapshot_steps if s > start))
    return prefix, window


def grid_rows(scale_name: str, scale: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The calibration rows (precision x learning rates) a sweep trains at this scale: the ``claims_row`` alone
    at ``smoke`` (kept tiny), the scale's own ``rows`` where it names them (``regime``: the long_sft rows at SFT
    lr 1e-4 and 1e-5), otherwise every row of the grid for the scale's organism (on micro: fp32 masters and
    pure bf16, each at two learning rates)."""
    if scale_name == "smoke":
        return (claims_row(dict(scale)),)
    if "rows" in scale:
        return tuple(scale["rows"])
    rows = tuple(row for row in GRID if row["organism"] == organism(scale))
    if not rows:
        raise ValueError(f"scale {scale_name!r}: no calibration row trains organism {organism(scale)!r}")
    return rows


def row_label(row: Mapping[str, Any], scale: Mapping[str, Any]) -> str:
    """A short arm suffix naming a calibration row, e.g. ``fp32_lr1e-05`` (its SFT learning rate); empty for the
    scale's ``claims_row``, the setting every claim trains at, so that its arms keep the registry's names."""
    return "" if row == claims_row(dict(scale)) else f"_{row['precision']}_lr{row['lr_sft']:.0e}"
