"""``opsft claims list``, ``compare``, ``verdicts`` and ``summary``: saved claims runs outside a pytest session, in
the manner of ``pytest-benchmark list`` / ``compare``. ``summary`` rewrites a results folder's claims summary
from saved runs under the current rules.

``list`` shows every saved run under a storage folder (``.claims`` and its per-scale subfolders): scale, commit,
dirty flag, date, claims and seeds; a storage folder that does not exist is an error, one that holds no run yet
an empty table (exit 0: nothing saved there yet is no fault). ``verdicts RUN...`` decides the claims of saved
runs again from their recorded rows under every registered rule version (the newest run that holds a claim
counts), so a run saved under older rules can be read under the current ones. ``compare A B`` shows, per claim,
the verdict change under each rule version and the change of every measured mean, with B's interval; it exits 1
when a mean moves past a tolerance (by default the ones CI checks the `ci` baseline with, ``CI_TOLERANCES``),
and each of its ``-k`` must match a registered claim id. A run file that is not a valid claims run
(``opsft.claims.storage.validate_run``) stops every command with one line naming the file, the claim and the
field.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from opsft.claims.compare import CI_TOLERANCES, Threshold, compare, parse_threshold
from opsft.claims.registry import CLAIMS, RULE_VERSIONS
from opsft.claims.storage import load_run, read_run, saved_runs, summary_entry, write_summary
from opsft.claims.tables import number


def run_files(storage: Path) -> list[Path]:
    """The run files in ``storage`` and in its immediate subfolders (one per scale), oldest first per folder."""
    folders = [storage, *sorted(p for p in storage.iterdir() if p.is_dir())] if storage.is_dir() else []
    return [path for folder in folders for path in saved_runs(folder)]


def list_table(paths: Iterable[Path]) -> str:
    """One markdown line per run file: file, scale, commit (12 characters), tree, date, claims, seeds."""
    lines = ["| run | scale | commit | tree | date | claims | seeds |", "|---|---|---|---|---|---|---|"]
    for path in paths:
        run = read_run(path)
        prov = run.get("provenance") or {}
        seeds = sorted({s for record in run["claims"].values() for s in record.get("seeds", ())})
        tree = {True: "dirty", False: "clean"}.get(prov.get("dirty"), "?")
        lines.append(f"| {path} | {run['scale']} | {(prov.get('commit') or '?')[:12]} | {tree} | "
                     f"{prov.get('utc', '?')} | {len(run['claims'])} | {', '.join(map(str, seeds))} |")
    return "\n".join(lines) + "\n"


def resolve(ref: str, storage: Path) -> dict:
    """A run by file path, or by number or name inside ``storage`` (``opsft.claims.storage.load_run``)."""
    path = Path(ref)
    return read_run(path) if path.suffix == ".json" or path.is_file() else load_run(storage, ref)


def _verdicts(record: Mapping) -> dict[str, str]:
    """Version -> verdict of a saved claim (runs saved before rule versions hold version 1's only)."""
    versions = record.get("versions")
    if versions:
        return {v: r["verdict"] for v, r in versions.items()}
    return {"1": record["verdict"]}


def compare_table(a: Mapping, b: Mapping, claim_ids: Sequence[str], thresholds: Sequence[Threshold]) -> tuple[str, bool]:
    """Markdown comparison of runs ``a`` -> ``b`` over ``claim_ids`` (present in both): per claim its verdicts
    under each rule version, then each measured mean of both runs with the delta and B's interval; and whether
    any mean broke a threshold (``opsft.claims.compare.compare``)."""
    lines, failed = [], False
    changes = compare({c: b["claims"][c] for c in claim_ids}, {c: a["claims"][c] for c in claim_ids}, thresholds)
    for claim_id in claim_ids:
        va, vb = _verdicts(a["claims"][claim_id]), _verdicts(b["claims"][claim_id])
        versions = ", ".join(f"v{v}: {va.get(v, '—')} -> {vb.get(v, '—')}" for v in sorted(va.keys() | vb.keys()))
        lines += ["", f"## {claim_id} ({versions})", "", "| quantity | A | B | B - A | B's interval | |",
                  "|---|---|---|---|---|---|"]
        measured = b["claims"][claim_id]["measured"]
        for change in (c for c in changes if c.claim == claim_id):
            est = measured[change.key]
            interval = f"[{number(est['low'])}, {number(est['high'])}]" if est.get("low") is not None else "—"
            mark = "FAIL" if change.failed else change.direction
            lines.append(f"| {change.key} | {number(change.baseline)} | {number(change.current)} | "
                         f"{number(change.current - change.baseline)} | {interval} | {mark} |")
            failed |= change.failed
    return "\n".join(lines).lstrip("\n") + "\n", failed


def cmd_list(args: argparse.Namespace) -> int:
    """``opsft claims list``: a FileNotFoundError naming ``--storage`` when it is no folder; a folder that holds no
    run yet (nothing saved so far) prints the empty table, says so on stderr and exits 0."""
    if not args.storage.is_dir():
        raise FileNotFoundError(f"--storage {args.storage}: no such folder of claims runs")
    paths = run_files(args.storage)
    if not paths:
        print(f"no saved claims run in {args.storage} or its subfolders", file=sys.stderr)
    print(list_table(paths), end="")
    return 0


def selects(pattern: str, claim_id: str) -> bool:
    """Whether ``-k pattern`` selects ``claim_id``: the id contains it, case-insensitively (shell wildcards
    allowed)."""
    return fnmatch.fnmatch(claim_id.lower(), f"*{pattern.lower()}*")


def check_patterns(patterns: Sequence[str]) -> None:
    """A ValueError naming each ``-k`` pattern that selects no registered claim id, and listing those ids."""
    unknown = [k for k in patterns if not any(selects(k, claim_id) for claim_id in CLAIMS)]
    if unknown:
        raise ValueError(f"-k {', '.join(unknown)}: matches no registered claim id (a -k selects the ids that contain "
                         f"it, in any case); registered: {', '.join(CLAIMS)}")


def cmd_compare(args: argparse.Namespace) -> int:
    """``opsft claims compare A B``: the table on stdout; 1 when a mean moved past a tolerance. A ``-k`` that
    selects no registered claim is an error (``check_patterns``), as is one that selects no claim of both runs."""
    check_patterns(args.k or ())
    a, b = resolve(args.a, args.storage), resolve(args.b, args.storage)
    common = sorted(a["claims"].keys() & b["claims"].keys())
    chosen = [c for c in common if not args.k or any(selects(k, c) for k in args.k)]
    if not chosen:
        raise ValueError(f"no claim of both runs matches -k {args.k}; in both: {', '.join(common) or 'none'}")
    thresholds = [parse_threshold(t) for t in (args.fail or CI_TOLERANCES)]
    table, failed = compare_table(a, b, chosen, thresholds)
    print(table, end="")
    return 1 if failed else 0


def verdicts_table(runs: Sequence[tuple[str, Mapping]]) -> str:
    """Markdown: per claim of any of ``runs`` ((name, run) pairs of validated runs, oldest first; the newest
    holding a claim counts), the verdict saved with it and the verdicts recomputed from its rows under every rule
    version (``opsft.claims.storage.summary_entry``: a claim saved as ERROR stays ERROR)."""
    latest = {cid: (name, run) for name, run in runs for cid in run["claims"]}
    versions = " | ".join(f"rules v{v}" for v in RULE_VERSIONS)
    lines = [f"| claim | run | saved verdict | {versions} |", "|---|---|---|" + "---|" * len(RULE_VERSIONS)]
    for cid, (name, run) in sorted(latest.items()):
        entry = summary_entry(run, cid, name)
        now = " | ".join(entry.verdicts[v] for v in RULE_VERSIONS)
        lines.append(f"| {cid} {CLAIMS[cid].slug} | {name} | {entry.saved} | {now} |")
    return "\n".join(lines) + "\n"


def cmd_verdicts(args: argparse.Namespace) -> int:
    """``opsft claims verdicts RUN...``."""
    print(verdicts_table([(ref, resolve(ref, args.storage)) for ref in args.runs]), end="")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    """``opsft claims summary --storage S -o RESULTS [--only RUN]``: rewrite the summary of ``RESULTS/README.md``
    under the current rules from the runs saved in ``S`` (after a new rule version, without rerunning)."""
    if not args.storage.is_dir():
        raise FileNotFoundError(f"claims storage {args.storage} is not a folder")
    only = Path(args.only) if args.only else None
    print(write_summary(args.output, args.storage, only))
    return 0

