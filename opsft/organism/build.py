"""Building the organism: a base model pretrained on a noisy mixture (it solves some in-domain problems and
holds abilities post-training can erase) and a stronger teacher writing in its own style, whose verified
samples are the SFT trajectories and whose log-probabilities are the OPD target.

Both are trained on first use with the shared loop and cached under the spec's digest; a warm load takes
well under a second.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from opsft.checkpoints import save_state
from opsft.config import Digestible, OptimConfig
from opsft.io import atomic_write_json, atomic_write_text, file_sha256, read_verified_manifest
from opsft.objectives import sft_loss
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS, accuracy
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.paths import cache_root
from opsft.sampling.hf import HFSampler
from opsft.sources import Example, StaticSource
from opsft.train import make_optimizer, make_scheduler, train

# The base's pretraining mixture (family -> share). In-domain families are learned only part-way; the
# held-out abilities are what post-training can make it forget.
BASE_MIXTURE = (("arith", 0.40), ("arith_alt", 0.15), ("code", 0.15), ("times", 0.10), ("neg", 0.10), ("format", 0.10))
# The teacher sees the in-domain families in its own style, more of them, for longer.
TEACHER_MIXTURE = (("arith", 0.45), ("arith_alt", 0.25), ("code", 0.30))


@dataclass(frozen=True)
class OrganismSpec(Digestible):
    """Sizes and training budgets of one organism (student base + teacher)."""

    student: str = "micro"
    teacher: str = "mini"
    base_steps: int = 1000
    teacher_steps: int = 1500
    batch_size: int = 64
    pretrain_lr: float = 2e-3
    pretrain_examples: int = 30_000
    seed: int = 0
    base_mixture: tuple = BASE_MIXTURE
    teacher_mixture: tuple = TEACHER_MIXTURE
    eval_problems: int = 200


ORGANISMS: dict[str, OrganismSpec] = {
    "nano": OrganismSpec(student="nano", teacher="nano", base_steps=60, teacher_steps=60, pretrain_examples=2000,
                         eval_problems=32),
    "micro": OrganismSpec(),
    "small": OrganismSpec(student="small", base_steps=900),
}


@dataclass
class Organism:
    """A built organism: tokenizer, base and teacher models (fp32, CPU), and its measured accuracies."""

    spec: OrganismSpec
    folder: Path
    tokenizer: PreTrainedTokenizerBase
    base: Qwen3ForCausalLM
    teacher: Qwen3ForCausalLM
    report: dict = field(default_factory=dict)


def mixture_examples(mixture: tuple, n: int, seed: int, style: tasks.Style) -> list[Example]:
    """``n`` training-split examples drawn from the families of ``mixture`` in proportion to their shares."""
    out: list[Example] = []
    for family, share in mixture:
        want = max(1, round(share * n))
        problems = _at_most(family, want, seed, style)
        out += [Example(p.prompt, p.solution, p) for p in problems]
    return out


def _at_most(family: str, n: int, seed: int, style: tasks.Style) -> list[tasks.Problem]:
    """``n`` training problems; small families (the times table) repeat their distinct problems to fill ``n``."""
    problems = tasks.generate(family, "train", n, seed, style, at_most=True)
    return (problems * (n // len(problems) + 1))[:n]


def _pretrain(size: str, mixture: tuple, style: tasks.Style, steps: int, spec: OrganismSpec,
              tokenizer: PreTrainedTokenizerBase, salt: int) -> Qwen3ForCausalLM:
    model = build_model(size, seed=spec.seed + salt)
    examples = mixture_examples(mixture, spec.pretrain_examples, spec.seed + salt, style)
    source = StaticSource(examples, tokenizer, spec.batch_size, spec.seed + salt)
    optim_cfg = OptimConfig(lr=spec.pretrain_lr, weight_decay=0.0, betas=(0.9, 0.98), schedule="cosine",
                            warmup_frac=0.05, min_lr_ratio=0.1)
    optimizer = make_optimizer(model, optim_cfg)
    train(model, optimizer, source, sft_loss, steps=steps, scheduler=make_scheduler(optimizer, optim_cfg, steps),
          grad_clip=1.0, progress=True, desc=f"pretrain {size} ({style})")
    model.eval()
    return model


def measure(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, n: int, seed: int = 0) -> dict[str, float]:
    """Greedy accuracy on ``n`` test problems of every family (multiple choice excluded: it is scored by
    log-likelihood in the evaluators)."""
    out = {}
    for family in tasks.FAMILIES:
        if family == "mc":
            continue
        probs = tasks.generate(family, "test", n, seed, at_most=True)
        out[family] = accuracy(model, tokenizer, probs)
    return out


def _load_model(size: str, path: Path) -> Qwen3ForCausalLM:
    model = build_model(size)
    model.load_state_dict(load_file(str(path)), strict=False)
    model.tie_weights()
    model.eval()
    return model


def build_organism(name: str = "micro", cache: Path | None = None) -> Organism:
    """The organism ``name`` (see ORGANISMS): loaded from the cache when its files verify, else trained.

    A corrupted or partial cache entry (checksum mismatch, missing file) is rebuilt, with a message.
    """
    if name not in ORGANISMS:
        raise KeyError(f"unknown organism {name!r}; known: {', '.join(ORGANISMS)}")
    spec = ORGANISMS[name]
    folder = (cache or cache_root()) / "organisms" / f"{name}-{spec.digest()}"
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    with FileLock(str(folder) + ".lock"):
        report = read_verified_manifest(folder / "organism.json", "organism cache")
        if report is None:
            report = _build(spec, folder, tokenizer)
            atomic_write_json(folder / "organism.json", report)
    return Organism(spec, folder, tokenizer, _load_model(spec.student, folder / "base.safetensors"),
                    _load_model(spec.teacher, folder / "teacher.safetensors"), report)


def _trained(role: str, size: str, mixture: tuple, style: tasks.Style, steps: int, spec: OrganismSpec,
             folder: Path, tokenizer: PreTrainedTokenizerBase, salt: int) -> tuple[Qwen3ForCausalLM, float]:
    """One of the two models, pretrained and saved as ``ROLE.safetensors`` (with its build time beside it);
    a model already saved by an interrupted build is reused, since saves are atomic."""
    path, seconds = folder / f"{role}.safetensors", folder / f"{role}.seconds"
    if path.is_file() and seconds.is_file():
        return _load_model(size, path), float(seconds.read_text())
    t0 = time.perf_counter()
    model = _pretrain(size, mixture, style, steps, spec, tokenizer, salt)
    save_state(model, path)
    atomic_write_text(seconds, repr(time.perf_counter() - t0))
    return model, time.perf_counter() - t0


def _build(spec: OrganismSpec, folder: Path, tokenizer: PreTrainedTokenizerBase) -> dict:
    base, t_base = _trained("base", spec.student, spec.base_mixture, "base", spec.base_steps, spec, folder,
                            tokenizer, salt=0)
    teacher, t_teacher = _trained("teacher", spec.teacher, spec.teacher_mixture, "teacher", spec.teacher_steps,
                                  spec, folder, tokenizer, salt=1)
    tokenizer.save_pretrained(folder / "tokenizer")
    t0 = time.perf_counter()
    accuracy_report = {"base": measure(base, tokenizer, spec.eval_problems),
                       "teacher": measure(teacher, tokenizer, spec.eval_problems)}
    return {
        "spec": spec.to_dict(),
        "build_seconds": {"base": t_base, "teacher": t_teacher, "measure": time.perf_counter() - t0},
        "accuracy": accuracy_report,
        "sha256": {f: file_sha256(folder / f) for f in ("base.safetensors", "teacher.safetensors")},
        "torch": torch.__version__,
    }


def teacher_trajectories(org: Organism, family: str, n_problems: int, *, tries: int = 4,
                         data_seed: int = 0) -> list[Example]:
    """SFT data: for each of the first ``n_problems`` training problems of ``family``, the first of ``tries``
    teacher samples (temperature 1) that verifies; problems the teacher never solves are dropped.
    Cached as JSON lines beside the organism."""
    path = org.folder / "trajectories" / f"{family}-{n_problems}-{tries}-{data_seed}.jsonl"
    problems = tasks.generate(family, "train", n_problems, data_seed)
    if not path.is_file():
        sampler, rows = HFSampler(org.tokenizer), []
        for i in range(0, len(problems), 256):
            chunk = problems[i : i + 256]
            roll = sampler.sample(org.teacher, [p.prompt for p in chunk], tries, 1.0, MAX_NEW_TOKENS, data_seed + i)
            for j, p in enumerate(chunk):
                good = [t for t in roll.texts[j * tries : (j + 1) * tries] if tasks.is_correct(p, t)]
                if good:
                    rows.append({"prompt": p.prompt, "completion": good[0]})
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
    by_prompt = {p.prompt: p for p in problems}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [Example(r["prompt"], r["completion"], by_prompt[r["prompt"]]) for r in rows]
