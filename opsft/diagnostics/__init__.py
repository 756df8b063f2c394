"""Parameter-space diagnostics of OPSFT (arXiv 2609.36659) and GEO (arXiv 2606.07082, after PNT).

``factors``: exact float64 singular values and top-k singular subspaces, one factorization per matrix
shared by its metrics (CPU, or CUDA when present); ``metrics``: per-tensor formulas; ``streaming``:
snapshot access, cosines, bf16 sparsity and update locations over checkpoints, one tensor name at a time;
``summaries``: endpoint and trajectory summaries; ``report``: JSON, markdown, figures and the
``opsft diagnose`` subcommand.
"""

from opsft.diagnostics.metrics import (
    bf16_changed_mask,
    bf16_unchanged_fraction,
    default_hill_k,
    frobenius_norm,
    hill_tail_index,
    mask_overlap,
    principal_angles,
    spectral_shift,
    stable_rank,
    subspace_similarity,
)
from opsft.diagnostics.report import compute_all, diagnose, render_markdown
from opsft.diagnostics.streaming import (
    SnapshotMismatchError,
    bf16_sparsity,
    update_cosines,
    update_locations,
)
from opsft.diagnostics.summaries import endpoint_summary, trajectory_summary
from opsft.modules import module_type

__all__ = [
    "SnapshotMismatchError",
    "bf16_changed_mask",
    "bf16_sparsity",
    "bf16_unchanged_fraction",
    "compute_all",
    "default_hill_k",
    "diagnose",
    "endpoint_summary",
    "frobenius_norm",
    "hill_tail_index",
    "mask_overlap",
    "module_type",
    "principal_angles",
    "render_markdown",
    "spectral_shift",
    "stable_rank",
    "subspace_similarity",
    "trajectory_summary",
    "update_cosines",
    "update_locations",
]
