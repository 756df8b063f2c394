"""What pinned numerics (``opsft.numerics``) cost: step time pinned against native, written to section "numerics"
of results/perf.md.

Each measurement is a fresh process whose environment holds one mode (``OPSFT_NUMERICS``; native with none of
the pinned settings), on one torch thread, as the cached runs train:

- our trainer's GRPO / OPD / SFT / DFT steps of ``scripts/bench_trl.py`` (a fresh ``micro`` model, its FULL
  sizes), the median step after the warmup;
- one micro SFT run through ``opsft.runs.run`` (the reference row's SFT source, ``RUN_STEPS`` steps, on the
  ``micro`` organism of the cache given for that mode; the organisms differ by mode, so each mode needs its own
  cache, and a mode without one is left out), the median of its recorded step times past the fifth; repeat r
  trains seed r, so no repeat reads another's cached run.

The modes alternate within each repeat (reversed on odd repeats); the table shows the median over repeats and
the ratio pinned / native. Timings on a busy machine are unreliable: rerun on a quiet one.

    python scripts/bench_numerics.py [--repeats 3] [--native-cache DIR] [--pinned-cache DIR] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path[:0] = [str(SCRIPTS.parent), str(SCRIPTS)]

MODES = ("native", "pinned")
RUN_STEPS = 60


def child(cache: str | None, seed: int) -> dict[str, float]:
    """In a process of one numerics mode: median step seconds of each bench_trl method and of the micro run."""
    import bench_trl
    import torch

    from ablations.calibration import CANDIDATE_BEST, SCALES
    from opsft.calibrate import method_config
    from opsft.runs import run

    torch.set_num_threads(1)
    out = {}
    for method in bench_trl.METHODS:
        clock = bench_trl.StepClock()
        bench_trl.run_ours(method, bench_trl.FULL, clock)
        out[method] = statistics.median(clock.step_times(bench_trl.FULL.warmup))
    if cache:
        os.environ["OPSFT_CACHE"] = cache
        config = method_config("sft", CANDIDATE_BEST[0], {**SCALES["candidates"], "steps": RUN_STEPS}, seed,
                               "micro")
        result = run(config)
        out["micro SFT run"] = statistics.median(m["t_step"] for m in result.metrics[5:])
    return out


def measure(mode: str, cache: str | None, seed: int) -> dict[str, float]:
    """``child`` in a fresh interpreter under ``mode``."""
    from opsft.numerics import PINNED_SETTINGS

    env = {k: v for k, v in os.environ.items() if k not in PINNED_SETTINGS}
    env["OPSFT_NUMERICS"] = mode
    done = subprocess.run([sys.executable, __file__, "--child", "--seed", str(seed),
                           *(["--cache", cache] if cache else [])], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(times: dict[str, dict[str, list[float]]], repeats: int) -> str:
    """The markdown section: one row per measurement, median ms per mode and the ratio."""
    from opsft.provenance import provenance

    prov = provenance()
    names = [n for n in times["native"] if n in times["pinned"]]
    lines = [f"Step time under pinned numerics (`opsft.numerics`: ATen AVX2 kernels, MKL's AVX2 path, oneDNN up to "
             f"AVX2, C++ kernels for x86-64-v3) against native, one torch thread, median of {repeats} repeats "
             f"(`python scripts/bench_numerics.py`), on {prov['machine']['cpu']}, commit "
             f"{(prov['commit'] or '?')[:12]}{' (dirty)' if prov['dirty'] else ''}.", "",
             "| step | native ms | pinned ms | pinned / native |", "|---|---|---|---|"]
    for name in names:
        native, pinned = (statistics.median(times[m][name]) for m in MODES)
        lines.append(f"| {name} | {1e3 * native:.1f} | {1e3 * pinned:.1f} | {pinned / native:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--native-cache", help="a cache holding the native-numerics micro organism")
    parser.add_argument("--pinned-cache", help="a cache holding the pinned-numerics micro organism")
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.cache, args.seed)))
        return
    caches = {"native": args.native_cache, "pinned": args.pinned_cache}
    times: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    for r in range(args.repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            for name, seconds in measure(mode, caches[mode], r).items():
                times[mode].setdefault(name, []).append(seconds)
                print(f"repeat {r + 1}/{args.repeats} {mode} {name}: {1e3 * seconds:.1f} ms", flush=True)
    body = render(times, args.repeats)
    print(body)
    from opsft.io import update_markdown_section

    update_markdown_section(args.out, "numerics", body)


if __name__ == "__main__":
    main()
