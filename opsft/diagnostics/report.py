"""``opsft diagnose``: every diagnostic over a snapshot sequence, written as JSON, markdown and PNG figures.

The result dict is plain JSON data (NaN stays NaN, so Python's json reads it back). Files are written
atomically; figures come from ``opsft.plots``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path

from opsft import plots
from opsft.checkpoints import WeightSource
from opsft.diagnostics import metrics as M
from opsft.diagnostics.streaming import snapshot_label, update_cosines, update_locations
from opsft.diagnostics.summaries import endpoint_summary, trajectory_summary
from opsft.io import atomic_write_json, atomic_write_text
from opsft.provenance import provenance

FIGURES = {
    "cosines.png": ("cosines", plots.plot_cosine_heatmaps),
    "trajectory.png": ("trajectory", plots.plot_trajectory),
    "locations.png": ("locations", plots.plot_update_locations),
}


def _provenance(snapshots: Sequence[WeightSource], seconds: float) -> dict:
    """Code, library and machine provenance (``opsft.provenance``) plus the snapshots and wall time."""
    labels = [str(s) if isinstance(s, (str, Path)) else snapshot_label(s, i) for i, s in enumerate(snapshots)]
    return provenance() | {"snapshots": labels, "wall_seconds": round(seconds, 3)}


def compute_all(
    snapshots: Sequence[WeightSource],
    names: Sequence[str] | None = None,
    k: int = M.DEFAULT_ANGLE_K,
    rank: int = M.DEFAULT_MASK_RANK,
    alpha: float = M.DEFAULT_MASK_ALPHA,
    subspace_k: int = M.DEFAULT_SUBSPACE_K,
    hill_k: int | None = None,
    visible: str = "bf16",
    device: str | None = None,
) -> dict:
    """All diagnostics of a snapshot sequence (snapshots[0] = theta_0): ``endpoint_summary`` of the first
    and last, ``trajectory_summary``, ``update_cosines`` and ``update_locations``, plus provenance.
    ``device``: where the matrix factorizations run (None: CUDA when available, else CPU)."""
    if len(snapshots) < 2:
        raise ValueError("diagnostics need at least two snapshots (before and after)")
    start = time.perf_counter()
    result = {
        "endpoint": endpoint_summary(
            snapshots[0], snapshots[-1], names, k=k, rank=rank, alpha=alpha, device=device
        ),
        "trajectory": trajectory_summary(
            snapshots, names, subspace_k=subspace_k, hill_k=hill_k, device=device
        ),
        "cosines": update_cosines(snapshots, names),
        "locations": update_locations(snapshots, names, visible=visible),
    }
    return result | {"provenance": _provenance(snapshots, time.perf_counter() - start)}


def _fmt(x: float | str | None) -> str:
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.4g}"
    return str(x)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _endpoint_md(endpoint: dict) -> str:
    mats, bf16 = endpoint["matrices"], endpoint["bf16_sparsity"]
    deg = 180 / math.pi
    rows = [
        ["bf16 unchanged share (overall, parameter-weighted)", bf16["overall"]["unchanged"], ""],
        ["visibly updated share", bf16["overall"]["updated"], ""],
    ]
    rows += [
        [f"principal angle {side} {stat} (degrees)", mats[f"angle_{side}_{stat}"]["mean"] * deg, ""]
        for side in ("left", "right")
        for stat in ("mean", "max")
        if mats
    ]
    if mats:
        rows += [
            ["NSS", mats["nss"]["mean"], ""],
            ["update overlap with principal mask", mats["principal"]["mean"], endpoint["settings"]["alpha"]],
            [
                "update overlap with low-magnitude mask",
                mats["low_magnitude"]["mean"],
                endpoint["settings"]["alpha"],
            ],
        ]
    types = [[t, v["params"], v["unchanged"], v["updated"]] for t, v in bf16["by_type"].items()]
    return "\n\n".join(
        [
            "## Endpoint, first vs last snapshot (PNT diagnostics, GEO section 3)",
            f"Matrix metrics averaged over {len(endpoint['per_matrix'])} matrices, unweighted; "
            f"settings {endpoint['settings']}.",
            _table(["metric", "value", "random baseline"], rows),
            _table(["module type", "params", "bf16 unchanged", "updated"], types),
            _nan_note({"bf16": bf16["nan_tensors"], **{key: v["nan"] for key, v in mats.items()}}),
        ]
    )


def _trajectory_md(traj: dict) -> str:
    metrics = list(traj["mean"])
    rows = [[label, *(traj["mean"][m][i] for m in metrics)] for i, label in enumerate(traj["labels"])]
    return "\n\n".join(
        [
            "## Cumulative-update trajectory (GEO section 4, Fig 4/5)",
            f"Means over {traj['n_matrices']} matrices; settings {traj['settings']}.",
            _table(["checkpoint", *metrics], rows),
            _nan_note(traj["nan"]),
        ]
    )


def _cosines_md(cos: dict) -> str:
    labels = cos["labels"]
    parts = ["## Update cosines between stages (OPSFT Fig 2)"]
    for kind in ("interval", "cumulative"):
        for level in ("global", "matrix"):
            rows = [[label, *row] for label, row in zip(labels, cos[kind][level], strict=False)]
            parts += [f"{kind} updates, {level} cosine:", _table(["", *labels], rows)]
    final = [[label, g, m] for label, g, m in zip(labels, *cos["final_cumulative"].values(), strict=False)]
    parts += [
        "Cosine of each cumulative update with the final one:",
        _table(["checkpoint", "global", "matrix"], final),
    ]
    parts.append(_nan_note({kind: cos[kind]["nan_matrices"] for kind in ("interval", "cumulative")}))
    return "\n\n".join(parts)


def _locations_md(loc: dict) -> str:
    header = ["checkpoint"] + [f"{k} {s}" for k in ("interval", "cumulative") for s in loc["interval"]]
    rows = [
        [label] + [loc[k][s][i] for k in ("interval", "cumulative") for s in loc[k]]
        for i, label in enumerate(loc["labels"])
    ]
    return "\n\n".join(
        [
            f"## Update locations ({loc['visible']}-visible changes, OPSFT Fig 6)",
            _table(header, rows),
            _nan_note({"locations": loc["nan_tensors"]}),
        ]
    )


def _nan_note(nan: dict[str, list[str]]) -> str:
    found = {key: names for key, names in nan.items() if names}
    if not found:
        return "No NaN values."
    return "NaN values (not averaged away) in: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in found.items())


def render_markdown(result: dict) -> str:
    """The markdown report of a ``compute_all`` result: endpoint table, trajectory, cosines, locations."""
    prov = result["provenance"]
    head = "# Parameter-space diagnostics\n\nSnapshots: " + ", ".join(f"`{s}`" for s in prov["snapshots"])
    head += f"\n\ncommit {prov['commit']} (dirty: {prov['dirty']}), torch {prov['torch']}, {prov['machine']['cpu']}, "
    head += f"{prov['wall_seconds']} s, {prov['utc']}."
    sections = [_endpoint_md(result["endpoint"]), _trajectory_md(result["trajectory"])]
    sections += [_cosines_md(result["cosines"]), _locations_md(result["locations"])]
    return "\n\n".join([head, *sections]) + "\n"


def diagnose(snapshots: Sequence[WeightSource], out_dir: str | Path, **settings: object) -> dict:
    """Compute every diagnostic (``compute_all``, keyword ``settings`` passed through) and write
    ``diagnostics.json``, ``diagnostics.md`` and the figures cosines.png, trajectory.png, locations.png
    into ``out_dir``; returns the result dict."""
    out = Path(out_dir)
    result = compute_all(snapshots, **settings)
    atomic_write_json(out / "diagnostics.json", result)
    atomic_write_text(out / "diagnostics.md", render_markdown(result))
    for filename, (key, plot) in FIGURES.items():
        plot(result[key], out / filename)
    return result


def _run(args: argparse.Namespace) -> int:
    """``opsft diagnose``: every diagnostic of the snapshot folders, written to ``-o``."""
    snapshots = [args.before, args.after, *args.more]
    missing = [s for s in snapshots if not Path(s).exists()]
    if missing:
        raise FileNotFoundError(f"snapshot folders not found: {missing}")
    diagnose(
        snapshots,
        args.output,
        names=args.tensor,
        k=args.k,
        rank=args.rank,
        alpha=args.alpha,
        subspace_k=args.subspace_k,
        hill_k=args.hill_k,
        visible=args.visible,
        device=None if args.device == "auto" else args.device,
    )
    print(f"diagnostics written to {args.output}")
    return 0
