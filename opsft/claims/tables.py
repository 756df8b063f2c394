"""Markdown tables of claims: pure functions from results to text (written by ``opsft.claims.storage``)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablations.claims import REFERENCE_SCALE
from opsft.claims.evaluate import CURRENT_VERSION, ClaimResult, RuleResult
from opsft.claims.registry import NOT_DECIDED, RULE_VERSIONS, Claim, PaperValue, Rule
from opsft.claims.stats import (
    BOOTSTRAP_LABEL,
    DISTINCT_SEED_LABEL,
    FLOORED_LABEL,
    SEED_T_LABEL,
    T_LABEL,
    Estimate,
)

NOT_RUN = "not run"
# The claims list the pages cite: a verbatim copy that ships with the project (its provenance is in its header),
# found from the package's location so that a page links it from wherever the page is written.
REPO_ROOT = Path(__file__).resolve().parents[2]
CLAIMS_DOC = REPO_ROOT / "docs" / "CLAIMS.md"
# The rule versions whose verdicts the summary shows: the current one, then the one before it (when there is one).
SUMMARY_VERSIONS = (CURRENT_VERSION, *RULE_VERSIONS[-2:-1])


def number(x: float) -> str:
    """A measured number: 4 significant digits (exponent form below 1e-4), whole numbers from 1e4 up."""
    if math.isnan(x):
        return "nan"
    return f"{x:.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def paper_cell(value: PaperValue | None) -> str:
    """The paper's value as the table shows it ("—" when the paper gives none)."""
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:g}"


def estimate_cell(estimate: Estimate | None) -> str:
    """``mean [low, high]`` (just the mean without an interval; "—" when nothing was measured)."""
    if estimate is None:
        return "—"
    if math.isnan(estimate.low) or math.isnan(estimate.mean):
        return number(estimate.mean)
    return f"{number(estimate.mean)} [{number(estimate.low)}, {number(estimate.high)}]"


def rule_cell(rule: Rule, estimate: Estimate | None) -> str:
    """The estimate of a rule's statistic as the rule tests it: a tolerance rule ``|a - b| <= x`` shows ``|mean|``
    and its interval's largest distance from zero before the signed mean and interval it is decided on."""
    if estimate is None or rule.op not in ("within", "beyond") or math.isnan(estimate.mean):
        return estimate_cell(estimate)
    farthest = max(abs(estimate.low), abs(estimate.high)) if not math.isnan(estimate.low) else math.nan
    return f"\\|mean\\| {number(abs(estimate.mean))}, up to {number(farthest)}; signed {estimate_cell(estimate)}"


def claim_page_name(claim: Claim) -> str:
    """File name of a claim's table under ``results/claims/``."""
    return f"{claim.id}_{claim.slug}.md"


def claims_doc_link(page: str | Path) -> str:
    """The relative link from the markdown file ``page`` (written there, relative to the working directory or
    absolute) to the shipped claims list ``CLAIMS_DOC``, with forward slashes: ``../../docs/CLAIMS.md`` from
    ``results/claims/``."""
    return Path(os.path.relpath(CLAIMS_DOC, Path(page).resolve().parent)).as_posix()


def cite_claims_doc(text: str, page: str | Path) -> str:
    """``text`` with each mention of ``CLAIMS.md`` turned into a link to the shipped copy from ``page``."""
    return text.replace("CLAIMS.md", f"[CLAIMS.md]({claims_doc_link(page)})")


def default_page(scale: str, claim: Claim) -> Path:
    """Where the claims plugin writes ``claim``'s page at ``scale`` without ``--claims-results``."""
    results = REPO_ROOT / "results"
    return (results if scale == REFERENCE_SCALE else results / scale) / "claims" / claim_page_name(claim)


@dataclass(frozen=True)
class PageContext:
    """Where a claim page's numbers come from: scale, run file, the run's provenance (commit, dirty flag,
    date), the seeds, the recorded test draw, and the runs (config digests) the claim trained or loaded; and
    the file the page is written to, which its links are relative to (None: where the claims plugin writes it
    by default, ``default_page``)."""

    scale: str
    run_name: str
    provenance: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    test_draw: Mapping[str, Any] = field(default_factory=dict)
    runs: tuple[Mapping[str, Any], ...] = ()
    page: Path | None = None


def provenance_lines(context: PageContext) -> list[str]:
    """Markdown lines stating a page's provenance: commit and dirty flag, date, seeds, test draw and sizes, and
    the config digest of every run the claim used (deduplicated, grouped by method and constraint)."""
    prov = context.provenance
    dirty = {True: "**dirty**", False: "clean", None: "unknown"}[prov.get("dirty")]
    draw = "; ".join(f"{k}: {v.get('family', k)} {v['split']} seed {v['seed']}, "
                     f"{v['n'] if 'n' in v else 'at most ' + str(v['n_at_most'])} problems"
                     for k, v in context.test_draw.items()) or "not recorded"
    lines = [f"- commit `{prov.get('commit') or 'unknown'}` ({dirty} tree), run `{context.run_name}`, scale "
             f"`{context.scale}`, {prov.get('utc', 'date unknown')}",
             f"- seeds: {', '.join(map(str, context.seeds)) or 'none'}",
             f"- test draw (every arm scored on the same problems): {draw}"]
    arms: dict[str, set[str]] = {}
    for r in context.runs:
        arms.setdefault(f"{r['objective']}/{r['constraint']} {r['organism']} {r['steps']} steps", set()).add(
            f"{r['digest']} (seed {r['seed']})")
    lines += [f"- runs `{name}`: {', '.join(sorted(digests))}" for name, digests in sorted(arms.items())]
    return lines


def _rule_rows(claim: Claim, results: Iterable[RuleResult], label: str) -> list[str]:
    """One row per rule result (``label``: ``v2``, ``v3``, ``v3 guard``), its guards' rows after it; the verdict
    cell carries the result's note."""
    rows = []
    for r in results:
        n = r.estimate.n if r.estimate else 0
        problems = f" x {r.estimate.problems}" if r.estimate and r.estimate.problems else ""
        rule = str(dataclasses.replace(r.rule, guards=())).replace("|", "\\|")  # a bare pipe would split the cell
        verdict = f"{r.verdict.value} ({r.note})".replace("|", "\\|") if r.note else r.verdict.value
        rows.append(f"| {label} `{rule}` | {paper_cell(claim.paper_value(r.rule))} | "
                    f"{rule_cell(r.rule, r.estimate)} | {n}{problems} | {verdict} |")
        rows += _rule_rows(claim, r.guards, f"{label.split()[0]} guard")
    return rows


def claim_table(result: ClaimResult, context: PageContext) -> str:
    """A claim's page: its sentence and source (linking the claims list, ``CLAIMS_DOC``, from where the page is
    written), the verdict under each rule version, provenance, then one row per decision rule of each version
    (with its verdict) and one per recorded ``arm.metric``: paper value | measured mean [interval] | seeds (x
    problems) | verdict. The interval's kind is stated above the table."""
    claim = result.claim
    page = context.page or default_page(context.scale, claim)
    note = f"; paper numbers: {cite_claims_doc(claim.paper_note, page)}" if claim.paper_note else ""
    versions = ", ".join(f"rules v{v}: {verdict.value}" for v, (verdict, _) in sorted(result.versions.items()))
    lines = [
        f"# {claim.id} {claim.slug}: **{result.verdict.value}**",
        "",
        f"> {claim.statement}",
        "",
        f"Source: {claim.source}{note}; claim {claim.id} of the claims list, [CLAIMS.md]({claims_doc_link(page)}). "
        f"Metric: {claim.metric}. Verdicts: {versions}. Generated by the claims plugin; do not edit.",
        "",
        *provenance_lines(context),
        "",
        f"Intervals: v1 rules, {BOOTSTRAP_LABEL}; v2 rules, {T_LABEL} where the arms' per-problem scores pair "
        f"them (n = seeds x problems), else {SEED_T_LABEL} (n = seeds); v3 rules and measured rows, "
        f"{FLOORED_LABEL}, else {DISTINCT_SEED_LABEL} (n = distinct seeds). A v3 guard must hold for its rule to "
        "be REPRODUCED: that the arms it compares moved.",
        "",
        *([f"Not decided: {NOT_DECIDED[claim.id]}.", ""] if claim.id in NOT_DECIDED else []),
        "| quantity | paper | measured mean [interval] | n | verdict |",
        "|---|---|---|---|---|",
    ]
    for version, (_, rules) in sorted(result.versions.items()):
        lines += _rule_rows(claim, rules, f"v{version}")
    for key, estimate in result.measured.items():
        problems = f" x {estimate.problems}" if estimate.problems else ""
        lines.append(f"| {key} | {paper_cell(claim.paper.get(key))} | {estimate_cell(estimate)} | "
                     f"{estimate.n}{problems} | |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SummaryEntry:
    """One claim's line of the summary: its verdict under each rule version, decided again from the saved rows
    (``verdicts``: version -> verdict), the verdict saved with the run and the rule version it was saved under,
    the scale, the run file it came from and that run's commit."""

    verdicts: Mapping[int, str]
    saved: str
    saved_version: int
    scale: str
    run_name: str
    commit: str = ""


def summary_table(claims: Iterable[Claim], latest: Mapping[str, SummaryEntry], page: Path | None = None) -> str:
    """One line per registered claim: id, slug (linked to its page when run), source, its verdict under the
    current rule version and the one before it (``SUMMARY_VERSIONS``), the verdict saved with the run (and its
    version), scale, run, commit (first 8 characters); claims without a saved result show "not run". Given the
    file ``page`` the table is written to, a line before it links the claims list (``CLAIMS_DOC``) from there."""
    header = [f"verdict (rules v{CURRENT_VERSION})", *(f"rules v{v}" for v in SUMMARY_VERSIONS[1:]), "saved verdict"]
    cite = [f"The claims, as listed in [CLAIMS.md]({claims_doc_link(page)}):", ""] if page is not None else []
    lines = [*cite, f"| id | claim | source | {' | '.join(header)} | scale | run | commit |",
             "|---|---|---|" + "---|" * (len(header) + 3)]
    for claim in claims:
        entry = latest.get(claim.id)
        if entry is None:
            lines.append(f"| {claim.id} | {claim.slug} | {claim.source} | {NOT_RUN} |" + " |" * (len(header) + 2))
        else:
            link = f"[{claim.slug}](claims/{claim_page_name(claim)})"
            verdicts = " | ".join(entry.verdicts[v] for v in SUMMARY_VERSIONS)
            lines.append(f"| {claim.id} | {link} | {claim.source} | {verdicts} | {entry.saved} "
                         f"(v{entry.saved_version}) | {entry.scale} | {entry.run_name} | {entry.commit[:8]} |")
    return "\n".join(lines) + "\n"
