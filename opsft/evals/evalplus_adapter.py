"""Code scoring through evalplus's own engine: its ground truth, sandbox, base and plus tests and time limits.

We call ``evalplus.evaluate.check_correctness`` per sample with ground truth from ``get_groundtruth``, not
``evalplus.evaluate.evaluate``: the latter silently reuses an existing results file, may call ``input()``
and leaves a thread that delays exit. evalplus reads ``MBPP_OVERRIDE_PATH`` / ``XDG_CACHE_HOME`` at import;
we never use the override (we load the file ourselves), and the ground-truth cache (evalplus's
``CACHE_DIR``, i.e. ``$XDG_CACHE_HOME/evalplus`` as seen at first import) is keyed by a hash of the
problems' content, so a stale entry can never be reused. ``EVALPLUS_TIMEOUT_PER_TASK`` must stay unset.

The sandbox (a forked child per sample, inside a temporary working directory, with ``os.system``,
``subprocess``, ``open``, ``os.remove`` ... disabled and per-input time limits of
max(1 s, 4 x ground-truth time)) is evalplus's ``reliability_guard``. It leaves ``io.open``/``os.open``
(hence ``pathlib`` writes) working, so every sample is prefixed with ``WRITE_GUARD``, which makes
opening a file for writing, creating directories and links raise ``PermissionError`` inside the sandbox
child. Neither layer is a security boundary against deliberately hostile code (e.g. ``ctypes``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsft.evals.paths import data_file

REQUIRED_KEYS = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input", "atol")
Problem = dict[str, Any]

# Prepended to every sample; runs inside evalplus's sandbox child after its reliability_guard.
WRITE_GUARD = """\
def _opsft_write_guard():
    import _io, io, os, posix
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    real_os_open, real_io_open = os.open, io.open

    def denied(*args, **kwargs):
        raise PermissionError("file system writes are disabled in the evaluation sandbox")

    def os_open(path, flags, *args, **kwargs):
        return denied() if flags & writes else real_os_open(path, flags, *args, **kwargs)

    def io_open(file, mode="r", *args, **kwargs):
        return denied() if set(mode) & set("wax+") else real_io_open(file, mode, *args, **kwargs)

    os.open = posix.open = os_open
    io.open = _io.open = io_open
    io.FileIO = _io.FileIO = denied
    for name in ("mkdir", "makedirs", "link", "symlink", "mkfifo", "mknod", "utime"):
        setattr(os, name, denied)
        if hasattr(posix, name):
            setattr(posix, name, denied)


_opsft_write_guard()
del _opsft_write_guard
"""


def read_evalplus_jsonl(path: str | Path, dataset: str = "mbpp") -> dict[str, Problem]:
    """Problems of an evalplus-format jsonl keyed by task_id; MBPP+ inputs get evalplus's own deserialisation."""
    from evalplus.data.mbpp import mbpp_deserialize_inputs

    path = Path(path)
    problems: dict[str, Problem] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [key for key in REQUIRED_KEYS if key not in row]
        if missing:
            raise ValueError(f"{path}:{lineno}: missing key(s) {', '.join(missing)}")
        if dataset == "mbpp" and row["task_id"].startswith("Mbpp/"):
            for key in ("base_input", "plus_input"):
                row[key] = mbpp_deserialize_inputs(row["task_id"], row[key])
        row.setdefault("contract", "")
        problems[row["task_id"]] = row
    if not problems:
        raise ValueError(f"{path}: no problems")
    return problems


def load_mbpp_plus(task_ids: Sequence[str] | None = None) -> dict[str, Problem]:
    """MBPP+ from ``evals/data/MbppPlus.jsonl`` (all 378 tasks, or the named subset in file order)."""
    problems = read_evalplus_jsonl(data_file("MbppPlus.jsonl"), "mbpp")
    if task_ids is None:
        return problems
    unknown = [t for t in task_ids if t not in problems]
    if unknown:
        raise KeyError(f"task ids not in MbppPlus.jsonl: {', '.join(unknown)}")
    return {t: problems[t] for t in task_ids}


def write_evalplus_jsonl(problems: Sequence[Problem], path: str | Path) -> Path:
    """Write problems (each with every key of ``REQUIRED_KEYS`` plus ``contract``) as an evalplus jsonl, atomically."""
    from opsft.io import atomic_write_text

    for index, problem in enumerate(problems):
        missing = [key for key in (*REQUIRED_KEYS, "contract") if key not in problem]
        if missing:
            raise ValueError(f"problem {index} ({problem.get('task_id')!r}): missing key(s) {', '.join(missing)}")
    return atomic_write_text(path, "".join(json.dumps(p) + "\n" for p in problems))


def _content_hash(problems: Mapping[str, Problem]) -> str:
    """A hash of the problems and the evalplus version: the ground-truth cache key."""
    import evalplus

    payload = json.dumps([problems[t] for t in sorted(problems)], sort_keys=True, default=repr)
    return "opsft-" + hashlib.sha256((evalplus.__version__ + payload).encode()).hexdigest()[:32]


def ground_truth(problems: Mapping[str, Problem], dataset: str = "mbpp") -> dict[str, dict]:
    """Expected outputs and reference times of the canonical solutions (evalplus ``get_groundtruth``, cached)."""
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.evaluate import get_groundtruth

    not_none = MBPP_OUTPUT_NOT_NONE_TASKS if dataset == "mbpp" else []
    with contextlib.redirect_stdout(io.StringIO()):
        return get_groundtruth(dict(problems), _content_hash(problems), not_none)


@dataclass(frozen=True)
class CodeResult:
    """evalplus statuses of one sample: ``base`` and ``plus`` are 'pass', 'fail' or 'timeout'."""

    task_id: str
    base: str
    plus: str

    @property
    def base_ok(self) -> bool:
        """Passes the base tests."""
        return self.base == "pass"

    @property
    def plus_ok(self) -> bool:
        """Passes base and plus tests (evalplus's 'base + extra' score)."""
        return self.base == "pass" and self.plus == "pass"


def check_solutions(
    problems: Mapping[str, Problem],
    solutions: Sequence[tuple[str, str]],
    expected: Mapping[str, dict] | None = None,
    dataset: str = "mbpp",
    workers: int = 2,
) -> list[CodeResult]:
    """Run each (task_id, full program) through evalplus's sandbox on base and plus inputs, in order."""
    from evalplus.evaluate import check_correctness

    unknown = sorted({task_id for task_id, _ in solutions} - set(problems))
    if unknown:
        raise KeyError(f"solutions for unknown task ids: {', '.join(unknown)}")
    expected = expected if expected is not None else ground_truth(problems, dataset)

    def run(index: int) -> CodeResult:
        task_id, code = solutions[index]
        if not compiles(code):  # evalplus would fail it too, after forking two sandbox children
            return CodeResult(task_id=task_id, base="fail", plus="fail")
        program = WRITE_GUARD + code
        out = check_correctness(dataset, index, problems[task_id], program, expected[task_id], fast_check=True)
        return CodeResult(task_id=task_id, base=out["base"][0], plus=out["plus"][0])

    # Each check waits on its own forked sandbox child, so threads suffice to keep `workers` children busy.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, range(len(solutions))))


def compiles(code: str) -> bool:
    """Whether ``code`` is syntactically valid Python (compiled, never executed)."""
    try:
        compile(code, "<sample>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def canonical_program(problem: Problem) -> str:
    """The reference program evalplus executes for ground truth: prompt + canonical_solution."""
    return problem["prompt"] + problem["canonical_solution"]
