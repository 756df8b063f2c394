"""Where the evaluation data lives: the repository's top-level ``evals/`` folder (the package is installed editable)."""

from __future__ import annotations

from pathlib import Path


def evals_root() -> Path:
    """The ``evals/`` folder beside the ``opsft`` package; a clear error when the checkout lacks it."""
    root = Path(__file__).resolve().parents[2] / "evals"
    if not (root / "data").is_dir() or not (root / "lm_eval_tasks").is_dir():
        raise FileNotFoundError(
            f"evaluation data folder {root} (with data/ and lm_eval_tasks/) is missing: opsft.evals needs the "
            "repository checkout installed editable (pip install -e .)"
        )
    return root


def data_file(name: str) -> Path:
    """A file under ``evals/data/``, named in the error when it is absent."""
    path = evals_root() / "data" / name
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file {path} is missing (see evals/data/README.md)")
    return path
