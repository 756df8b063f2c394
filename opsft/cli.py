"""`opsft` command line.

Building the parser imports none of the subcommands' modules (they bring in torch, transformers and
matplotlib, seconds of start-up): every command's arguments are declared here, and the module that does the
work is imported when its command runs. A runtime error prints one line, ``opsft: error: ...``, and exits
with status 1; ``opsft --debug COMMAND ...`` prints its traceback as well.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

Handler = Callable[[argparse.Namespace], int | None]

# Modules whose subcommands `opsft` offers, in help order; REGISTRARS declares each one's arguments.
COMMAND_MODULES: tuple[str, ...] = (
    "opsft.directions", "opsft.diagnostics", "opsft.calibrate", "opsft.recipes", "opsft.claims", "opsft.plan",
    "opsft.fingerprints",
)

# Choices and defaults owned by modules too heavy to import here; tests/test_cli.py checks that they agree.
RULES: tuple[str, ...] = ("fp32", "bf16", "rel")  # opsft.directions.RULES
PACKINGS: tuple[str, ...] = ("int8", "2bit")  # opsft.directions.Packing
# opsft.diagnostics.metrics.DEFAULT_ANGLE_K, _MASK_RANK, _MASK_ALPHA and _SUBSPACE_K:
DIAGNOSE_DEFAULTS = {"k": 512, "rank": 64, "alpha": 0.5, "subspace_k": 16}


def lazy(module: str, name: str, wrapper: str | None = None) -> Handler:
    """A handler that imports ``module`` only when it runs, then calls the module's function ``name`` (wrapped
    by the module's function ``wrapper``, when given) on the parsed arguments."""

    def run(args: argparse.Namespace) -> int | None:
        mod = importlib.import_module(module)
        func = getattr(mod, name)
        return (getattr(mod, wrapper)(func) if wrapper else func)(args)

    return run


def cmd_compare(args: argparse.Namespace) -> int:
    """``opsft compare``: the markdown table of ``opsft.compare.compare``; a checkpoint folder given without
    ``--base`` is refused (it is no direction file)."""
    for path in (args.a, args.b):
        if args.base is None and Path(path).is_dir():
            raise ValueError(f"{path} is a checkpoint folder: comparing checkpoints needs --base BASE (the "
                             "checkpoint they were trained from); without --base, A and B must be direction "
                             "files")
    from opsft.compare import compare, to_markdown

    print(to_markdown(compare(args.a, args.b, base_a=args.base, base_b=args.base_b or args.base)))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``opsft calibrate``: the regime calibration table of ``opsft.calibrate.calibrate``."""
    from opsft.calibrate import calibrate

    calibrate(args.scale, args.output, tuple(args.organism) if args.organism else None,
              tuple(args.group) if args.group else None, args.jobs)
    return 0


def add_direction_commands(sub: argparse._SubParsersAction) -> None:
    """``opsft direction BEFORE AFTER -o v.safetensors`` and ``opsft compare A B`` (opsft.directions)."""
    p = sub.add_parser("direction", help="v = sign(AFTER - BEFORE) of two checkpoints, saved as safetensors")
    p.add_argument("before",
                   help="base checkpoint: a folder of (sharded) safetensors or one .safetensors file")
    p.add_argument("after", help="trained checkpoint, same layout")
    p.add_argument("-o", "--output", required=True, help="output direction file (.safetensors)")
    p.add_argument("--rule", choices=RULES, default="bf16")
    p.add_argument("--eta", type=float, default=1e-3, help="relative tolerance of --rule rel")
    p.add_argument("--step", type=int, default=None, help="training step of AFTER, recorded in the metadata")
    p.add_argument("--packing", choices=PACKINGS, default="int8")
    p.set_defaults(func=lazy("opsft.directions", "cmd_direction"))

    c = sub.add_parser("compare", help="compare two directions (markdown table, overall and per module)")
    c.add_argument("a", help="direction file, or (with --base) a trained checkpoint")
    c.add_argument("b", help="direction file, or (with --base) a trained checkpoint")
    c.add_argument("--base", default=None,
                   help="base checkpoint of A (and of B unless --base-b): adds raw-delta cosine")
    c.add_argument("--base-b", default=None, help="base checkpoint of B when it differs from A's")
    c.set_defaults(func=cmd_compare)


def add_diagnose_command(sub: argparse._SubParsersAction) -> None:
    """``opsft diagnose BEFORE AFTER [MORE SNAPSHOTS...] -o DIR`` (opsft.diagnostics.report)."""
    p = sub.add_parser("diagnose", help="parameter-space diagnostics between local checkpoint folders")
    p.add_argument("before", help="checkpoint folder of theta_0 (safetensors, sharded or not)")
    p.add_argument("after", help="the next checkpoint folder")
    p.add_argument("more", nargs="*", help="further checkpoint folders, in training order")
    p.add_argument("-o", "--output", required=True, help="output directory")
    p.add_argument("--tensor", action="append", help="analyse only this tensor (repeatable)")
    p.add_argument("--k", type=int, default=DIAGNOSE_DEFAULTS["k"], help="principal-angle subspace size")
    p.add_argument("--rank", type=int, default=DIAGNOSE_DEFAULTS["rank"],
                   help="principal-mask reconstruction rank")
    p.add_argument("--alpha", type=float, default=DIAGNOSE_DEFAULTS["alpha"], help="mask fraction")
    p.add_argument("--subspace-k", type=int, default=DIAGNOSE_DEFAULTS["subspace_k"],
                   help="K of subspace similarity")
    p.add_argument("--hill-k", type=int, default=None, help="top singular values in the Hill estimate")
    p.add_argument("--visible", choices=("bf16", "exact"), default="bf16", help="rule for an update location")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the float64 decompositions run (auto: a CUDA GPU when one is present)")
    p.set_defaults(func=lazy("opsft.diagnostics.report", "_run"))


def add_calibrate_command(sub: argparse._SubParsersAction) -> None:
    """``opsft calibrate --scale S -o DIR`` (opsft.calibrate; scales and groups of ablations.calibration)."""
    from ablations.calibration import GROUPS, SCALES  # plain tables, no torch

    p = sub.add_parser("calibrate", help="regime calibration table of the organism")
    p.add_argument("--scale", choices=sorted(SCALES), default="full")
    p.add_argument("-o", "--out", dest="output", type=Path, default=Path("results"))
    p.add_argument("--organism", action="append",
                   help="only these organisms (repeatable; default: the scale's)")
    p.add_argument("--group", action="append", choices=sorted(GROUPS),
                   help="only these groups of rows (repeatable; default: all)")
    p.add_argument("--jobs", type=int, default=1, help="train and score runs in this many worker processes")
    p.set_defaults(func=cmd_calibrate)


def add_recipe_command(sub: argparse._SubParsersAction) -> None:
    """``opsft recipe show|validate|trajectories RECIPE``, a path or a name under recipes/ (opsft.recipes)."""
    parser = sub.add_parser("recipe", help="paper-scale recipes: show, validate, write teacher trajectories")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, help_text in (("show", "the runs of a recipe as a table"),
                            ("validate", "check local folders, files, architectures and world size"),
                            ("trajectories", "sample and verify the recipe's teacher trajectories")):
        p = verbs.add_parser(verb, help=help_text)
        p.add_argument("recipe", help="recipe file, or a name under recipes/ (e.g. opsft-qwen3-8b)")
        p.add_argument("--models", help="folder of local models (sets OPSFT_MODELS)")
        p.add_argument("--data", help="folder of local datasets (sets OPSFT_DATA)")
        p.set_defaults(func=lazy("opsft.recipes", f"_cmd_{verb}", wrapper="_reporting_errors"))
        if verb == "show":
            p.add_argument("--json", action="store_true", help="every RunConfig as JSON")
        if verb == "validate":
            p.add_argument("--world-size", type=int, default=1,
                           help="number of training processes (default 1)")
            p.add_argument("--run", action="append", help="only this run (repeatable)")
        if verb == "trajectories":
            p.add_argument("--backend", choices=("hf", "vllm"), help="sampler (default: the recipe's)")


def add_claims_commands(sub: argparse._SubParsersAction) -> None:
    """``opsft claims list|compare`` (opsft.claims.commands) and ``opsft map`` (opsft.claims.regime_map)."""
    from ablations.claims import REFERENCE_SCALE, SCALE_NAMES  # plain tables, no torch

    parser = sub.add_parser("claims", help="saved claims runs: list them, compare two, decide them again")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="every saved run: scale, commit, tree, date, claims, seeds")
    compare = verbs.add_parser("compare", help="verdict changes and mean deltas of run B against run A")
    compare.add_argument("a", help="run A: a run file, or a number or name in --storage")
    compare.add_argument("b", help="run B, the same")
    compare.add_argument("-k", action="append",
                         help="only claims whose id contains this, in any case (repeatable; it must match a "
                         "registered id)")
    compare.add_argument("--fail", action="append", metavar="METRIC:TOL[%]",
                         help="exit 1 when a mean moves past this (repeatable; default: CI's tolerances)")
    verdicts = verbs.add_parser("verdicts", help="saved runs' claims decided again under every rule version")
    verdicts.add_argument("runs", nargs="+", help="run files, or numbers or names in --storage (newest last)")
    summary = verbs.add_parser("summary", help="rewrite a results folder's claims summary under the current rules")
    summary.add_argument("-o", "--output", type=Path, required=True, help="results folder (its README.md)")
    summary.add_argument("--only", help="one run file: every line from it (as a reference scale's summary)")
    for verb, p in (("list", listing), ("compare", compare), ("verdicts", verdicts), ("summary", summary)):
        p.add_argument("--storage", type=Path, default=Path(".claims"), help="claims storage (default .claims)")
        p.set_defaults(func=lazy("opsft.claims.commands", f"cmd_{verb}"))
    m = sub.add_parser("map", help="the regime map: the OPSFT family over SFT learning rate x constrained steps")
    m.add_argument("--scale", choices=SCALE_NAMES, default=REFERENCE_SCALE)
    m.add_argument("-o", "--output", type=Path, default=Path("results/map"))
    m.add_argument("--cell", action="append", default=[], help="only this cell, e.g. lr1e-04 (repeatable)")
    m.add_argument("--seed", action="append", type=int, default=[], help="only this seed (repeatable)")
    m.add_argument("--jobs", type=int, default=1, help="worker processes measuring (cell, seed)s (default 1)")
    m.set_defaults(func=cmd_map)


def cmd_map(args: argparse.Namespace) -> int:
    """``opsft map``: ``opsft.claims.regime_map.run_map``."""
    from opsft.claims.regime_map import run_map

    run_map(args.scale, args.output, tuple(args.cell), tuple(args.seed), jobs=args.jobs)
    return 0


def add_plan_commands(sub: argparse._SubParsersAction) -> None:
    """``opsft plan`` and ``opsft execute`` over a main job's runs (opsft.plan, opsft.execute)."""
    from ablations.claims import REFERENCE_SCALE, SCALE_NAMES  # plain tables, no torch

    plan = sub.add_parser("plan", help="every run a main job needs (calibration, claims, map): parents, cache, cost")
    execute = sub.add_parser("execute", help="train the runs a main job still needs, locally or on a Ray cluster")
    for p in (plan, execute):
        p.add_argument("--scale", choices=SCALE_NAMES, default=REFERENCE_SCALE)
        p.add_argument("-k", help="only the claim tests this pytest -k expression selects")
        p.add_argument("--suite", default="suite", help="the claim tests' folder (default: suite)")
        p.add_argument("--no-calibration", action="store_true", help="leave the calibration's runs out")
        p.add_argument("--no-map", action="store_true", help="leave the regime map's runs out")
        p.add_argument("--storage", default=".claims",
                       help="saved claims runs whose recorded run times price shapes the cache has not run")
    plan.add_argument("--workers", type=int, default=2, help="workers for the wall-time lower bound (default 2)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=lazy("opsft.plan", "cmd_plan"))
    execute.add_argument("--executor", choices=("local", "ray"), default="local",
                         help="local: worker processes on this machine; ray: one Ray task per run (extra [cluster])")
    execute.add_argument("--address", help="ray: the cluster's head, HOST:PORT or ray://HOST[:PORT] (default: start "
                                           "a local Ray instance)")
    execute.add_argument("--jobs", type=int, help="local: worker processes, one torch thread each (default: the "
                                                  "CPUs this process may use); ray: the local instance's CPUs")
    execute.add_argument("--retries", type=int, default=3,
                         help="ray: times a run whose worker died is retried, resuming from its checkpoint (default 3)")
    execute.add_argument("--gpus-per-run", type=int, default=0,
                         help="ray: GPUs of each recipe run, trained by torchrun on that many processes (default 0: "
                              "one CPU like an organism run)")
    execute.add_argument("--strategy", choices=("ddp", "fsdp2"), default="fsdp2",
                         help="ray with --gpus-per-run: how torchrun spreads a run over its GPUs (default fsdp2)")
    execute.set_defaults(func=lazy("opsft.execute", "cmd_execute"))


def add_fingerprints_command(sub: argparse._SubParsersAction) -> None:
    """``opsft fingerprints``: the pinned numerics' weight digests recomputed here against the committed file."""
    p = sub.add_parser("fingerprints", help="recompute the pinned numerics' weight fingerprints and check the file")
    p.add_argument("--organisms", nargs="+", choices=("nano", "micro"), default=["nano", "micro"],
                   help="organisms to fingerprint (nano also fingerprints the short runs; default both)")
    p.add_argument("--file", type=Path, help="the fingerprint file (default: the committed tests/fingerprints.json)")
    p.add_argument("--write", action="store_true",
                   help="start the file when its numerics differ; on a match, record this CPU model as matching")
    p.set_defaults(func=lazy("opsft.fingerprints", "cmd_fingerprints"))


REGISTRARS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "opsft.directions": add_direction_commands,
    "opsft.diagnostics": add_diagnose_command,
    "opsft.calibrate": add_calibrate_command,
    "opsft.recipes": add_recipe_command,
    "opsft.claims": add_claims_commands,
    "opsft.plan": add_plan_commands,
    "opsft.fingerprints": add_fingerprints_command,
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with the subcommands of every module in COMMAND_MODULES (none of them
    imported)."""
    parser = argparse.ArgumentParser(
        prog="opsft", description="Update directions, parameter-space diagnostics, regime calibration and "
        "paper-scale recipes of the OPSFT benchmark suite.")
    parser.add_argument("--debug", action="store_true", help="print the traceback of a runtime error")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        REGISTRARS[module](sub)
    return parser


def check_output(args: argparse.Namespace) -> None:
    """Raise a NotADirectoryError naming ``-o`` when the nearest existing ancestor of the output path is a
    file, before the command computes a result it could not write."""
    if getattr(args, "output", None) is None:
        return
    path = Path(args.output)
    nearest = next(parent for parent in path.parents if parent.exists())
    if not nearest.is_dir():
        raise NotADirectoryError(f"-o {path}: {nearest} is a file, so nothing can be written under it")


def one_line(err: BaseException) -> str:
    """An error's message on one line (its lines joined by '; ', a KeyError's without quotes), else the
    name of its type."""
    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand (its handler is ``args.func``); a runtime error prints
    ``opsft: error: MESSAGE`` on stderr (with the traceback under ``--debug``) and returns 1; Ctrl-C prints
    ``opsft: interrupted`` and returns 130."""
    args = build_parser().parse_args(argv)
    try:
        check_output(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("opsft: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if args.debug:
            traceback.print_exc()
        print(f"opsft: error: {one_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
