"""Start-up time of the `opsft` command line: `opsft --help` and every subcommand's `--help`, each in a fresh
Python process, with this checkout's parser and with the parser of commit 44326c9 (which imported every
subcommand's module, and so torch, transformers and matplotlib); written to results/perf.md, section "cli".

Usage: python scripts/bench_cli.py [--repeats 3] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from opsft.cli import build_parser
from opsft.io import update_markdown_section
from opsft.provenance import provenance

BASELINE = "44326c9"
CURRENT_CLI = "import sys; from opsft.cli import main; sys.exit(main())"  # what the `opsft` script runs


def help_argvs(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The ``--help`` command lines of ``parser`` and of all its subcommands, nested ones included."""
    argvs = [(*prefix, "--help")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                argvs += help_argvs(sub, (*prefix, name))
    return argvs


def baseline_cli() -> str:
    """The source of ``opsft/cli.py`` at commit BASELINE."""
    return subprocess.run(["git", "show", f"{BASELINE}:opsft/cli.py"], capture_output=True, text=True,
                          check=True).stdout


def seconds(code: str, argv: tuple[str, ...]) -> float:
    """Wall seconds of ``python -c CODE ARGV`` in a fresh process (which must exit with status 0)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *argv], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure(argvs: list[tuple[str, ...]], clis: dict[str, str],
            repeats: int) -> dict[tuple[str, ...], dict[str, float]]:
    """Median seconds per command line and CLI, over ``repeats`` rounds that alternate the CLIs."""
    runs = {argv: {name: [] for name in clis} for argv in argvs}
    for _ in range(repeats):
        for argv in argvs:
            for name, code in clis.items():
                runs[argv][name].append(seconds(code, argv))
    return {argv: {name: statistics.median(t) for name, t in by_cli.items()} for argv, by_cli in runs.items()}


def render(medians: dict[tuple[str, ...], dict[str, float]], repeats: int) -> str:
    """The markdown section: what was timed, provenance, and one row per command line (old, new, ratio)."""
    prov = provenance()
    machine = prov["machine"]
    lines = [
        "CLI start-up: seconds from launch to exit of `opsft ... --help` in a fresh `python` process, median "
        f"of {repeats} alternating rounds; the parser of commit {BASELINE} (it imported every subcommand's "
        "module: torch, transformers, matplotlib; the issue measured 5.0-5.7 s there) against this "
        "checkout's (it imports a subcommand's module only when the subcommand runs). Bare `python -c pass` "
        "for scale: "
        f"{seconds('pass', ()):.2f} s. `python scripts/bench_cli.py`",
        f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), python {prov['python']}, "
        f"torch {prov['torch']}, {machine['cpu']}, {machine['cores']} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end (other jobs inflate times), {prov['utc']}",
        "",
        f"| command | {BASELINE} (s) | now (s) | speed-up |",
        "|---|---|---|---|",
    ]
    for argv, m in medians.items():
        command = " ".join(argv)
        lines.append(f"| `opsft {command}` | {m['old']:.2f} | {m['new']:.2f} | "
                     f"{m['old'] / m['new']:.0f}x |")
    return "\n".join(lines)


def main() -> None:
    """Time every ``--help`` under both parsers and write the section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    clis = {"old": baseline_cli(), "new": CURRENT_CLI}
    body = render(measure(help_argvs(build_parser()), clis, args.repeats), args.repeats)
    print(body)
    update_markdown_section(args.out, "cli", body)


if __name__ == "__main__":
    main()
