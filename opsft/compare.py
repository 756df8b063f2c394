"""Comparing two update directions (claim C07, OPSFT Fig 4 and Fig 6), overall and per module.

With S_a = {i : a_i != 0} the update locations of direction a:

- Jaccard of locations:      |S_a & S_b| / |S_a | S_b|
- sign agreement:            |{i in S_a & S_b : a_i = b_i}| / |S_a & S_b|
- cosine of sign vectors:    <a, b> / sqrt(|S_a| |S_b|)          (since ||a||^2 = |S_a| for signs)
- cosine of raw deltas:      <dA, dB> / (||dA|| ||dB||)         (only when the checkpoints are given)

All sums are accumulated tensor by tensor (in float64 / int64), so checkpoints are streamed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from opsft.checkpoints import WeightSource
from opsft.directions import Direction, Rule, paired_tensors, sign_of_change
from opsft.modules import MODULE_TYPES, module_type

METRICS: tuple[str, ...] = ("jaccard", "sign_agreement", "sign_cosine", "delta_cosine")


@dataclass
class _Tally:
    n: int = 0
    size_a: int = 0
    size_b: int = 0
    common: int = 0
    agree: int = 0
    sign_dot: int = 0
    delta_dot: float = 0.0
    delta_a2: float = 0.0
    delta_b2: float = 0.0
    has_deltas: bool = False

    def add(self, va: torch.Tensor, vb: torch.Tensor, da: torch.Tensor | None, db: torch.Tensor | None) -> None:
        sa, sb = va != 0, vb != 0
        both = sa & sb
        self.n += va.numel()
        self.size_a += int(sa.sum())
        self.size_b += int(sb.sum())
        self.common += int(both.sum())
        self.agree += int((both & (va == vb)).sum())
        self.sign_dot += int((va.to(torch.int64) * vb.to(torch.int64)).sum())
        if da is not None and db is not None:
            self.has_deltas = True
            da, db = da.to(torch.float64), db.to(torch.float64)
            self.delta_dot += float((da * db).sum())
            self.delta_a2 += float((da * da).sum())
            self.delta_b2 += float((db * db).sum())

    def metrics(self) -> dict[str, float]:
        union = self.size_a + self.size_b - self.common
        return {
            "params": float(self.n),
            "frac_a": self.size_a / max(self.n, 1),
            "frac_b": self.size_b / max(self.n, 1),
            "jaccard": self.common / union if union else math.nan,
            "sign_agreement": self.agree / self.common if self.common else math.nan,
            "sign_cosine": self.sign_dot / math.sqrt(self.size_a * self.size_b) if self.size_a * self.size_b else math.nan,
            "delta_cosine": (
                self.delta_dot / math.sqrt(self.delta_a2 * self.delta_b2)
                if self.has_deltas and self.delta_a2 * self.delta_b2 > 0
                else math.nan
            ),
        }


def _check_same_layout(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            side = "A" if name not in a else "B"
            raise ValueError(f"directions hold different parameters: {name!r} is missing from {side}")
        if a[name].shape != b[name].shape:
            raise ValueError(f"parameter {name!r} has shape {list(a[name].shape)} in A but {list(b[name].shape)} in B")


def _summarise(tallies: dict[str, _Tally]) -> dict[str, dict[str, float]]:
    overall = _Tally()
    for t in tallies.values():
        for f in ("n", "size_a", "size_b", "common", "agree", "sign_dot", "delta_dot", "delta_a2", "delta_b2"):
            setattr(overall, f, getattr(overall, f) + getattr(t, f))
        overall.has_deltas |= t.has_deltas
    order = [g for g, _ in MODULE_TYPES] + ["other"]
    rows = {"overall": overall.metrics()}
    rows.update({g: tallies[g].metrics() for g in order if g in tallies})
    return rows


def compare_directions(a: Direction, b: Direction) -> dict[str, dict[str, float]]:
    """Jaccard, sign agreement and sign cosine of two directions, overall and per module group."""
    _check_same_layout(a.signs, b.signs)
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    for name, va in a.signs.items():
        tallies[module_type(name)].add(va, b.signs[name], None, None)
    return _summarise(tallies)


def compare_checkpoints(
    base_a: WeightSource, after_a: WeightSource, base_b: WeightSource, after_b: WeightSource, rule: Rule = "bf16"
) -> dict[str, dict[str, float]]:
    """All four metrics for the updates dA = after_a - base_a and dB = after_b - base_b, streamed tensor by
    tensor; the signs use ``rule`` (see ``opsft.directions.sign_of_change``)."""
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    for (name, ba, aa), (name_b, bb, ab) in zip(
        paired_tensors(base_a, after_a), paired_tensors(base_b, after_b), strict=True
    ):
        if name != name_b or aa.shape != ab.shape:
            raise ValueError(f"the two runs differ at parameter {name!r} ({list(aa.shape)}) vs {name_b!r} ({list(ab.shape)})")
        da = aa.to(torch.float64) - ba.to(torch.float64)
        db = ab.to(torch.float64) - bb.to(torch.float64)
        tallies[module_type(name)].add(sign_of_change(ba, aa, rule), sign_of_change(bb, ab, rule), da, db)
    return _summarise(tallies)


def compare(
    a: str | Path | Direction,
    b: str | Path | Direction,
    base_a: WeightSource | None = None,
    base_b: WeightSource | None = None,
    rule: Rule = "bf16",
) -> dict[str, dict[str, float]]:
    """Compare two direction files (or Direction objects); given bases, treat A and B as trained checkpoints
    and add the raw-delta cosine (``compare_checkpoints``)."""
    if base_a is not None:
        return compare_checkpoints(base_a, a, base_b if base_b is not None else base_a, b, rule)
    da = a if isinstance(a, Direction) else Direction.load(a)
    db = b if isinstance(b, Direction) else Direction.load(b)
    return compare_directions(da, db)


def to_markdown(rows: dict[str, dict[str, float]]) -> str:
    """A markdown table: one row per module group, columns params, fractions nonzero and the metrics."""
    cols = ("params", "frac_a", "frac_b", *METRICS)
    lines = ["| module | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for group, m in rows.items():
        cells = [f"{int(m['params'])}"] + ["-" if math.isnan(m[c]) else f"{m[c]:.4f}" for c in cols[1:]]
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
