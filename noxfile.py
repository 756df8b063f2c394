"""Sessions: `tests` (default), `claims`, `ablations` (the main job, off by default), `lint`."""

import os
import sys

import nox

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tolerances below live in the library
from ablations.claims import REFERENCE_SCALE, SCALE_NAMES, calibration_of, is_recipe_scale, scale_profile  # noqa: E402  (plain tables: imports before the venv exists)
from opsft.claims.compare import CI_TOLERANCES  # noqa: E402  (stdlib only: imports before the venv exists)

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_venv = "yes"

CONSTRAINTS = ("-c", "constraints-cpu.txt")


def install_project(session: nox.Session) -> None:
    """Install torch (CPU pin) first, then the project with its dev, trl and cluster extras under the same pin
    (the TRL parity and interop tests and the Ray executor's tests skip without them)."""
    session.install(*CONSTRAINTS, "torch")
    session.install(*CONSTRAINTS, "-e", ".[dev,trl,cluster]")


# CI regression: the claims at `ci` scale against the committed `ci` baseline (.claims/ci), within CI_TOLERANCES.


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests (with small nano-organism training runs, marked slow; the extra Ray clusters marked `cluster`
    are left out), then every claim at `ci` scale on the micro organism and the recipe claims at `paper-tiny`
    (the paper scale's path on CPU stand-ins), each compared with its committed baseline. Every organism
    accuracy of the claims is cross-checked: the in-house greedy scorer must give each problem the completion
    and verdict lm-eval gave it (``opsft.evals.organism_scores``), on every arm. Last, the micro organism the
    claims built is checked against the committed fingerprints of pinned numerics (nano's are a unit test)."""
    install_project(session)
    session.run("pytest", "-n", "2", "tests", "-m", "not cluster", *session.posargs)
    fail = [f"--claims-compare-fail={t}" for t in CI_TOLERANCES]
    for scale in ("ci", "paper-tiny"):
        session.run("pytest", "-n", "2", "-p", "no:cacheprovider", "suite", "--scale", scale, "--claims-storage",
                    scale_outputs(scale)[1], "--claims-compare", scale, *fail, *session.posargs,
                    env={"OPSFT_SCORING_CROSS_CHECK": "1"})
    session.run("opsft", "fingerprints", "--organisms", "micro")


# The reference scale (issue 34): the micro_b1200 organism in the papers' regime, its whole job sized for 2 hours
# on 2 cores (ablations/claims.py). Its tables are results/; every other scale (`regime`, the `small` student, a
# cluster's job; `full`, `ci`, `smoke`) writes beside them, so no other run overwrites the reference.
REFERENCE = REFERENCE_SCALE


def scale_outputs(scale: str) -> tuple[str, str]:
    """Results folder and claims storage of a scale: ``results`` for the reference scale, ``results/<scale>``
    for the others; claims runs are saved under ``.claims/<scale>``."""
    return ("results" if scale == REFERENCE else f"results/{scale}", f".claims/{scale}")


def scale_argument(session: nox.Session) -> str:
    """The scale given after `--` (default the reference scale); one line naming the scales when it is none."""
    scale = session.posargs[0] if session.posargs else REFERENCE
    if scale not in SCALE_NAMES:
        session.error(f"unknown scale {scale!r} after `--`; choose one of {', '.join(SCALE_NAMES)}")
    return scale


def run_claims(session: nox.Session, scale: str, *extra: str) -> None:
    """Every claim test at `scale`, saved and tabulated into that scale's results folder."""
    results, storage = scale_outputs(scale)
    session.run("pytest", "-p", "no:cacheprovider", "suite", "--scale", scale, "--claims-save", scale,
                "--claims-results", results, "--claims-storage", storage, *extra)


@nox.session(default=False)
def claims(session: nox.Session) -> None:
    """Every claim test at the scale given after `--` (default: the reference scale, `reference`)."""
    scale = scale_argument(session)
    install_project(session)
    run_claims(session, scale, *session.posargs[1:])


def worker_count() -> str:
    """Processes for the main job: one per CPU this process may use (every worker trains at one torch thread;
    runs are cached under file locks, so the numbers are the same with any count)."""
    return str(len(os.sched_getaffinity(0)))


def calibration_args(scale: str) -> list[str]:
    """`opsft calibrate` arguments of the calibration the claims of ``scale`` build on (ablations/claims.py)."""
    cal = calibration_of(scale)
    return (["--scale", cal["scale"]] + [a for o in cal["organisms"] or () for a in ("--organism", o)]
            + [a for g in cal["groups"] or () for a in ("--group", g)])


@nox.session(default=False)
def ablations(session: nox.Session) -> None:
    """The main job at a scale (after `--`, default the reference scale, `reference`): first every run it needs, trained
    by `opsft execute` (the plan's order, one worker process per CPU, progress with an ETA), then from the cache
    the organism regime calibration, every claim, and the regime map. At a recipe scale (`paper`,
    `paper-tiny`) the claims alone: the calibration and the map are grids over the organism."""
    scale = scale_argument(session)
    install_project(session)
    jobs = worker_count()
    results = scale_outputs(scale)[0]
    recipe = is_recipe_scale(scale_profile(scale))
    session.run("opsft", "execute", "--scale", scale, "--jobs", jobs)
    if not recipe:
        session.run("opsft", "calibrate", *calibration_args(scale), "-o", results, "--jobs", jobs)
    run_claims(session, scale, "-n", jobs)
    if not recipe:
        session.run("opsft", "map", "--scale", scale, "-o", f"{results}/map", "--jobs", jobs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the library, tests and scripts."""
    session.install("ruff")
    session.run("ruff", "check", "opsft", "tests", "suite", "ablations", "scripts", "noxfile.py", "conftest.py")


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """The GPU path on one CUDA GPU: vLLM-vs-HF greedy equivalence, scripts/gpu_check.py (at most 8 minutes), then
    the paper scale's path: the paper-tiny runs as Ray tasks of one GPU, each a torchrun job (nccl), and the
    recipe claims scored on the GPU (about 2 minutes; results in a temporary folder)."""
    session.install("-e", ".[gpu,dev,cluster]")  # vllm brings its own CUDA torch: no CPU constraints here
    session.run("pytest", "-p", "no:cacheprovider", "tests/test_vllm_sampler.py", "-k", "vllm_greedy_equals_hf")
    session.run("python", "scripts/gpu_check.py", *session.posargs)
    tmp = session.create_tmp()
    env = {"OPSFT_CACHE": os.path.join(tmp, "cache")}
    session.run("opsft", "execute", "--scale", "paper-tiny", "--executor", "ray", "--gpus-per-run", "1",
                "--strategy", "ddp", env=env)
    session.run("pytest", "-p", "no:cacheprovider", "suite", "--scale", "paper-tiny", "--claims-save", "gpu",
                "--claims-storage", os.path.join(tmp, "claims"), "--claims-results", os.path.join(tmp, "results"),
                env=env)
