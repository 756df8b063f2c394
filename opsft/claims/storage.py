"""Saved claims runs: numbered JSON files ``NNNN_NAME.json`` in a storage folder, and the results pages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from opsft.claims.evaluate import CURRENT_VERSION, ClaimResult, evaluate
from opsft.claims.registry import CLAIMS
from opsft.claims.stats import Verdict
from opsft.claims.tables import PageContext, SummaryEntry, claim_page_name, claim_table, summary_table
from opsft.io import atomic_write_json, atomic_write_text, update_markdown_section
from opsft.plots import plot_claim

_RUN_FILE = re.compile(r"^(\d{4})_(.+)\.json$")
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# The scales whose saved runs are the committed reference results: saving into them needs a clean tree, and
# their summary comes from one run file (one commit).
REFERENCE_SCALES = ("full", "reference", "regime")


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
    """A run file's content; a ValueError naming the file when it is missing, unreadable or not a valid claims run
    (``validate_run``)."""
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"claims run file {path}: cannot be read as JSON ({err})") from err
    return validate_run(path, run)


# What a field of a run file may hold, by the words an error names it with; no kind takes a bool (JSON true is no
# number).
_KINDS: dict[str, tuple[type, ...]] = {"a list": (list,), "an object": (dict,), "a string": (str,),
                                       "an integer": (int,), "a number": (int, float),
                                       "a string or a list": (str, list)}
_VERDICTS = tuple(v.value for v in Verdict)


def _check(value: Any, kind: str, field: str) -> Any:
    """``value`` when it is ``kind`` (a key of ``_KINDS``); a ValueError naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, _KINDS[kind]):
        raise ValueError(f"field {field!r} is {value!r:.60} ({type(value).__name__}), not {kind}")
    return value


def _field(record: Mapping, key: str, kind: str, prefix: str = "") -> Any:
    """``record[key]`` when present and ``kind``; a ValueError naming the field ``prefix + key`` otherwise."""
    if key not in record:
        raise ValueError(f"field {prefix + key!r} is missing")
    return _check(record[key], kind, prefix + key)


def _check_verdict(record: Mapping, prefix: str = "") -> None:
    """A ValueError naming the field when ``record["verdict"]`` is not a ``Verdict``."""
    verdict = _field(record, "verdict", "a string", prefix)
    if verdict not in _VERDICTS:
        raise ValueError(f"field {prefix + 'verdict'!r} is {verdict!r}, not one of {', '.join(_VERDICTS)}")


def _check_rows(rows: list) -> None:
    """A ValueError naming the field of the first bad row: each needs an ``arm``, an integer ``seed`` and
    ``values`` mapping metrics to numbers recorded once per seed, and its optional ``problems`` maps metrics to
    encoded scores (``opsft.claims.scored.encode``)."""
    recorded = set()
    for i, row in enumerate(rows):
        prefix = f"rows[{i}]."
        _check(row, "an object", f"rows[{i}]")
        arm, seed = _field(row, "arm", "a string", prefix), _field(row, "seed", "an integer", prefix)
        values = _field(row, "values", "an object", prefix)
        for metric, value in values.items():
            field = f"{prefix}values.{metric}"
            _check(value, "a number", field)
            if (seed, arm, metric) in recorded:
                raise ValueError(f"field {field!r} records {arm}.{metric} for seed {seed} a second time")
            recorded.add((seed, arm, metric))
        for metric in _check(row.get("problems", {}), "an object", f"{prefix}problems"):
            _field(row["problems"], metric, "a string or a list", f"{prefix}problems.")


def _check_record(claim_id: str, record: Any) -> None:
    """A ValueError naming the first bad field of a saved claim: its id (registered), its verdict (and each rule
    version's), rows, seeds and measured estimates, as the session saves them (``ClaimsSession.payload``)."""
    if claim_id not in CLAIMS:
        raise ValueError(f"field 'claims' holds {claim_id!r}, which is not a registered claim id; registered: "
                         f"{', '.join(CLAIMS)}")
    _check(record, "an object", f"claims.{claim_id}")
    _check_verdict(record)
    for version, saved in _check(record.get("versions", {}), "an object", "versions").items():
        _check(saved, "an object", f"versions.{version}")
        _check_verdict(saved, f"versions.{version}.")
    _check_rows(_field(record, "rows", "a list"))
    for i, seed in enumerate(_field(record, "seeds", "a list")):
        _check(seed, "an integer", f"seeds[{i}]")
    for key, estimate in _field(record, "measured", "an object").items():
        for name in ("mean", "low", "high"):
            _field(_check(estimate, "an object", f"measured.{key}"), name, "a number", f"measured.{key}.")


def validate_run(path: Path, run: Any) -> dict:
    """``run``, the content of the run file ``path``, when it is a claims run: a ``scale`` and ``claims`` holding
    registered claim ids, each with well-formed verdicts, rows, seeds and measured estimates; a ValueError naming
    the file, the claim and the field otherwise."""
    if not isinstance(run, dict) or not isinstance(run.get("claims"), dict) or "scale" not in run:
        raise ValueError(f"claims run file {path}: not a claims run (no 'scale' and 'claims' keys)")
    for claim_id, record in run["claims"].items():
        try:
            _check_record(claim_id, record)
        except ValueError as err:
            raise ValueError(f"claims run file {path}: claim {claim_id}: {err}") from None
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


def run_numerics(run: Mapping) -> str:
    """The numerics a saved run was measured under (``opsft.numerics.digest_tag``: ``pinned-N`` or ``native``);
    ``native`` for runs saved before the numerics were pinned."""
    return ((run.get("provenance") or {}).get("numerics") or {}).get("tag", "native")


def load_baseline(storage: Path, ref: str | None, cpu: str, numerics: str) -> tuple[dict | None, str]:
    """The run ``load_run(storage, ref)`` would pick among those comparable with this process (``numerics``, its
    ``digest_tag``, on CPU model ``cpu``), and a line saying which; None and a line saying why when there is none.
    Under pinned numerics a run's bits depend on the commit and the seed alone, so every run saved under the same
    pinned settings compares, on any CPU model; under native numerics its weights, and so its accuracies, depend
    on the CPU's kernels (the same commit trained a different ``micro`` base on an AMD EPYC than on an Intel
    Xeon), so only native runs of the same CPU model compare."""
    runs = [(path, read_run(path)) for path in _named(storage, ref)]
    pinned = numerics != "native"
    same = [(path, run) for path, run in runs
            if run_numerics(run) == numerics and (pinned or run_cpu(run) == cpu)]
    if same:
        where = "any CPU" if pinned else f"this CPU, {cpu}"
        return same[-1][1], f"baseline {same[-1][0]} ({numerics} numerics, comparable on {where})"
    saved = sorted({f"{run_numerics(run)} on {run_cpu(run)}" for _, run in runs})
    wanted = f"{numerics} numerics" if pinned else f"native numerics on this CPU ({cpu})"
    return None, (f"numbers not compared: no saved run {ref or '(latest)'} in {storage} was measured under "
                  f"{wanted}; saved runs: {', '.join(saved)}; save one here with --claims-save")


def summary_entry(run: Mapping, claim_id: str, run_name: str) -> SummaryEntry:
    """A claim's line of the summary: its saved rows decided again under every registered rule version (a claim
    saved as ERROR, its test failed, stays ERROR under each), beside the verdict saved with the run and the rule
    version it was saved under (the newest of its ``versions``; 1 for runs saved before rule versions)."""
    record = run["claims"][claim_id]
    result = evaluate(CLAIMS[claim_id], record["rows"])
    if record["verdict"] == Verdict.ERROR:
        result = result.errored()
    verdicts = {version: verdict.value for version, (verdict, _) in result.versions.items()}
    saved_versions = record.get("versions")
    saved_version = max(map(int, saved_versions)) if saved_versions else 1
    return SummaryEntry(verdicts, record["verdict"], saved_version, run["scale"], run_name,
                        (run.get("provenance") or {}).get("commit") or "")


def latest_verdicts(storage: Path, only: Path | None = None) -> dict[str, SummaryEntry]:
    """For each claim in any saved run, the summary line (``summary_entry``) of the newest run that holds it (a
    claim that errored there shows ERROR, not an older verdict); from the run file ``only`` alone when given."""
    latest: dict[str, tuple[dict, str]] = {}
    for path in [only] if only is not None else saved_runs(storage):
        run = read_run(path)
        latest.update({claim_id: (run, path.stem) for claim_id in run["claims"]})
    return {claim_id: summary_entry(run, claim_id, name) for claim_id, (run, name) in latest.items()}


def write_pages(results_dir: Path, results: Iterable[ClaimResult], payload: Mapping, run_file: Path,
                storage: Path) -> list[Path]:
    """Write each claim's page (its table, provenance and figure) under ``results_dir/claims/`` and the summary
    into the ``claims`` section of ``results_dir/README.md``: at a reference scale (``REFERENCE_SCALES``) from
    the run file ``run_file`` alone, so that every line comes from one commit; elsewhere the newest saved
    verdict of each claim."""
    scale, written = payload["scale"], []
    for r in results:
        record = payload["claims"][r.claim.id]
        page = results_dir / "claims" / claim_page_name(r.claim)
        context = PageContext(scale, run_file.stem, payload.get("provenance") or {}, tuple(record.get("seeds", ())),
                              payload.get("test_draw") or {}, tuple(record.get("runs", ())), page=page)
        figure = plot_claim(r.measured, r.claim.paper, f"{r.claim.id} {r.claim.slug}: {r.verdict.value} "
                            f"(scale {scale})", page.with_suffix(".png"))
        text = claim_table(r, context) + f"\n![{r.claim.id} by arm, intervals as in the table]({figure.name})\n"
        written += [atomic_write_text(page, text), figure]
    only = run_file if scale in REFERENCE_SCALES else None
    return [*written, write_summary(results_dir, storage, only)]


def write_summary(results_dir: Path, storage: Path, only: Path | None = None) -> Path:
    """The ``claims`` section of ``results_dir/README.md``: one line per registered claim, decided again from the
    saved rows under the current rules (``latest_verdicts``), from the run file ``only`` alone when given (a
    reference scale: every line from one commit), else from the newest saved run that holds each claim."""
    if only is not None:
        origin = f"Every line comes from run `{only.stem}` at commit `{(read_run(only).get('provenance') or {}).get('commit')}`."
    else:
        origin = f"Each line is the newest run saved in `{storage}` that holds the claim."
    body = ("## Claims\n\nGenerated by the claims plugin (`pytest suite --scale S --claims-save NAME`, or `opsft claims "
            f"summary`); do not edit. {origin} Verdicts are decided again from the saved rows under the current rules "
            f"(v{CURRENT_VERSION}); the saved verdict is the one saved with the run, under the rule version it names.\n\n")
    return update_markdown_section(results_dir / "README.md", "claims",
                                   body + summary_table(CLAIMS.values(), latest_verdicts(storage, only),
                                                        results_dir / "README.md"))
