"""Provenance stamped on every run and results file: code version, library versions, machine."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# What runs write into the checkout (results pages and saved claims runs): changes there are outputs, not code, so
# they leave a checkout clean (the main job writes results/organism.md before it saves the claims).
OUTPUT_PATHS = ("results", ".claims")


def git_state() -> tuple[str | None, bool | None]:
    """The checkout's commit and whether tracked files outside ``OUTPUT_PATHS`` have uncommitted changes (None:
    not a git checkout)."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                  *(f":(top,exclude){p}" for p in OUTPUT_PATHS))
    return _git("rev-parse", "HEAD"), (bool(status) if status is not None else None)


def provenance() -> dict:
    """Commit and dirty flag of the checkout, versions of the numeric stack, the numerics mode and settings
    (``opsft.numerics.record``), machine, threads and UTC time."""
    import torch
    import transformers

    from opsft.numerics import record

    commit, dirty = git_state()
    return {
        "commit": commit,
        "dirty": dirty,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "numerics": record(),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "platform": platform.platform(),
                    "torch_threads": torch.get_num_threads()},
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
