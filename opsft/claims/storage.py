"""Saved claims runs: numbered JSON files ``NNNN_NAME.json`` in a storage folder, and the results pages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from filelock import FileLock

from opsft.claims.evaluate import ClaimResult
from opsft.claims.registry import CLAIMS
from opsft.claims.tables import PageContext, SummaryEntry, claim_page_name, claim_table, summary_table
from opsft.io import atomic_write_json, atomic_write_text, update_markdown_section
from opsft.plots import plot_claim

_RUN_FILE = re.compile(r"^(\d{4})_(.+)\.json$")
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# The scales whose saved runs are the committed reference results: saving into them needs a clean tree, and
# their summary comes from one run file (one commit).
REFERENCE_SCALES = ("full", "regime")


def saved_runs(storage: Path) -> list[Path]:
    """The run files in ``storage``, oldest (lowest number) first."""
    if not storage.is_dir():
        return []
    return sorted((p for p in storage.iterdir() if _RUN_FILE.match(p.name)), key=lambda p: p.name)


def save_run(storage: Path, name: str, payload: Mapping) -> Path:
    """Write ``payload`` as the next numbered file ``NNNN_<name>.json`` (numbering under a file lock, so
    concurrent sessions never share a number); returns its path."""
    if not NAME.match(name):
        raise ValueError(f"claims run name {name!r} may hold only letters, digits, '_', '.', '-'")
    storage.mkdir(parents=True, exist_ok=True)
    with FileLock(str(storage / ".lock")):
        runs = saved_runs(storage)
        number = int(_RUN_FILE.match(runs[-1].name).group(1)) + 1 if runs else 1
        path = storage / f"{number:04d}_{name}.json"
        atomic_write_json(path, {**payload, "name": name, "number": number})
    return path


def read_run(path: Path) -> dict:
    """A run file's content; a ValueError naming the file when it is missing, unreadable or not a claims run."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"claims run file {path}: cannot be read as JSON ({err})") from err
    if not isinstance(run, dict) or not isinstance(run.get("claims"), dict) or "scale" not in run:
        raise ValueError(f"claims run file {path}: not a claims run (no 'scale' and 'claims' keys)")
    return run


def _named(storage: Path, ref: str | None) -> list[Path]:
    """The run files ``ref`` names (every run for None, a number, or a name), oldest first; FileNotFoundError
    listing what is saved when none."""
    runs = saved_runs(storage)
    if ref is None:
        matches = runs
    elif ref.isdigit():
        matches = [p for p in runs if int(_RUN_FILE.match(p.name).group(1)) == int(ref)]
    else:
        matches = [p for p in runs if _RUN_FILE.match(p.name).group(2) == ref]
    if not matches:
        have = ", ".join(p.stem for p in runs) or "none"
        raise FileNotFoundError(f"no saved claims run {ref or '(latest)'} in {storage}; saved: {have}")
    return matches


def load_run(storage: Path, ref: str | None = None) -> dict:
    """A saved run: the latest when ``ref`` is None, else the one numbered ``ref`` (e.g. ``3`` or ``0003``)
    or the latest named ``ref``. Raises FileNotFoundError listing what is saved, ValueError naming a corrupt
    file."""
    return read_run(_named(storage, ref)[-1])


def run_cpu(run: Mapping) -> str | None:
    """The CPU model a saved run was measured on (None when its provenance does not say)."""
    return run.get("provenance", {}).get("machine", {}).get("cpu")


def load_baseline(storage: Path, ref: str | None, cpu: str) -> tuple[dict | None, str]:
    """The run ``load_run(storage, ref)`` would pick among those measured on ``cpu``, and a line saying which;
    None and a line naming the CPUs saved when no such run was measured on ``cpu``. A run's weights, and so its
    accuracies, depend on the CPU model's kernels (the same commit trained a different ``micro`` base on an AMD
    EPYC than on an Intel Xeon), so numbers compare only within one CPU model."""
    runs = [(path, read_run(path)) for path in _named(storage, ref)]
    same = [(path, run) for path, run in runs if run_cpu(run) == cpu]
    if same:
        return same[-1][1], f"baseline {same[-1][0]} (measured on this CPU, {cpu})"
    cpus = sorted({str(run_cpu(run)) for _, run in runs})
    return None, (f"numbers not compared: no saved run {ref or '(latest)'} in {storage} was measured on this CPU "
                  f"({cpu}; saved runs come from {', '.join(cpus)}); save one here with --claims-save")


def summary_entry(run: Mapping, claim_id: str, run_name: str) -> SummaryEntry:
    """A claim's line of the summary from a saved run (runs saved before rule versions hold only version 1's
    verdict, shown as such)."""
    result = run["claims"][claim_id]
    versions = result.get("versions")
    current = result["verdict"] if versions else "— (v1 only)"
    v1 = versions["1"]["verdict"] if versions else result["verdict"]
    return SummaryEntry(current, run["scale"], run_name, v1, (run.get("provenance") or {}).get("commit") or "")


def latest_verdicts(storage: Path, only: Path | None = None) -> dict[str, SummaryEntry]:
    """For each claim in any saved run, the verdict of the newest run that holds it (a claim that errored there
    shows ERROR, not an older verdict); from the run file ``only`` alone when given."""
    latest: dict[str, SummaryEntry] = {}
    for path in [only] if only is not None else saved_runs(storage):
        run = read_run(path)
        for claim_id in run["claims"]:
            latest[claim_id] = summary_entry(run, claim_id, path.stem)
    return latest


def write_pages(results_dir: Path, results: Iterable[ClaimResult], payload: Mapping, run_file: Path,
                storage: Path) -> list[Path]:
    """Write each claim's page (its table, provenance and figure) under ``results_dir/claims/`` and the summary
    into the ``claims`` section of ``results_dir/README.md``: at a reference scale (``REFERENCE_SCALES``) from
    the run file ``run_file`` alone, so that every line comes from one commit; elsewhere the newest saved
    verdict of each claim."""
    scale, written = payload["scale"], []
    for r in results:
        record = payload["claims"][r.claim.id]
        context = PageContext(scale, run_file.stem, payload.get("provenance") or {}, tuple(record.get("seeds", ())),
                              payload.get("test_draw") or {}, tuple(record.get("runs", ())))
        page = results_dir / "claims" / claim_page_name(r.claim)
        figure = plot_claim(r.measured, r.claim.paper, f"{r.claim.id} {r.claim.slug}: {r.verdict.value} "
                            f"(scale {scale})", page.with_suffix(".png"))
        text = claim_table(r, context) + f"\n![{r.claim.id} by arm, intervals as in the table]({figure.name})\n"
        written += [atomic_write_text(page, text), figure]
    reference = scale in REFERENCE_SCALES
    origin = (f"Every line comes from run `{run_file.stem}` at commit `{(payload.get('provenance') or {}).get('commit')}`."
              if reference else "Each line is the newest saved run that holds the claim.")
    body = ("## Claims\n\nGenerated by the claims plugin (`pytest suite --scale S --claims-save NAME`); do not edit. "
            f"{origin}\n\n")
    readme = update_markdown_section(results_dir / "README.md", "claims", body + summary_table(
        CLAIMS.values(), latest_verdicts(storage, run_file if reference else None)))
    return [*written, readme]
