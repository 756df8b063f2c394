"""Where the run cache lives: ``$OPSFT_CACHE`` if set, else ``.cache/opsft`` in the working directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The cache folder for organisms, runs and datasets (created on demand)."""
    root = Path(os.environ.get("OPSFT_CACHE", Path.cwd() / ".cache" / "opsft"))
    root.mkdir(parents=True, exist_ok=True)
    return root
