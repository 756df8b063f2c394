"""Building the organism: a base model pretrained on a noisy mixture (it solves some in-domain problems and
holds abilities post-training can erase) and a stronger teacher writing in its own style, whose verified
samples are the SFT trajectories and whose log-probabilities are the OPD target.

Both are trained on first use with the shared loop and cached under the spec's digest; a warm load takes
well under a second. This module sits above the trainer (it pretrains through ``opsft.train``), while
``opsft.organism`` (specs, tokenizer, models, tasks, scoring) stays below it: the layers run config -> organism
-> trainer -> pretraining, runs -> claims.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from opsft.checkpoints import save_state
from opsft.config import OptimConfig
from opsft.io import atomic_write_json, file_sha256, read_verified_manifest
from opsft.numerics import record as numerics_record
from opsft.objectives import sft_loss
from opsft.organism import tasks
from opsft.organism.accuracy import accuracy
from opsft.organism.models import build_model
from opsft.organism.specs import ORGANISMS, ModelRecipe, OrganismSpec
from opsft.organism.tokenizer import build_tokenizer
from opsft.paths import cache_root
from opsft.sources import Example, StaticSource
from opsft.threads import pinned_threads
from opsft.train import make_optimizer, make_scheduler, train


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


def _pretrain(recipe: ModelRecipe, tokenizer: PreTrainedTokenizerBase) -> Qwen3ForCausalLM:
    model = build_model(recipe.size, seed=recipe.seed)
    examples = mixture_examples(recipe.mixture, recipe.examples, recipe.seed, recipe.style)
    source = StaticSource(examples, tokenizer, recipe.batch_size, recipe.seed)
    optim_cfg = OptimConfig(lr=recipe.lr, weight_decay=0.0, betas=(0.9, 0.98), schedule="cosine",
                            warmup_frac=0.05, min_lr_ratio=0.1)
    optimizer = make_optimizer(model, optim_cfg)
    train(model, optimizer, source, sft_loss, steps=recipe.steps,
          scheduler=make_scheduler(optimizer, optim_cfg, recipe.steps), grad_clip=1.0, progress=True,
          desc=f"pretrain {recipe.size} ({recipe.style})", length_chunks=recipe.length_chunks)
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

    Each model is cached under its own recipe's digest (``organisms/models/<role>-<digest>/``), so organisms
    that share a teacher recipe share the teacher. A corrupted or partial cache entry (checksum mismatch,
    missing file) is rebuilt, with a message.
    """
    if name not in ORGANISMS:
        raise KeyError(f"unknown organism {name!r}; known: {', '.join(ORGANISMS)}")
    spec = ORGANISMS[name]
    root = (cache or cache_root()) / "organisms"
    folder = organism_folder(name, root)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    with FileLock(str(folder) + ".lock"):
        report = read_verified_manifest(folder / "organism.json", "organism cache")
        if report is None:
            report = _build(spec, root, folder, tokenizer)
            atomic_write_json(folder / "organism.json", report)
    return Organism(spec, folder, tokenizer, _load_model(spec.student, folder / report["models"]["base"]),
                    _load_model(spec.teacher, folder / report["models"]["teacher"]), report)


def organism_folder(name: str, root: Path) -> Path:
    """Where organism ``name`` (a key of ``ORGANISMS``) is cached under ``root`` (``<cache>/organisms``)."""
    return root / f"{name}-{ORGANISMS[name].digest()}"


def _trained(recipe: ModelRecipe, root: Path, tokenizer: PreTrainedTokenizerBase) -> tuple[Path, float]:
    """The weights file of ``recipe`` (``<root>/models/<style>-<digest>/model.safetensors``) and the seconds it
    took to pretrain: trained and saved with a checksummed ``model.json`` unless a verified one is there."""
    folder = model_folder(recipe, root)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        manifest = read_verified_manifest(folder / "model.json", "organism model cache")
        if manifest is None:
            t0 = time.perf_counter()
            with pinned_threads():
                save_state(_pretrain(recipe, tokenizer), folder / "model.safetensors")
            manifest = {"recipe": recipe.to_dict(), "seconds": time.perf_counter() - t0,
                        "sha256": {"model.safetensors": file_sha256(folder / "model.safetensors")}}
            atomic_write_json(folder / "model.json", manifest)
    return folder / "model.safetensors", manifest["seconds"]


def model_folder(recipe: ModelRecipe, root: Path) -> Path:
    """Where ``recipe``'s pretrained model is cached under ``root`` (``<cache>/organisms``)."""
    return root / "models" / f"{recipe.style}-{recipe.digest()}"


def _has_manifest(recipe: ModelRecipe, root: Path) -> bool:
    """Whether ``recipe``'s model has a manifest under ``root`` (``_trained`` verifies it, and retrains a corrupt
    entry, when it loads it)."""
    return (model_folder(recipe, root) / "model.json").exists()


def _trained_in_child(recipe: ModelRecipe, root: Path) -> tuple[Path, float]:
    """``_trained`` in a worker process (which builds its own tokenizer)."""
    return _trained(recipe, root, build_tokenizer())


def _train_both(spec: OrganismSpec, root: Path, tokenizer: PreTrainedTokenizerBase) -> dict[str, tuple[Path, float]]:
    """Each role's (weights file, pretraining seconds). When neither model is cached, the teacher pretrains in a
    second process while the base pretrains here: each runs at the pinned thread count of every cached
    computation, so the weights are the same as built one after the other, and the cold build takes the
    longer of the two instead of their sum."""
    base, teacher = spec.recipe("base"), spec.recipe("teacher")
    if _has_manifest(base, root) or _has_manifest(teacher, root):
        return {"base": _trained(base, root, tokenizer), "teacher": _trained(teacher, root, tokenizer)}
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        teacher_job = pool.submit(_trained_in_child, teacher, root)
        return {"base": _trained(base, root, tokenizer), "teacher": teacher_job.result()}


def _build(spec: OrganismSpec, root: Path, folder: Path, tokenizer: PreTrainedTokenizerBase) -> dict:
    t0 = time.perf_counter()
    trained = _train_both(spec, root, tokenizer)
    paths = {role: path for role, (path, _) in trained.items()}
    seconds = {role: s for role, (_, s) in trained.items()}
    tokenizer.save_pretrained(folder / "tokenizer")
    t_measure = time.perf_counter()
    with pinned_threads():  # the report is cached with the models: a function of the spec alone
        accuracy_report = {role: measure(_load_model(spec.recipe(role).size, paths[role]), tokenizer,
                                         spec.eval_problems) for role in paths}
    models = {role: str(Path("..") / p.relative_to(root)) for role, p in paths.items()}
    return {
        "spec": spec.to_dict(),
        # seconds each model took when it was trained (maybe by an earlier organism sharing its recipe);
        # "wall" is this build's own wall time, near zero when both models came from the cache
        "build_seconds": {**seconds, "measure": time.perf_counter() - t_measure,
                          "wall": time.perf_counter() - t0},
        "accuracy": accuracy_report,
        "models": models,
        "sha256": {models[role]: file_sha256(paths[role]) for role in paths},
        "torch": torch.__version__,
        "numerics": numerics_record(),
    }
