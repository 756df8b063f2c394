"""The claims session: options, the rows and runs every test recorded, verdicts, saving and comparison.

Tests record into their item's ``user_properties`` (under ``PROPERTY``), which pytest-xdist ships with each
report to the controller; the session collects them from the reports, so a run under ``-n 2`` is evaluated
once, on the controller, over every worker's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsft.claims.compare import Change, Threshold, compare
from opsft.claims.evaluate import CURRENT_VERSION, ClaimResult, evaluate
from opsft.claims.registry import get
from opsft.claims.stats import Verdict
from opsft.claims.storage import save_run, write_pages
from opsft.provenance import provenance

PROPERTY = "opsft_claims"


def scale_test_draw(scale: str) -> dict:
    """The problems every arm is scored on at ``scale`` (``opsft.calibrate.scoring_draw``; at a recipe scale, the
    recipe's benchmarks: ``opsft.claims.measure.recipe_test_draw``); empty for a scale that scores none, or whose
    recipe does not load here."""
    from ablations.claims import is_recipe_scale, scale_profile
    from opsft.calibrate import scoring_draw

    profile = scale_profile(scale)
    if is_recipe_scale(profile):
        from opsft.claims.measure import recipe_test_draw
        from opsft.recipes import RecipeError

        try:
            return recipe_test_draw(profile)
        except (RecipeError, FileNotFoundError):  # the recipe cannot load here: its tests said why, as errors
            return {}
    return scoring_draw(profile) if "eval_n" in profile else {}


@dataclass(frozen=True)
class Options:
    """The command-line options of the claims plugin."""

    scale: str = "smoke"
    save: str | None = None
    compare: str | None = None  # "" = the latest saved run
    baseline: dict | None = None  # the run file --claims-compare names, comparable here (storage.load_baseline)
    baseline_note: str = ""  # which baseline, or why numbers are not compared
    compare_fail: tuple[Threshold, ...] = ()
    strict: bool = False
    storage: Path = Path(".claims")
    results: Path = Path("results")


@dataclass
class ClaimsSession:
    """Everything one pytest session learns about claims (kept in ``config.stash``)."""

    options: Options
    rows: dict[str, list[dict]] = field(default_factory=dict)
    runs: dict[str, list[dict]] = field(default_factory=dict)
    errors: set[str] = field(default_factory=set)
    results: dict[str, ClaimResult] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    saved: Path | None = None

    def add_properties(self, properties: list[tuple[str, Any]]) -> None:
        """Take the rows and runs a test recorded (the ``PROPERTY`` entries of its call report)."""
        for name, entry in properties:
            if name == PROPERTY and entry["kind"] in ("row", "run"):
                target = self.rows if entry["kind"] == "row" else self.runs
                target.setdefault(entry["claim"], []).append(entry["data"])

    def mark_errors(self, properties: list[tuple[str, Any]]) -> None:
        """A test failed: its claim (named by any ``PROPERTY`` entry, the fixture's ``started`` one included) is
        ERROR, whatever it recorded."""
        self.errors.update(entry["claim"] for name, entry in properties if name == PROPERTY)

    def evaluate(self) -> dict[str, ClaimResult]:
        """Verdicts of every claim that recorded rows or errored (ERROR, whatever the rows say)."""
        results = {}
        for cid in sorted(self.rows.keys() | self.errors):
            result = evaluate(get(cid), self.rows.get(cid, []))
            results[cid] = result.errored() if cid in self.errors else result
        self.results = results
        return results

    def payload(self) -> dict:
        """The run file's content: provenance, scale, the recorded test draw, and per claim its verdicts, rows,
        runs and seeds."""
        claims = {cid: {**r.to_dict(), "rows": self.rows.get(cid, []), "runs": self.runs.get(cid, []),
                        "seeds": sorted({row["seed"] for row in self.rows.get(cid, [])})}
                  for cid, r in self.results.items()}
        return {"scale": self.options.scale, "provenance": provenance(),
                "test_draw": scale_test_draw(self.options.scale), "claims": claims}

    def finish(self) -> None:
        """Evaluate, compare with the baseline (before saving, so ``--claims-compare`` never compares a run
        with itself), then save the run file and write the results pages when ``--claims-save`` is given."""
        if not self.rows and not self.errors:
            return
        self.evaluate()
        payload = self.payload()
        if self.options.baseline is not None:
            self.changes = compare(payload["claims"], self.options.baseline["claims"], self.options.compare_fail)
        if self.options.save:
            self.saved = save_run(self.options.storage, self.options.save, payload)
            write_pages(self.options.results, self.results.values(), payload, self.saved, self.options.storage)

    def failures(self) -> list[str]:
        """Why the session fails: NOT REPRODUCED claims under ``--claims-strict``, broken compare thresholds."""
        out = [f"{cid} {r.claim.slug}: NOT REPRODUCED" for cid, r in self.results.items()
               if self.options.strict and r.verdict is Verdict.NOT_REPRODUCED]
        return out + [str(c) for c in self.changes if c.failed]

    def summary_lines(self) -> list[str]:
        """Terminal lines: each claim's verdict (the earlier rule versions' beside it) and its current rules'
        verdicts with their notes, the metrics that differ from the baseline (and a count of the bit-identical
        ones), the saved file."""
        lines = []
        for cid, r in self.results.items():
            earlier = ", ".join(f"v{v}: {verdict.value}" for v, (verdict, _) in sorted(r.versions.items(), reverse=True)
                                if v != CURRENT_VERSION)
            lines.append(f"{cid} {r.claim.slug}: {r.verdict.value} (rules {earlier})")
            lines += [f"    {rr.verdict.value:<15} {rr.rule}" + (f" ({rr.note})" if rr.note else "") for rr in r.rules]
        lines += [self.options.baseline_note] if self.options.baseline_note else []
        lines += [str(c) for c in self.changes if not c.unchanged]
        if self.changes:
            same = sum(c.unchanged for c in self.changes)
            lines.append(f"{same} of {len(self.changes)} measured means are identical to the baseline's")
        if self.saved:
            lines.append(f"saved {self.saved}")
        return lines

