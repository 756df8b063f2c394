"""The regime map's tables, figures and sentences (issue "Where each claim holds"), from the measured cells of
``opsft.claims.regime_map``: pure functions of the saved rows, except ``write_map`` and the plots.

For each claim of ``ablations.regime_map.MAP_CLAIMS`` and each (cell, horizon), the claim's current rules (``CURRENT_VERSION``) are
decided over the rows of every seed at that horizon (``opsft.claims.evaluate``); a cell where an arm the claim
reads diverged at or before the horizon is DIVERGED, with the arm and step. The "holds where" sentence of each
claim is generated from the grid, never typed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ablations import regime_map as grid
from opsft.claims import drift_law
from opsft.claims.evaluate import CURRENT_VERSION, ClaimResult, evaluate
from opsft.claims.registry import get
from opsft.claims.stats import Estimate
from opsft.claims.tables import claims_doc_link, estimate_cell, number
from opsft.io import atomic_write_text
from opsft.plots import _save

# The one number each claim's map cell shows beside its verdict: its first current rule's statistic.
DIVERGED = "DIVERGED"
ACCURACY_KEYS = ("opsft.in_domain", "opsft.train_set", "opsft.held_out_mean")


@dataclass(frozen=True)
class CellVerdict:
    """One claim at one (cell, horizon): its current-rules result (None when DIVERGED), or the divergence."""

    cell: str
    horizon: int
    result: ClaimResult | None
    diverged: str = ""

    @property
    def verdict(self) -> str:
        """The verdict text: the claim's current verdict, or ``DIVERGED (arm at step s)``."""
        return f"{DIVERGED} ({self.diverged})" if self.diverged else self.result.verdict.value


def rows_by_cell(records: Iterable[Mapping]) -> dict[tuple[str, int], list[dict]]:
    """The saved rows of every (cell, seed) record grouped by (cell, horizon), seeds together."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        for row in record["rows"]:
            groups.setdefault((record["cell"], int(row["horizon"])), []).append(row)
    return groups


def _divergence(records: Sequence[Mapping], cell: str, horizon: int, arms: set[str]) -> str:
    """``arm at step s`` for the first arm of ``arms`` that diverged at or before ``horizon`` in any seed."""
    for record in records:
        if record["cell"] == cell:
            for arm, step in sorted(record.get("diverged", {}).items()):
                if arm in arms and step <= horizon:
                    return f"{arm} at step {step}, seed {record['seed']}"
    return ""


def claim_grid(claim_id: str, records: Sequence[Mapping]) -> list[CellVerdict]:
    """The claim's current verdict at every measured (cell, horizon), in cell then horizon order."""
    claim = get(claim_id)
    arms = {key.split(".", 1)[0] for rule in claim.rules_for(CURRENT_VERSION) for key in rule.guarded_keys}
    out = []
    for (cell, horizon), rows in sorted(rows_by_cell(records).items()):
        diverged = _divergence(records, cell, horizon, arms)
        out.append(CellVerdict(cell, horizon, None if diverged else evaluate(claim, rows), diverged))
    return out


def holds_where(claim_id: str, cells: Sequence[CellVerdict]) -> str:
    """One generated sentence: at which (cell, horizon) the claim is REPRODUCED, NOT REPRODUCED, and neither."""
    def where(pick) -> str:
        chosen = [f"{c.cell} x {c.horizon}" for c in cells if pick(c)]
        return ", ".join(chosen) if chosen else "nowhere"

    held = where(lambda c: not c.diverged and c.result.verdict.value == "REPRODUCED")
    failed = where(lambda c: not c.diverged and c.result.verdict.value == "NOT REPRODUCED")
    other = where(lambda c: c.diverged or c.result.verdict.value not in ("REPRODUCED", "NOT REPRODUCED"))
    return (f"{claim_id} ({get(claim_id).slug}) holds at {held}; fails at {failed}; undecided (inconclusive, "
            f"undefined or diverged) at {other}. Cells are (SFT learning rate x constrained steps).")


def _cell_text(c: CellVerdict) -> str:
    """A table cell: verdict, the first rule's statistic with its interval, OPSFT's accuracies."""
    if c.diverged:
        return c.verdict
    first = c.result.rules[0]
    acc = " / ".join(number(c.result.measured[k].mean) if k in c.result.measured else "—" for k in ACCURACY_KEYS)
    return f"**{c.verdict}** {estimate_cell(first.estimate)}; OPSFT {acc}"


def claim_table(claim_id: str, cells: Sequence[CellVerdict]) -> list[str]:
    """Markdown: one line per cell, one column per horizon."""
    horizons = sorted({c.horizon for c in cells})
    labels = sorted({c.cell for c in cells})
    first_rule = get(claim_id).rules_for(CURRENT_VERSION)[0]
    lines = [f"### {claim_id} {get(claim_id).slug}", "", holds_where(claim_id, cells), "",
             f"Each entry: version-{CURRENT_VERSION} verdict, `{first_rule}` with its interval, then OPSFT's held-out in-domain / "
             "training-set / held-out-abilities accuracy (%).", "",
             "| cell | " + " | ".join(f"{h} steps" for h in horizons) + " |",
             "|---|" + "---|" * len(horizons)]
    by_key = {(c.cell, c.horizon): c for c in cells}
    for label in labels:
        entries = [_cell_text(by_key[(label, h)]) if (label, h) in by_key else "—" for h in horizons]
        lines.append(f"| {label} | " + " | ".join(e.replace("|", "\\|") for e in entries) + " |")
    return lines


def drift_points(records: Sequence[Mapping]) -> dict[tuple[str, int], tuple[float, float]]:
    """(cell, horizon) -> (mean over seeds of the sign arm's travel per allowed weight, the schedule's lr sum)."""
    acc: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for record in records:
        for row in record["rows"]:
            if row["arm"] == "sign" and "travel_per_weight" in row["values"]:
                acc.setdefault((record["cell"], int(row["horizon"])), []).append(
                    (row["values"]["travel_per_weight"], row["values"]["lr_sum"]))
    return {k: (float(np.mean([t for t, _ in v])), v[0][1]) for k, v in acc.items()}


def drift_fit(points: Mapping[tuple[str, int], tuple[float, float]], fit_cell: str) -> tuple[float, list]:
    """``c`` fitted on ``fit_cell`` at its longest horizon, and the law's prediction at every point."""
    fitted = [k for k in points if k[0] == fit_cell]
    if not fitted:
        return math.nan, drift_law.predict(math.nan, points)
    key = max(fitted, key=lambda k: k[1])
    c = drift_law.fitted_constant(*points[key])
    return c, drift_law.predict(c, points)


def drift_table(c: float, fit_cell: str, predicted: Sequence[drift_law.DriftPoint]) -> list[str]:
    """Markdown: measured against predicted travel per allowed weight, with the relative error and where the
    law breaks (more than 25% off)."""
    broken = [p for p in drift_law.breaks(predicted) if math.isfinite(p.error)]
    undefined = [p for p in predicted if not math.isfinite(p.error)]
    lines = ["## The drift law", "",
             f"Travel of the sign arm along v per allowed weight against `c x sum(lr)`, `c` = {number(c)} fitted "
             f"on `{fit_cell}` at its longest horizon and predicted everywhere else.", "",
             "| cell | steps | measured | predicted | error |", "|---|---|---|---|---|"]
    lines += [f"| {p.cell} | {p.horizon} | {number(p.measured)} | {number(p.predicted)} | "
              f"{number(100 * p.error)}% |" for p in predicted]
    def where(points: Sequence[drift_law.DriftPoint]) -> str:
        return ", ".join(f"{p.cell} x {p.horizon}" for p in points) or "nowhere in the grid"

    return [*lines, "", f"The law misses by more than 25% at: {where(broken)}. Undefined (no visible v, so no "
            f"travel along it, or no fitted c) at: {where(undefined)}."]


def plot_claim_grid(claim_id: str, cells: Sequence[CellVerdict], path: Path) -> Path:
    """One panel per cell: each key the claim's current rules read, mean over seeds against the horizon, with
    its interval as a band (the papers' accuracy-over-steps plots, OPSFT Fig 3/5)."""
    labels = sorted({c.cell for c in cells})
    keys = sorted({k for rule in get(claim_id).rules_for(CURRENT_VERSION) for k in rule.keys})
    fig = Figure(figsize=(4.2 * len(labels), 3.4), layout="constrained")
    fig.suptitle(f"{claim_id} {get(claim_id).slug}: version-{CURRENT_VERSION} keys over constrained steps", fontsize=10)
    axes = np.atleast_1d(fig.subplots(1, len(labels)))
    for ax, label in zip(axes, labels, strict=True):
        mine = sorted((c for c in cells if c.cell == label and c.result is not None), key=lambda c: c.horizon)
        for key in keys:
            pts = [(c.horizon, c.result.measured[key]) for c in mine if key in c.result.measured]
            if pts:
                _band(ax, [h for h, _ in pts], [e for _, e in pts], key)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("constrained steps", fontsize=8)
        ax.legend(fontsize=6)
    return _save(fig, path)


def _band(ax, x: Sequence[int], estimates: Sequence[Estimate], label: str) -> None:
    """A line at the means with the intervals as a shaded band (NaN bounds draw no band)."""
    means = np.array([e.mean for e in estimates], dtype=float)
    ax.plot(x, means, marker="o", label=label)
    low = np.array([e.low for e in estimates], dtype=float)
    high = np.array([e.high for e in estimates], dtype=float)
    ax.fill_between(x, low, high, alpha=0.2)


def plot_drift(records: Sequence[Mapping], path: Path) -> Path:
    """In-domain accuracy against distance travelled from the base, per seed and horizon: the sign arm, the
    random-sign arm and the base drifted along v by the sign arm's distance (no training)."""
    fig = Figure(figsize=(5.5, 4.0), layout="constrained")
    ax = fig.subplots()
    for arm, accuracy_arm in (("sign", "opsft"), ("random_sign", "random_sign"), ("drift_sign", "drift_sign")):
        pts = []
        for record in records:
            by = {(r["arm"], r["horizon"]): r["values"] for r in record["rows"]}
            pts += [(by[(arm, h)]["distance"], by[(accuracy_arm, h)]["in_domain"])
                    for (a, h) in by if a == arm and "distance" in by[(a, h)] and (accuracy_arm, h) in by
                    and "in_domain" in by[(accuracy_arm, h)]]
        if pts:
            ax.scatter(*zip(*pts, strict=True), label=arm, s=14)
    ax.set_xlabel("distance from the base ||theta - theta_0||")
    ax.set_ylabel("held-out in-domain accuracy (%)")
    ax.set_title("Accuracy against drift", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, path)


def map_header(page: Path) -> list[str]:
    """The map's title and what it is, linking the claims list (``CLAIMS_DOC``) from ``page``, where it is
    written."""
    return ["# Regime map", "", f"Generated by `opsft map`; do not edit. The claims ({', '.join(grid.MAP_CLAIMS)}) "
            f"are those of the claims list, [CLAIMS.md]({claims_doc_link(page)}). Every verdict uses the claims' "
            f"version-{CURRENT_VERSION} rules and intervals (`opsft.claims.stats`) over the seeds measured in the cell.",
            ""]


def write_map(out: Path, records: Sequence[Mapping], fit_cell: str) -> Path:
    """``out/README.md`` (a section per claim, the drift law, the prefix checks) and the figures beside it."""
    lines = map_header(out / "README.md")
    for claim_id in grid.MAP_CLAIMS:
        cells = claim_grid(claim_id, records)
        figure = plot_claim_grid(claim_id, cells, out / f"{claim_id}_map.png")
        lines += [*claim_table(claim_id, cells), "", f"![{claim_id} over steps]({figure.name})", ""]
    c, predicted = drift_fit(drift_points(records), fit_cell)
    drift_figure = plot_drift(records, out / "drift.png")
    lines += [*drift_table(c, fit_cell, predicted), "", f"![accuracy against drift]({drift_figure.name})", ""]
    checks = [(r["cell"], r["prefix_max_abs_diff"]) for r in records if r.get("prefix_max_abs_diff") is not None]
    found = [f"- {cell}: max |difference| {number(d)} between SFT trained for the second horizon alone and the "
             f"full run's snapshot there ({'bit-identical' if d == 0 else 'NOT identical'})" for cell, d in checks]
    lines += ["## Is a shorter run the prefix of a longer one?", "",
              *(found or ["- not checked (no constant-rate cell with two horizons)"])]
    return atomic_write_text(out / "README.md", "\n".join(lines) + "\n")
