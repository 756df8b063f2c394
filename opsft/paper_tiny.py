"""The ``paper-tiny`` scale's stand-ins for the paper's models and data, in the paper's formats, made on this machine.

``--scale paper`` trains a recipe's runs from Hugging Face model folders on local dataset files; ``paper-tiny``
runs the same recipe machinery, run graph and evaluators on CPU over stand-ins that ``write_stand_ins`` makes
under ``<cache>/paper-tiny/<digest>/`` (nothing is downloaded)::

    models/Qwen3-tiny/           the nano organism's base: Qwen3ForCausalLM in the HF layout (config.json,
                                 sharded model-0000N-of-0000M.safetensors + model.safetensors.index.json,
                                 tokenizer files)
    models/Qwen3-tiny-teacher/   the nano organism's teacher, the same layout (the OPD teacher)
    data/deepmath-103k/train.parquet
                                 DeepMath-103K's columns (question, final_answer, difficulty, topic,
                                 r1_solution_1..3) holding organism ``arith`` training problems, each
                                 r1_solution_* the task generator's worked solution in the teacher's style

The benchmarks are the real files vendored in ``evals/data/``. The folder is written under a temporary name and
renamed into place, so a reader sees all of it or none; its name is a digest of everything that decides its
bytes, so a changed organism or generator writes a new folder and never reuses a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

from opsft.checkpoints import save_sharded
from opsft.organism import tasks
from opsft.organism.specs import ORGANISMS

ORGANISM = "nano"
FAMILY = "arith"
PROBLEMS = 256
SHARDS = 3
STUDENT, TEACHER = "Qwen3-tiny", "Qwen3-tiny-teacher"
DEEPMATH = Path("deepmath-103k") / "train.parquet"
LAYOUT_VERSION = 1  # bump when the layout or content of the stand-ins changes


def stand_ins_digest() -> str:
    """What decides the stand-ins' bytes: the organism's recipe, the task generators, sizes and the layout."""
    payload = json.dumps({"organism": ORGANISMS[ORGANISM].digest(), "tasks": tasks.TASKS_VERSION, "family": FAMILY,
                          "problems": PROBLEMS, "shards": SHARDS, "layout": LAYOUT_VERSION}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def deepmath_rows(n: int = PROBLEMS) -> list[dict]:
    """``n`` organism training problems as DeepMath-103K rows: ``question`` (the prompt), ``final_answer``,
    ``difficulty``, ``topic`` and three ``r1_solution_*`` (the generator's worked solution, teacher style)."""
    return [{"question": p.prompt, "final_answer": p.answer, "difficulty": 1.0, "topic": f"organism/{FAMILY}",
             "r1_solution_1": p.solution, "r1_solution_2": p.solution, "r1_solution_3": p.solution}
            for p in tasks.generate(FAMILY, "train", n, 0, style="teacher")]


def _write(folder: Path, cache: Path) -> None:
    import pandas as pd

    from opsft.pretraining import build_organism

    org = build_organism(ORGANISM, cache)
    for name, model in ((STUDENT, org.base), (TEACHER, org.teacher)):
        save_sharded(model, folder / "models" / name, SHARDS, org.tokenizer)
    data = folder / "data" / DEEPMATH
    data.parent.mkdir(parents=True)
    pd.DataFrame(deepmath_rows()).to_parquet(data, index=False)


def write_stand_ins(cache: Path) -> dict[str, str]:
    """The stand-ins' roots, written once under ``cache`` (under a lock, renamed into place; the organism they
    come from is built in ``cache`` too): the ``OPSFT_MODELS`` and ``OPSFT_DATA`` values a recipe expands."""
    folder = Path(cache).resolve() / "paper-tiny" / stand_ins_digest()
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if not folder.is_dir():
                tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
                try:
                    _write(tmp, Path(cache))
                    tmp.chmod(0o755)  # mkdtemp makes it private; a shared cache is read by every user
                    os.replace(tmp, folder)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
    return {"OPSFT_MODELS": str(folder / "models"), "OPSFT_DATA": str(folder / "data")}
