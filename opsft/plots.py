"""Figures of the parameter-space diagnostics, drawn with matplotlib's object API (Agg, no pyplot state).

Each function takes the plain dict a diagnostic returns and writes one PNG atomically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from opsft.io import atomic_write

ANNOTATE_UP_TO = 10  # write the value into each heatmap cell for at most this many stages


def _save(fig: Figure, path: str | Path) -> Path:
    FigureCanvasAgg(fig)
    return atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120))


def _heatmap(ax: Axes, matrix: Sequence[Sequence[float]], labels: Sequence[str], title: str) -> None:
    values = np.asarray(matrix, dtype=float)
    image = ax.imshow(values, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    if len(labels) <= ANNOTATE_UP_TO:
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, "nan" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=6)
    ax.figure.colorbar(image, ax=ax, fraction=0.046)


def plot_cosine_heatmaps(cosines: dict, path: str | Path) -> Path:
    """Interval and cumulative update cosines between stages, global and matrix-level (OPSFT Fig 2),
    from ``update_cosines``' result."""
    fig = Figure(figsize=(10, 9), layout="constrained")
    axes = fig.subplots(2, 2)
    for row, kind in enumerate(("interval", "cumulative")):
        for col, level in enumerate(("global", "matrix")):
            _heatmap(
                axes[row, col], cosines[kind][level], cosines["labels"], f"{kind} updates, {level} cosine"
            )
    return _save(fig, path)


def _series(ax: Axes, labels: Sequence[str], series: dict[str, Sequence[float]], title: str) -> None:
    for name, values in series.items():
        ax.plot(range(len(labels)), values, marker="o", label=name)
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize=7)
    if len(series) > 1:
        ax.legend(fontsize=7)


TRAJECTORY_PANELS = (
    ("stable_rank", "stable rank ||dW||_F^2 / ||dW||_2^2"),
    ("frobenius_norm", "Frobenius norm ||dW||_F"),
    ("hill_index", "Hill tail index"),
    ("subspace_similarity", "subspace similarity with the final V_K"),
)


def plot_trajectory(trajectory: dict, path: str | Path) -> Path:
    """Mean stable rank, Frobenius norm, Hill index and subspace similarity of the cumulative update over
    checkpoints (GEO Fig 4 and Fig 5), from ``trajectory_summary``' result."""
    fig = Figure(figsize=(14, 3.5), layout="constrained")
    for ax, (metric, title) in zip(fig.subplots(1, len(TRAJECTORY_PANELS)), TRAJECTORY_PANELS, strict=True):
        _series(ax, trajectory["labels"], {metric: trajectory["mean"][metric]}, title)
    return _save(fig, path)


def plot_update_locations(locations: dict, path: str | Path) -> Path:
    """Location sparsity and Jaccard overlaps of update locations over training (OPSFT Fig 6), interval
    and cumulative, from ``update_locations``' result."""
    fig = Figure(figsize=(10, 3.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    labels = locations["labels"]
    _series(
        left, labels, {k: locations[k]["sparsity"] for k in ("interval", "cumulative")}, "location sparsity"
    )
    _series(
        right,
        labels,
        {
            f"{k}, {j}": locations[k][f"jaccard_{j}"]
            for k in ("interval", "cumulative")
            for j in ("previous", "last")
        },
        "Jaccard of update locations",
    )
    return _save(fig, path)


MAX_CLAIM_PANELS = 12  # a claim figure draws its first metrics only (in recording order)


def plot_claim(measured: Mapping[str, Any], paper: Mapping[str, Any], title: str, path: str | Path) -> Path:
    """A claim's figure: one panel per metric, one bar per arm at its mean over seeds with its interval (the kind
    the claim's page names: two-level t over seeds and test problems, or t over seeds) as a whisker, and the paper's value (where it gives a number) as a black diamond. ``measured``
    maps ``"arm.metric"`` to an estimate with ``mean``, ``low``, ``high``; ``paper`` maps the same keys."""
    panels: dict[str, list[str]] = {}
    for key in measured:
        panels.setdefault(key.split(".", 1)[1], []).append(key)
    metrics = list(panels)[:MAX_CLAIM_PANELS]
    cols = min(4, max(1, len(metrics)))
    rows = max(1, -(-len(metrics) // cols))
    fig = Figure(figsize=(3.6 * cols, 3.0 * rows), layout="constrained")
    fig.suptitle(title, fontsize=10)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, metric in zip(axes, metrics, strict=False):
        keys = panels[metric]
        means = np.array([measured[k].mean for k in keys], dtype=float)
        err = np.array([[m - measured[k].low, measured[k].high - m] for k, m in zip(keys, means, strict=True)]).T
        x = np.arange(len(keys))
        ax.bar(x, means, yerr=np.nan_to_num(err), capsize=3, color="#7aa6c2")
        for i, k in enumerate(keys):
            if isinstance(paper.get(k), (int, float)):
                ax.plot(i, paper[k], "kD", markersize=5, label="paper" if i == 0 else None)
        ax.set_title(metric, fontsize=9)
        ax.set_xticks(x, [k.split(".", 1)[0] for k in keys], rotation=45, fontsize=7)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    return _save(fig, path)
