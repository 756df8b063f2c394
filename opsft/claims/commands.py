"""``opsft claims list``, ``compare``, ``verdicts`` and ``summary``: saved claims runs outside a pytest session, in
the manner of ``pytest-benchmark list`` / ``compare``. ``summary`` rewrites a results folder's claims summary
from saved runs under the current rules.

``list`` shows every saved run under a storage folder (``.claims`` and its per-scale subfolders): scale, commit,
dirty flag, date, claims and seeds; a storage folder that does not exist is an error, one that holds no run yet
an empty table (exit 0: nothing saved there yet is no fault). ``verdicts RUN...`` decides the claims of saved
runs again from their recorded rows under every registered rule version (the newest run that holds a claim
counts), so a run saved under older rules can be read under the current ones. ``compare A B`` shows the two
runs (commit, tree, date, CPU), then per claim the verdict change under each rule version and the change of
every measured mean, with B's interval, and ends with one line on stderr saying how many means moved past a
tolerance (by default the ones CI checks the `ci` baseline with, ``CI_TOLERANCES``). Each of its ``-k`` must
match a registered claim id. A run file that is not a valid claims run (``opsft.claims.storage.validate_run``)
stops every command with one line naming the file, the claim and the field.

``compare``'s exit status: 0 when no mean moved past a tolerance, 1 when one did (a real difference of the
means, as CI judges it; the table marks it FAIL and the last line counts them). An error of the command itself
also exits 1 but prints ``opsft: error: ...`` instead of the table. A run with one seed (the `ci` scale) has no
interval: the table says so and shows none, and the means are judged against the tolerances alone; an interval
that does not exist never fails a comparison.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from opsft.claims.compare import CI_TOLERANCES, Change, Threshold, compare, parse_threshold
from opsft.claims.registry import CLAIMS, RULE_VERSIONS
from opsft.claims.storage import (
    load_run,
    read_run,
    run_cpu,
    run_numerics,
    saved_runs,
    summary_entry,
    write_summary,
)
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


def run_seeds(run: Mapping, claim_id: str) -> list[int] | None:
    """The distinct seeds a saved run holds for ``claim_id`` (None when the run does not record them)."""
    seeds = run["claims"][claim_id].get("seeds")
    return None if seeds is None else sorted(set(seeds))


def one_seed(run: Mapping, claim_ids: Sequence[str]) -> list[str]:
    """The claims of ``claim_ids`` that ``run`` holds one seed of (so no interval of them exists)."""
    return [c for c in claim_ids if (seeds := run_seeds(run, c)) is not None and len(seeds) == 1]


def interval_cell(estimate: Mapping, seeds: Sequence[int] | None) -> str:
    """B's interval: ``[low, high]``; "—" when the run saved none; when it is undefined, why: one seed, or seeds
    whose results were identical and count once (v3 intervals are over distinct seeds)."""
    if estimate.get("low") is None:
        return "—"
    low, high = estimate["low"], estimate["high"]
    if not (math.isnan(low) or math.isnan(high)):
        return f"[{number(low)}, {number(high)}]"
    if seeds is not None and len(seeds) == 1:
        return "none (one seed)"
    if estimate.get("n") == 1:
        return "none (identical seeds, counted once)" if seeds else "none (n = 1)"
    return "none"


def run_line(label: str, ref: str, run: Mapping) -> str:
    """A markdown item naming run ``label`` (its file stem, else ``ref``): scale, commit (12 characters), tree,
    date, CPU and numerics."""
    prov = run.get("provenance") or {}
    name = f"{run['number']:04d}_{run['name']}" if isinstance(run.get("number"), int) and run.get("name") else ref
    tree = {True: "dirty", False: "clean"}.get(prov.get("dirty"), "tree unknown")
    return (f"- {label}: `{name}`, scale {run['scale']}, commit {(prov.get('commit') or '?')[:12]} ({tree}), "
            f"{prov.get('utc', 'date unknown')}, {run_cpu(run) or 'CPU unknown'}, {run_numerics(run)} numerics")


def compare_notes(a: Mapping, b: Mapping, claim_ids: Sequence[str]) -> list[str]:
    """Lines that say what the comparison cannot show: the numerics differ, or both are native and the CPUs
    differ (a run's numbers then depend on the CPU's kernels, ``opsft.claims.storage.load_baseline``), and B holds
    one seed of every claim (no interval)."""
    notes = []
    if run_numerics(a) != run_numerics(b):
        notes.append(f"A and B ran under different numerics ({run_numerics(a)}; {run_numerics(b)}): their means "
                     "differ by the kernels as well as by the code.")
    elif run_numerics(a) == "native" and run_cpu(a) and run_cpu(b) and run_cpu(a) != run_cpu(b):
        notes.append(f"A and B were measured on different CPUs ({run_cpu(a)}; {run_cpu(b)}) under native numerics: "
                     "their means differ by the CPU's kernels as well as by the code, so CI compares native runs "
                     "of one CPU model only.")
    single = one_seed(b, claim_ids)
    if single and len(single) == len(claim_ids):
        seeds = sorted({s for c in single for s in run_seeds(b, c) or ()})
        notes.append(f"B holds one seed of every claim compared (seed {', '.join(map(str, seeds))}), so no interval "
                     "exists and none is shown; each mean is judged against the tolerances alone.")
    return notes


def compare_table(a: Mapping, b: Mapping, claim_ids: Sequence[str], thresholds: Sequence[Threshold]) -> tuple[str, bool]:
    """Markdown comparison of runs ``a`` -> ``b`` over ``claim_ids`` (present in both): per claim its verdicts
    under each rule version, then each measured mean of both runs with the delta and B's interval (``none
    (one seed)`` where B holds one seed: no interval exists; a line under the claim says so unless every claim
    compared is so, which ``compare_notes`` says once); and whether any mean broke a threshold
    (``opsft.claims.compare.compare``)."""
    lines, failed = [], False
    changes = compare({c: b["claims"][c] for c in claim_ids}, {c: a["claims"][c] for c in claim_ids}, thresholds)
    single = one_seed(b, claim_ids)
    for claim_id in claim_ids:
        va, vb = _verdicts(a["claims"][claim_id]), _verdicts(b["claims"][claim_id])
        versions = ", ".join(f"v{v}: {va.get(v, '—')} -> {vb.get(v, '—')}" for v in sorted(va.keys() | vb.keys()))
        lines += ["", f"## {claim_id} ({versions})", ""]
        seeds = run_seeds(b, claim_id)
        if claim_id in single and len(single) < len(claim_ids):
            lines += [f"B holds one seed of {claim_id} (seed {seeds[0]}): no interval exists.", ""]
        lines += ["| quantity | A | B | B - A | B's interval | |", "|---|---|---|---|---|---|"]
        measured = b["claims"][claim_id]["measured"]
        for change in (c for c in changes if c.claim == claim_id):
            mark = "FAIL" if change.failed else change.direction
            lines.append(f"| {change.key} | {number(change.baseline)} | {number(change.current)} | "
                         f"{number(change.current - change.baseline)} | {interval_cell(measured[change.key], seeds)} | "
                         f"{mark} |")
            failed |= change.failed
    return "\n".join(lines).lstrip("\n") + "\n", failed


def outcome_line(changes: Sequence[Change], thresholds: Sequence[Threshold]) -> str:
    """The comparison's last line: how many means moved past a tolerance (and so the exit status)."""
    tolerances = ", ".join(f"{t.metric}:{t.tolerance:g}{'%' if t.relative else ''}" for t in thresholds) or "none"
    past = sum(c.failed for c in changes)
    unchanged = sum(c.unchanged for c in changes)
    counts = f"{len(changes)} means compared, {unchanged} unchanged"
    if past:
        return (f"{past} of {len(changes)} means moved past the tolerances ({tolerances}; rows marked FAIL): "
                f"{counts}; exit 1")
    return f"no mean moved past the tolerances ({tolerances}): {counts}; exit 0"


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
    """``opsft claims compare A B``: the runs, notes, the table on stdout and the outcome line on stderr; 1 when
    a mean moved past a tolerance, else 0 (also when B holds one seed and no interval exists). A ``-k`` that
    selects no registered claim is an error (``check_patterns``), as is one that selects no claim of both runs."""
    check_patterns(args.k or ())
    a, b = resolve(args.a, args.storage), resolve(args.b, args.storage)
    common = sorted(a["claims"].keys() & b["claims"].keys())
    chosen = [c for c in common if not args.k or any(selects(k, c) for k in args.k)]
    if not chosen:
        raise ValueError(f"no claim of both runs matches -k {args.k}; in both: {', '.join(common) or 'none'}")
    thresholds = [parse_threshold(t) for t in (args.fail or CI_TOLERANCES)]
    table, failed = compare_table(a, b, chosen, thresholds)
    notes = "".join(f"{note}\n\n" for note in compare_notes(a, b, chosen))
    print(f"{run_line('A', args.a, a)}\n{run_line('B', args.b, b)}\n\n{notes}{table}", end="")
    changes = compare({c: b["claims"][c] for c in chosen}, {c: a["claims"][c] for c in chosen}, thresholds)
    print(outcome_line(changes, thresholds), file=sys.stderr)
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

