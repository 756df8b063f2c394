"""Diagnostics over whole checkpoints, streamed one tensor name at a time.

A snapshot is anything ``opsft.checkpoints.iter_tensors`` reads: an nn.Module, a state dict, or a local
folder of (sharded) safetensors. For each tensor name only that tensor is loaded from each snapshot, so
memory follows the largest tensor, not the model: pair diagnostics and the trajectory hold at most two
loaded tensors at once (plus float64 working copies and SVD factors of the matrix being analysed), the
cosine and location series one tensor per snapshot (tests/test_diagnostics.py checks these bounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path

import torch

from opsft.checkpoints import WeightSource, iter_tensors, tensor_names
from opsft.diagnostics import metrics as M
from opsft.modules import module_type

GRAM_CHUNK = 1 << 22  # entries per chunk when accumulating update Gram matrices in float64


class SnapshotMismatchError(ValueError):
    """Snapshots that do not share one architecture (tensor names or shapes differ)."""


# ---------------------------------------------------------------- snapshot access


def snapshot_label(source: WeightSource, index: int) -> str:
    """A short label: the folder name for a path (the parent's for a file), else ``snapshot<index>``."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        return path.parent.name if path.is_file() else path.name
    return f"snapshot{index}"


def common_names(sources: Sequence[WeightSource]) -> list[str]:
    """Tensor names of the first snapshot, after checking every other snapshot has exactly the same set;
    a SnapshotMismatchError names the snapshot and the missing or extra tensors otherwise."""
    if not sources:
        raise ValueError("no snapshots given")
    reference = tensor_names(sources[0])
    for i, source in enumerate(sources[1:], start=1):
        names = set(tensor_names(source))
        missing, extra = sorted(set(reference) - names), sorted(names - set(reference))
        if missing or extra:
            raise SnapshotMismatchError(
                f"snapshot {i} ({snapshot_label(source, i)}) has a different architecture from snapshot 0: "
                f"missing tensors {missing[:5]}, extra tensors {extra[:5]}"
            )
    return reference


def _load(source: WeightSource, name: str) -> torch.Tensor:
    for _, tensor in iter_tensors(source, [name]):
        return (
            tensor.detach().cpu()
        )  # diagnostics run on CPU (float64 SVDs, GEO C.3); no copy if already there
    raise KeyError(f"tensor {name!r} missing")  # unreachable: iter_tensors raises first


def load_checked(sources: Sequence[WeightSource], index: int, name: str, shape: torch.Size) -> torch.Tensor:
    """Tensor ``name`` of snapshot ``index``; a SnapshotMismatchError unless it has ``shape``."""
    tensor = _load(sources[index], name)
    if tensor.shape != shape:
        raise SnapshotMismatchError(
            f"tensor {name!r} has shape {tuple(shape)} in snapshot 0 but {tuple(tensor.shape)} "
            f"in snapshot {index} ({snapshot_label(sources[index], index)})"
        )
    return tensor


def load_aligned(sources: Sequence[WeightSource], name: str) -> list[torch.Tensor]:
    """Tensor ``name`` from every snapshot, checked to have one shape (SnapshotMismatchError otherwise)."""
    first = _load(sources[0], name)
    return [first] + [load_checked(sources, i, name, first.shape) for i in range(1, len(sources))]


def _selected(sources: Sequence[WeightSource], names: Sequence[str] | None) -> list[str]:
    available = common_names(sources)
    if names is None:
        return available
    known = set(available)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"tensors {unknown[:5]} are not in the snapshots")
    return list(names)


def is_layer_matrix(name: str, tensor: torch.Tensor) -> bool:
    """The matrices GEO C.3 analyses: 2-D weights of the layers, embeddings and LM head excluded."""
    return tensor.ndim == 2 and module_type(name) != "embed"


def _analysed(name: str, tensor: torch.Tensor, explicit: bool) -> bool:
    """Whether a tensor enters the matrix metrics: every explicitly named tensor (which must then be 2-D,
    else a ValueError names it), or by default the layer matrices (``is_layer_matrix``)."""
    if explicit:
        M.as_matrix(tensor, name, "matrix diagnostics")
        return True
    return is_layer_matrix(name, tensor)


# ---------------------------------------------------------------- summaries that report NaN


def summarize(values: Mapping[str, float]) -> dict:
    """Mean, max and min of per-matrix values, unweighted (GEO C.3 "averaged across matrices"). A NaN in
    any value makes mean/max/min NaN and its name is listed under "nan", never silently dropped."""
    xs = list(values.values())
    nan = sorted(name for name, v in values.items() if math.isnan(v))
    if not xs or nan:
        return {"mean": math.nan, "max": math.nan, "min": math.nan, "n": len(xs), "nan": nan}
    return {"mean": math.fsum(xs) / len(xs), "max": max(xs), "min": min(xs), "n": len(xs), "nan": nan}


def _mean_matrix(per_matrix: Mapping[str, torch.Tensor]) -> list[list[float]]:
    """Element-wise mean of equally shaped matrices (NaN propagates)."""
    return torch.stack(list(per_matrix.values())).mean(0).tolist() if per_matrix else []


# ---------------------------------------------------------------- update cosines (OPSFT Fig 2)


def _update_grams(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrices (T x T, float64) of interval updates theta_i - theta_{i-1} and cumulative updates
    theta_i - theta_0 of one tensor across T+1 snapshots, accumulated over chunks of entries."""
    flats = [t.detach().reshape(-1) for t in tensors]
    steps = len(flats) - 1
    interval = torch.zeros(steps, steps, dtype=torch.float64)
    cumulative = torch.zeros(steps, steps, dtype=torch.float64)
    for start in range(0, flats[0].numel(), GRAM_CHUNK):
        x = torch.stack([f[start : start + GRAM_CHUNK].to(torch.float64) for f in flats])  # (T+1, c)
        di, dc = x[1:] - x[:-1], x[1:] - x[:1]  # (T, c) each
        interval += di @ di.T
        cumulative += dc @ dc.T
    return interval, cumulative


def _cosines(gram: torch.Tensor) -> torch.Tensor:
    """cos_ij = G_ij / sqrt(G_ii G_jj); NaN where an update is zero."""
    norms = gram.diagonal().sqrt()
    return gram / torch.outer(norms, norms)


def _cosine_block(global_gram: torch.Tensor, per_matrix: Mapping[str, torch.Tensor]) -> dict:
    cos = {name: _cosines(g) for name, g in per_matrix.items()}
    nan = sorted(name for name, c in cos.items() if bool(c.isnan().any()))
    return {"global": _cosines(global_gram).tolist(), "matrix": _mean_matrix(cos), "nan_matrices": nan}


def _tensor_grams(
    snapshots: Sequence[WeightSource], name: str, explicit: bool
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Update Gram matrices of one tensor and whether it is an analysed matrix. Loading happens in this
    frame so the T+1 copies are freed on return (the peak is one tensor per snapshot, not two)."""
    tensors = load_aligned(snapshots, name)
    return (*_update_grams(tensors), _analysed(name, tensors[0], explicit))


def update_cosines(snapshots: Sequence[WeightSource], names: Sequence[str] | None = None) -> dict:
    """Cosine matrices between training stages (OPSFT Fig 2): C_ij = cos(d_i, d_j) for interval updates
    d_i = theta_{t_i} - theta_{t_{i-1}} and for cumulative updates d_i = theta_{t_i} - theta_0, i = 1..T,
    snapshots[0] = theta_0. "global": all parameters flattened into one vector (Gram matrices summed over
    tensors); "matrix": cosines per layer matrix, then averaged element-wise. "final_cumulative" is the
    last row of the cumulative matrices, cos(theta_{t_i} - theta_0, theta_{t_T} - theta_0). Float64; a zero
    update gives NaN, listed by matrix under "nan_matrices". ``names`` restricts every tensor used.
    Holds one tensor from each of the T+1 snapshots at a time, plus a float64 chunk of GRAM_CHUNK entries."""
    if len(snapshots) < 2:
        raise ValueError("update_cosines needs at least two snapshots (theta_0 and one later)")
    all_names = _selected(snapshots, names)
    steps = len(snapshots) - 1
    gram_i = torch.zeros(steps, steps, dtype=torch.float64)
    gram_c = torch.zeros(steps, steps, dtype=torch.float64)
    per_i: dict[str, torch.Tensor] = {}
    per_c: dict[str, torch.Tensor] = {}
    for name in all_names:
        gi, gc, analysed = _tensor_grams(snapshots, name, names is not None)
        gram_i += gi
        gram_c += gc
        if analysed:
            per_i[name], per_c[name] = gi, gc
    cumulative = _cosine_block(gram_c, per_c)
    return {
        "labels": [snapshot_label(s, i) for i, s in enumerate(snapshots)][1:],
        "interval": _cosine_block(gram_i, per_i),
        "cumulative": cumulative,
        "final_cumulative": {
            "global": cumulative["global"][-1],
            "matrix": (cumulative["matrix"] or [[]])[-1],
        },
        "n_matrices": len(per_c),
    }


# ---------------------------------------------------------------- bf16 sparsity (OPSFT Table 6, GEO 3.1)


class _Bf16Tally:
    """Parameter-count-weighted bf16 unchanged counts, overall and per module type."""

    def __init__(self) -> None:
        self.unchanged: dict[str, float] = {}
        self.total: dict[str, int] = {}
        self.nan: list[str] = []

    def add(self, name: str, w0: torch.Tensor, w1: torch.Tensor) -> None:
        count = M.bf16_unchanged_count(w0, w1, name)
        if math.isnan(count):
            self.nan.append(name)
        kind = module_type(name)
        self.unchanged[kind] = self.unchanged.get(kind, 0.0) + count
        self.total[kind] = self.total.get(kind, 0) + w0.numel()

    @staticmethod
    def _entry(unchanged: float, total: int) -> dict:
        share = unchanged / total
        return {"unchanged": share, "updated": 1.0 - share, "params": total}

    def result(self) -> dict:
        by_type = {k: self._entry(self.unchanged[k], self.total[k]) for k in sorted(self.total)}
        overall = self._entry(math.fsum(self.unchanged.values()), sum(self.total.values()))
        return {"overall": overall, "by_type": by_type, "nan_tensors": sorted(self.nan)}


def bf16_sparsity(before: WeightSource, after: WeightSource, names: Sequence[str] | None = None) -> dict:
    """bf16-aware update sparsity over a checkpoint pair (GEO section 3.1 and C.3; OPSFT Table 6):
    "unchanged" = sum_tensors #[bf16(w) == bf16(w')] / sum_tensors n, parameter-count weighted, overall
    and per module type, beside its complement "updated" (the share of visibly updated parameters). A
    tensor holding NaN makes its type and the overall share NaN and is listed under "nan_tensors"."""
    tally = _Bf16Tally()
    for name in _selected([before, after], names):
        tally.add(name, *load_aligned([before, after], name))
    return tally.result()


# ---------------------------------------------------------------- update locations (OPSFT Fig 6)

VisibleRule = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
VISIBLE_RULES: dict[str, VisibleRule] = {
    "bf16": M.bf16_changed_mask,
    "exact": lambda a, b: a != b,
}


def _location_counts(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """(T, 5) counts per update i: |M_i|, |M_i & M_{i-1}|, |M_i | M_{i-1}|, |M_i & M_T|, |M_i | M_T|."""
    last = masks[-1]
    rows = []
    for i, m in enumerate(masks):
        prev = masks[i - 1] if i else torch.zeros_like(m)
        rows.append([m.sum(), (m & prev).sum(), (m | prev).sum(), (m & last).sum(), (m | last).sum()])
    return torch.tensor(rows, dtype=torch.float64)


def _location_series(counts: torch.Tensor, params: int) -> dict:
    jaccard_prev = counts[:, 1] / counts[:, 2]
    jaccard_prev[0] = math.nan  # no previous update for the first interval
    return {
        "sparsity": (1 - counts[:, 0] / params).tolist(),
        "jaccard_previous": jaccard_prev.tolist(),
        "jaccard_last": (counts[:, 3] / counts[:, 4]).tolist(),
    }


def _tensor_locations(
    snapshots: Sequence[WeightSource], name: str, rule: VisibleRule
) -> tuple[int, dict[str, torch.Tensor] | None]:
    """Entry count and (T, 5) interval and cumulative location counts of one tensor (None when it holds
    NaN/inf); its T+1 copies are freed on return."""
    tensors = load_aligned(snapshots, name)
    if not M._finite(*tensors):
        return tensors[0].numel(), None
    return tensors[0].numel(), {
        "interval": _location_counts([rule(a, b) for a, b in pairwise(tensors)]),
        "cumulative": _location_counts([rule(tensors[0], b) for b in tensors[1:]]),
    }


def update_locations(
    snapshots: Sequence[WeightSource], names: Sequence[str] | None = None, visible: str = "bf16"
) -> dict:
    """Update-location statistics over training (OPSFT Fig 6). For each update i = 1..T the location mask
    M_i marks the visibly changed entries (``visible``: "bf16" = differ after casting both to bf16, GEO
    3.1; "exact" = any change): for "interval" between theta_{t_{i-1}} and theta_{t_i}, for "cumulative"
    between theta_0 and theta_{t_i}. Reports location sparsity 1 - |M_i| / n, Jaccard |M_i & M_{i-1}| /
    |M_i | M_{i-1}| (NaN for i = 1) and Jaccard with the last mask, all counts summed over every tensor.
    Tensors holding NaN are listed under "nan_tensors" and make every series NaN."""
    if visible not in VISIBLE_RULES:
        raise ValueError(f"visible must be one of {sorted(VISIBLE_RULES)}, got {visible!r}")
    if len(snapshots) < 2:
        raise ValueError("update_locations needs at least two snapshots (theta_0 and one later)")
    rule = VISIBLE_RULES[visible]
    steps = len(snapshots) - 1
    totals = {
        "interval": torch.zeros(steps, 5, dtype=torch.float64),
        "cumulative": torch.zeros(steps, 5, dtype=torch.float64),
    }
    params, nan = 0, []
    for name in _selected(snapshots, names):
        numel, counts = _tensor_locations(snapshots, name, rule)
        params += numel
        if counts is None:
            nan.append(name)
        for kind in totals:
            totals[kind] += counts[kind] if counts is not None else math.nan
    return {
        "labels": [snapshot_label(s, i) for i, s in enumerate(snapshots)][1:],
        "visible": visible,
        "params": params,
        **{kind: _location_series(counts, params) for kind, counts in totals.items()},
        "nan_tensors": nan,
    }
