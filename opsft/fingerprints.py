"""Fingerprints of pinned numerics (``opsft.numerics``): the SHA-256 of the nano and micro organisms' weights and
of a few short nano runs, committed in ``FINGERPRINTS`` from one CPU model and recomputed wherever the tests run.

Under pinned numerics a model's bits depend on the commit and the seed alone, so every x86-64 CPU with AVX2 must
reproduce the file; a mismatch names the model and the CPU models on both sides. The file keeps the CPU models
that have matched it (``matched_on``, appended by ``opsft fingerprints --write`` on a match), so its history
shows each model the machines alternate between reproducing the same bits.

The short runs cover each kernel family a run uses: SFT, GRPO and OPD in fp32 (MKL's matrix products, ATen's
kernels, the fused C++ layers, sampling) and SFT and GRPO with bf16 parameters (oneDNN's bf16 products), each
20 steps of the calibration grid's rows on nano at the smoke scale's sizes.
"""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import replace
from pathlib import Path

from opsft.claims.tables import REPO_ROOT
from opsft.io import atomic_write_json

FINGERPRINTS = REPO_ROOT / "tests" / "fingerprints.json"
ORGANISMS = ("nano", "micro")
RUN_STEPS = 20
# (name, method, precision row of the calibration grid)
RUNS = (("sft", "sft", "fp32"), ("grpo", "grpo", "fp32"), ("opd", "opd", "fp32"), ("sft_bf16", "sft", "bf16"),
        ("grpo_bf16", "grpo", "bf16"))


def organism_fingerprints(name: str) -> dict[str, str]:
    """``{"<name>/base": sha256, "<name>/teacher": sha256}`` of organism ``name``'s weights files (built, or read
    from the cache)."""
    from opsft.pretraining import build_organism

    report = build_organism(name).report
    return {f"{name}/{role}": report["sha256"][path] for role, path in report["models"].items()}


def run_fingerprints() -> dict[str, str]:
    """``{"nano/<run>": sha256}`` of the final weights of each of ``RUNS``: ``RUN_STEPS`` steps on nano."""
    from ablations.calibration import GRID, SCALES
    from opsft.calibrate import method_config
    from opsft.runs import run

    rows = {"fp32": GRID[0], "bf16": next(r for r in GRID if r["precision"] == "bf16")}
    scale = {**SCALES["smoke"], "steps": RUN_STEPS}
    out = {}
    for name, method, precision in RUNS:
        config = method_config(method, rows[precision], scale, 0, "nano")
        out[f"nano/{name}"] = run(replace(config, snapshot_steps=())).weights_sha256()
    return out


def compute(organisms: tuple[str, ...] = ORGANISMS) -> dict[str, str]:
    """The fingerprints of ``organisms`` and, when nano is among them, of the short runs."""
    out: dict[str, str] = {}
    for name in organisms:
        out |= organism_fingerprints(name)
    if "nano" in organisms:
        out |= run_fingerprints()
    return out


def read(path: Path = FINGERPRINTS) -> dict:
    """The committed fingerprint file: ``numerics`` (the digest tag it holds for), ``made_on`` and ``matched_on``
    (CPU model, commit, UTC date) and ``sha256`` (model name -> digest); a ValueError naming the file and the key
    when it is not of that form."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        for key in ("numerics", "made_on", "matched_on", "sha256"):
            data[key]  # noqa: B018 - a missing key is the error
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"fingerprint file {path}: unreadable or missing a key ({type(err).__name__}: {err})") from err
    return data


def mismatches(expected: dict, found: dict[str, str], cpu: str) -> list[str]:
    """One line per model of ``found`` whose digest differs from (or is missing in) the file ``expected``,
    naming the model and the CPU models on both sides."""
    made = expected["made_on"]["cpu"]
    lines = []
    for name, digest in sorted(found.items()):
        want = expected["sha256"].get(name)
        if want != digest:
            lines.append(f"{name}: {digest[:16]} on {cpu}, but {want[:16] if want else 'no entry'} in the file "
                         f"(made on {made}; matched on {', '.join(sorted({m['cpu'] for m in expected['matched_on']}))})")
    return lines


def stamp() -> dict:
    """This machine's CPU model, the checkout's commit and the UTC date, as the file records a machine."""
    from opsft.provenance import cpu_model, git_state

    return {"cpu": cpu_model(), "commit": git_state()[0],
            "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def cmd_fingerprints(args: argparse.Namespace) -> int:
    """``opsft fingerprints``: recompute the fingerprints of ``--organisms`` here and compare them with the file
    (exit 1 listing each mismatch); ``--write`` starts the file from them when the numerics changed, or, when
    every model the file holds matches, adds the models it lacks and appends this CPU model to ``matched_on``."""
    from opsft.numerics import digest_tag
    from opsft.provenance import cpu_model

    path = args.file or FINGERPRINTS
    tag, found = digest_tag(), compute(tuple(args.organisms))
    if tag == "native":
        raise ValueError("fingerprints hold for pinned numerics only; unset OPSFT_NUMERICS (native is per CPU)")
    expected = read(path) if path.is_file() else None
    if expected is not None and expected["numerics"] == tag:
        known = found if not args.write else {k: v for k, v in found.items() if k in expected["sha256"]}
        wrong = mismatches(expected, known, cpu_model())
        for line in wrong:
            print(f"fingerprint mismatch: {line}")
        if wrong:
            return 1
        print(f"{len(found)} fingerprints match {path} ({tag}) on {cpu_model()}")
        if args.write:
            expected["sha256"] = {**expected["sha256"], **found}
            expected["matched_on"].append(stamp())
            atomic_write_json(path, expected)
        return 0
    if not args.write:
        raise ValueError(f"{path} holds no fingerprints for {tag} numerics: make them with --write")
    atomic_write_json(path, {"numerics": tag, "made_on": stamp(), "matched_on": [stamp()], "sha256": found})
    print(f"{len(found)} fingerprints written to {path} ({tag}) on {cpu_model()}")
    return 0
