"""Teacher trajectories: sample a teacher on a prompt set, keep the completions that verify, write them as a
JSON-lines dataset with a provenance JSON beside it.

Any sampler works (``HFSampler`` on an in-memory model, ``VLLMSampler`` on a teacher folder). Correctness is
the trainer's own reward (``opsft.runs.reward``: the organism's verifier, math-verify on the boxed answer for
real math) and, for real code (Eurus rows), the row's stdin/stdout tests run in a child process.

Output ``NAME.jsonl``, one line per kept completion::

    {"prompt": str, "completion": str, "answer": str, "kind": "math"|"code", "tests": dict|list|null,
     "problem": index in the prompt set, "sample": index among the problem's samples}

and ``NAME.jsonl.provenance.json``: teacher (folder, weights digest), sampler, parameters, prompt set digest,
counts, seconds, machine/commit provenance, and the SHA-256 of the data file. Both are written atomically, the
data first; a call whose inputs (teacher, sampler, parameters, prompts) match a verified provenance file returns
the file as it is, without sampling.
"""

from __future__ import annotations

import hashlib
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from filelock import FileLock

from opsft.data.real import RealProblem, load_examples
from opsft.digest import Digestible
from opsft.directions import source_digest
from opsft.evals.generation import Sampling
from opsft.io import atomic_write_json, atomic_write_text, file_sha256, read_verified_manifest
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS
from opsft.pretraining import Organism
from opsft.provenance import provenance
from opsft.rewards import reward
from opsft.sampling.base import Sampler
from opsft.sampling.hf import HFSampler
from opsft.sampling.vllm import EngineSettings, VLLMSampler
from opsft.sources import Example

Verifier = Callable[[object, str], bool]
CODE_TIMEOUT_S = 5.0
CODE_MEMORY_BYTES = 4 << 30  # each test process may map at most 4 GiB (as evalplus' sandbox)


@dataclass(frozen=True)
class TrajectoryParams(Sampling, Digestible):
    """How trajectories are drawn: the evaluators' Sampling (``k`` teacher samples a problem, ``batch_size``
    sequences a sampler call, the call starting at prompt i seeded ``seed + i``) with teacher-data defaults, and
    which verified samples to ``keep``: the first of a problem's, or all."""

    k: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 64
    batch_size: int = 1024
    keep: Literal["first", "all"] = "first"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.keep not in ("first", "all"):
            raise ValueError(f"TrajectoryParams.keep must be first|all, got {self.keep!r}")


@dataclass
class TrajectorySet:
    """A written trajectory dataset: its file, its provenance, and whether it was reused as found."""

    path: Path
    provenance: dict
    reused: bool

    def examples(self, keys: Mapping[str, object] | None = None) -> list[Example]:
        """The kept trajectories as training Examples (see ``read_trajectories``)."""
        return read_trajectories(self.path, keys)


# --- verification -----------------------------------------------------------------------------------

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_program(completion: str) -> str | None:
    """The last fenced code block of a completion (```python ... ``` or ``` ... ```), or None."""
    blocks = _CODE_BLOCK.findall(completion)
    return blocks[-1] if blocks else None


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CODE_MEMORY_BYTES, CODE_MEMORY_BYTES))


def _same_output(got: str, want: str) -> bool:
    """Outputs compared line by line, trailing whitespace and trailing blank lines ignored."""
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.rstrip().splitlines()]

    return norm(got) == norm(want)


def passes_stdio_tests(completion: str, tests: Mapping, timeout: float = CODE_TIMEOUT_S) -> bool:
    """Whether the completion's program prints ``tests["outputs"][i]`` on stdin ``tests["inputs"][i]`` for every
    i; each case runs in an isolated child Python (``-I``, fresh temp dir, 4 GiB address space, ``timeout``
    seconds). No program, a crash, a timeout or a wrong line is a failure."""
    program = extract_program(completion)
    inputs, outputs = list(tests.get("inputs", [])), list(tests.get("outputs", []))
    if program is None or not inputs or len(inputs) != len(outputs):
        return False
    with tempfile.TemporaryDirectory(prefix="opsft-code-") as folder:
        path = Path(folder) / "solution.py"
        path.write_text(program, encoding="utf-8")
        for stdin, want in zip(inputs, outputs, strict=True):
            try:
                done = subprocess.run([sys.executable, "-I", str(path)], input=str(stdin), capture_output=True,
                                      text=True, timeout=timeout, cwd=folder, preexec_fn=_limit_memory)
            except subprocess.TimeoutExpired:
                return False
            if done.returncode != 0 or not _same_output(done.stdout, str(want)):
                return False
    return True


def is_verified(key: object, completion: str) -> bool:
    """A completion is kept when it solves its problem: the trainer's reward for organism problems and real math
    (math-verify, boxed answer required), the row's stdin/stdout tests for real code."""
    if isinstance(key, RealProblem) and key.kind == "code":
        return passes_stdio_tests(completion, key.tests or {})
    return reward(key, completion) == 1.0


# --- rows ---------------------------------------------------------------------------------------------


def gold_fields(key: object) -> dict:
    """The gold of a problem as JSON fields: ``answer``, ``kind`` and ``tests``."""
    if isinstance(key, RealProblem):
        return {"answer": key.answer, "kind": key.kind, "tests": key.tests}
    if isinstance(key, tasks.Problem):
        return {"answer": key.answer, "kind": "code" if key.family == "code" else "math",
                "tests": [list(t) for t in key.tests] or None}
    raise TypeError(f"no gold for a problem of type {type(key).__name__}")


def read_trajectories(path: str | Path, keys: Mapping[str, object] | None = None) -> list[Example]:
    """The rows of a trajectory file as Examples. Each key is ``keys[prompt]`` when given (e.g. the organism's
    Problems by prompt), else a RealProblem rebuilt from the row's gold."""
    path = Path(path)
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        row = json.loads(line)
        missing = {"prompt", "completion", "answer", "kind"} - row.keys()
        if missing:
            raise KeyError(f"{path}:{lineno}: trajectory row lacks {sorted(missing)}")
        if keys is not None:
            if row["prompt"] not in keys:
                raise KeyError(f"{path}:{lineno}: prompt {row['prompt'][:40]!r} is not in the given problem set")
            key = keys[row["prompt"]]
        else:
            key = RealProblem(row["answer"], kind=row["kind"], tests=row.get("tests"))
        out.append(Example(row["prompt"], row["completion"], key))
    return out


def prompt_set_digest(examples: Sequence[Example]) -> str:
    """SHA-256 (16 hex digits) of the prompts and golds, in order."""
    payload = json.dumps([[e.prompt, gold_fields(e.key)] for e in examples], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def teacher_identity(teacher: torch.nn.Module | str | Path) -> dict:
    """Provenance of a teacher: a local folder with the digest of its safetensors headers and sizes (cheap), or
    an in-memory model with the digest of every tensor's bytes."""
    if isinstance(teacher, (str, Path)):
        return {"folder": str(Path(teacher).resolve()), "digest": source_digest(teacher)}
    return {"folder": None, "digest": source_digest(teacher)}


def sample_verified(examples: Sequence[Example], sampler: Sampler, teacher: torch.nn.Module | None,
                    params: TrajectoryParams, verify: Verifier = is_verified) -> tuple[list[dict], dict]:
    """Sample ``params.k`` completions a problem and keep the verified ones (the first, or all); returns the rows
    and the counts (problems, samples, verified samples, problems kept, rows)."""
    k, rows, verified, solved = params.k, [], 0, 0
    per_call = max(1, params.batch_size // k)
    for start in range(0, len(examples), per_call):
        chunk = examples[start : start + per_call]
        roll = sampler.sample(teacher, [e.prompt for e in chunk], k, params.temperature, params.max_new_tokens,
                              params.seed + start, top_p=params.top_p)
        for j, example in enumerate(chunk):
            good = [(s, t) for s, t in enumerate(roll.texts[j * k : (j + 1) * k]) if verify(example.key, t)]
            verified += len(good)
            solved += bool(good)
            for s, text in good[:1] if params.keep == "first" else good:
                rows.append({"prompt": example.prompt, "completion": text, **gold_fields(example.key),
                             "problem": start + j, "sample": s})
    counts = {"problems": len(examples), "samples": len(examples) * k, "verified_samples": verified,
              "problems_kept": solved, "rows": len(rows)}
    return rows, counts


def make_trajectories(examples: Sequence[Example], sampler: Sampler, teacher: torch.nn.Module | None,
                      out: str | Path, params: TrajectoryParams, *, teacher_id: dict, source: str | None = None,
                      verify: Verifier = is_verified) -> TrajectorySet:
    """Write the verified trajectories of ``teacher`` on ``examples`` to ``out`` (JSON lines) and
    ``out.provenance.json``, under a file lock; reuse them when a verified provenance file records the same
    teacher, sampler, parameters and prompt set. ``teacher_id`` comes from ``teacher_identity``; ``source``
    names where the prompts came from (recorded only)."""
    if not examples:
        raise ValueError("make_trajectories needs at least one prompt")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    inputs = {"teacher": teacher_id, "sampler": type(sampler).__name__, "params": params.to_dict(),
              "prompts": {"count": len(examples), "digest": prompt_set_digest(examples), "source": source}}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    manifest_path = out.with_name(out.name + ".provenance.json")
    with FileLock(str(out) + ".lock"):
        found = read_verified_manifest(manifest_path, "trajectories")
        if found is not None and found.get("key") == key:
            return TrajectorySet(out, found, reused=True)
        t0 = time.perf_counter()
        rows, counts = sample_verified(examples, sampler, teacher, params, verify)
        atomic_write_text(out, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        manifest = {**inputs, "key": key, "counts": counts, "seconds": time.perf_counter() - t0,
                    "provenance": provenance(), "sha256": {out.name: file_sha256(out)}}
        atomic_write_json(manifest_path, manifest)
    return TrajectorySet(out, manifest, reused=False)


def trajectories_from_folder(teacher_folder: str | Path, dataset_path: str | Path, out: str | Path,
                             params: TrajectoryParams, *, backend: Literal["hf", "vllm"] = "hf",
                             n_problems: int | None = None, engine: EngineSettings | None = None) -> TrajectorySet:
    """Trajectories of a local Hugging Face teacher folder on the first ``n_problems`` rows (all when None) of
    a local dataset file (DeepMath / DAPO / Eurus schema), sampled with HF ``generate`` (CPU) or a vLLM engine
    built from the folder (``engine``: its EngineSettings). Nothing is downloaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if backend not in ("hf", "vllm"):
        raise ValueError(f"backend must be hf|vllm, got {backend!r}")
    folder = Path(teacher_folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"teacher folder {folder} has no config.json (a local Hugging Face model folder)")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, padding_side="left")
    examples = load_examples(dataset_path, limit=n_problems)
    sampler: Sampler
    if backend == "vllm":
        sampler, model = VLLMSampler.from_folder(folder, tokenizer, engine or EngineSettings(), sync_weights=False), None
    else:
        sampler, model = HFSampler(tokenizer), AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    return make_trajectories(examples, sampler, model, out, params, teacher_id=teacher_identity(folder),
                             source=str(Path(dataset_path).resolve()))


def teacher_trajectories(org: Organism, family: str, n_problems: int, *, tries: int = 4,
                         data_seed: int = 0) -> list[Example]:
    """SFT data: for each of the first ``n_problems`` training problems of ``family``, the first of ``tries``
    teacher samples (temperature 1) that verifies; problems the teacher never solves are dropped. Written by
    the generic teacher-trajectory step (``opsft.trajectories``) beside the organism, with its provenance."""
    problems = tasks.generate(family, "train", n_problems, data_seed)
    path = org.folder / "trajectories" / f"{family}-{n_problems}-{tries}-{data_seed}.jsonl"
    params = TrajectoryParams(k=tries, max_new_tokens=MAX_NEW_TOKENS, seed=data_seed)
    made = make_trajectories([Example(p.prompt, "", p) for p in problems], HFSampler(org.tokenizer), org.teacher,
                             path, params, teacher_id=teacher_identity(org.teacher), source=f"organism {family}")
    return made.examples({p.prompt: p for p in problems})
