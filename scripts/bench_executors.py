"""Wall time of executing a main job's plan (calibration, claims, map) with each executor: the local one with 1
and with 2 worker processes, and Ray on a local instance of 2 CPUs. Each starts from a cache that holds only the
plan's organisms and the C++ extensions (built once beforehand, not timed) and runs ``opsft execute`` in a fresh process, so the time
includes building the plan and, for Ray, starting the instance. Every executor must train the same runs bit for
bit (weights' SHA-256 and untimed metrics, ``opsft.runs.finished_fingerprints``); Ray's overhead per run is
(Ray's wall - local 2's wall) / runs. Writes section "executors" of results/perf.md; the raw figures go to
results/executors.json, updated after every execution, so an interrupted benchmark keeps what it measured.

Usage: python scripts/bench_executors.py [--scale smoke] [--scale ci] [--work DIR] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from opsft.io import atomic_write_json, update_markdown_section
from opsft.provenance import provenance
from opsft.runs import finished_fingerprints

EXECUTORS = {"ray, 2 CPUs": ("--executor", "ray", "--jobs", "2"), "local, 2 workers": ("--jobs", "2"),
             "local, 1 worker": ("--jobs", "1")}


SEEDED = ("organisms", "extensions")  # what every timed execution finds in its cache


def seed_cache(scale: str, cache: Path) -> None:
    """Build (or find) in ``cache`` the organisms the plan of ``scale`` needs and the C++ extensions."""
    from opsft.extensions import CSRC, build
    from opsft.plan import build_plan
    from opsft.pretraining import build_organism

    os.environ["OPSFT_CACHE"] = str(cache)
    for source in sorted(CSRC.glob("*.cpp")):
        build(source.stem)
    for name in sorted(build_plan(scale).organisms):
        build_organism(name, cache)


def executed(scale: str, flags: tuple[str, ...], seed: Path, cache: Path) -> dict:
    """Run ``opsft execute --scale SCALE FLAGS`` into ``cache``, seeded with ``seed``'s organisms and
    extensions; its wall time, runs trained and the summed per-run training time."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    for folder in SEEDED:
        shutil.copytree(seed / folder, cache / folder, ignore=shutil.ignore_patterns("*.lock"))
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "opsft.cli", "execute", "--scale", scale, *flags], check=True,
                   env={**os.environ, "OPSFT_CACHE": str(cache)})
    wall = time.monotonic() - start
    runs = [json.loads(p.read_text())["wall_time"] for p in (cache / "runs").glob("*/result.json")]
    return {"wall_s": wall, "runs": len(runs), "train_s": sum(runs)}


def render(figures: dict) -> str:
    """The markdown section: one row per scale and executor, the speed-up over one worker and Ray's overhead."""
    prov = provenance()
    lines = ["Executors: wall seconds of `opsft execute --scale S` from a cache holding only the organisms and C++ "
             "extensions (built beforehand, not timed), in a fresh process (plan building and Ray's start included). "
             "`python scripts/bench_executors.py`",
             f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), {prov['machine']['cpu']}, "
             f"{prov['machine']['cores']} cores, load average {os.getloadavg()[0]:.1f} at the end, {prov['utc']}", "",
             "| scale | executor | runs | wall (s) | summed run time (s) | speed-up over 1 worker | Ray's overhead per run (s) "
             "| same runs as the first executor |", "|---|---|---|---|---|---|---|---|"]
    for scale, rows in figures.items():
        one, local2 = rows.get("local, 1 worker"), rows.get("local, 2 workers")
        for name, row in rows.items():
            speedup = f"{one['wall_s'] / row['wall_s']:.2f}x" if one else "-"
            overhead = (f"{(row['wall_s'] - local2['wall_s']) / row['runs']:.2f}" if name.startswith("ray") and local2
                        else "-")
            lines.append(f"| {scale} | {name} | {row['runs']} | {row['wall_s']:.0f} | {row['train_s']:.0f} | "
                         f"{speedup} | {overhead} | {'yes' if row['same_runs'] else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    """Build the organisms, execute each scale's plan with each executor, compare the runs, write the section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", action="append", help="plans to execute (default: smoke and ci)")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "opsft-bench-executors")
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    raw = Path(args.out).with_name("executors.json")
    figures: dict = {}
    for scale in args.scale or ["smoke", "ci"]:
        seed = args.work / scale / "seed"
        seed_cache(scale, seed)
        first = None
        for name, flags in EXECUTORS.items():
            cache = args.work / scale / name.replace(", ", "-").replace(" ", "")
            row = executed(scale, flags, seed, cache)
            prints = finished_fingerprints(cache)
            first = first or prints
            figures.setdefault(scale, {})[name] = {**row, "same_runs": prints == first}
            atomic_write_json(raw, figures)
            print(scale, name, figures[scale][name], flush=True)
    body = render(figures)
    print(body)
    update_markdown_section(args.out, "executors", body)


if __name__ == "__main__":
    main()
