"""The cached run graph: ``run(config)`` trains a frozen RunConfig once per digest and returns its result.

Organisms are shared by every run cache (they live under ``$OPSFT_CACHE``). A run's folder
(``<cache>/runs/<digest>/``) holds ``config.json``, ``metrics.jsonl`` (one line a step),
``snapshots/step_NNNNNN/model.safetensors`` at the requested steps and at the end, a resumable
``checkpoint/`` while it trains, and ``result.json`` (written last, with file checksums, wall time and
provenance). Work is done under a file lock, so pytest-xdist workers asking for the same run share it;
a run killed mid-way resumes from its last checkpoint to the same final weights.

A run whose loss or gradient norm goes non-finite (``NonFiniteLossError``) is finished as *diverged*: its
``result.json`` records ``diverged_at_step`` and ``divergence`` (the message), ``metrics.jsonl`` ends with that
step's non-finite line, and its snapshots before that step and its last checkpoint are kept. Training is
deterministic, so it is never retrained: ``run`` returns the cached diverged result (``RunResult.diverged``), whose
weights from the diverged step on (the final ones included) raise ``DivergedRunError``, as does training a run
that starts from it or takes its v from it.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from opsft.checkpoints import save_state
from opsft.config import RunConfig
from opsft.constraint_config import constraint_from_config
from opsft.data.real import load_examples
from opsft.fused_layers import fuse
from opsft.io import atomic_write, atomic_write_json, file_sha256, read_verified_manifest
from opsft.objectives import make_objective
from opsft.organism import tasks
from opsft.paths import cache_root
from opsft.pretraining import Organism, build_organism
from opsft.provenance import provenance
from opsft.rewards import reward
from opsft.sampling.base import Sampler
from opsft.sampling.hf import HFSampler
from opsft.sources import Example, RolloutSource, StaticSource
from opsft.threads import pinned_threads
from opsft.train import NonFiniteLossError, make_optimizer, make_scheduler, train
from opsft.trajectories import teacher_trajectories


class DivergedRunError(RuntimeError):
    """Weights that a diverged run does not have were asked for: its final weights, a snapshot at or past the step
    where it diverged, or the parent weights of a run that starts from it or takes its v from it. ``digest`` and
    ``step`` name the diverged run and the step it diverged at."""

    def __init__(self, digest: str, step: int, message: str):
        super().__init__(message)
        self.digest, self.step = digest, step

    def __reduce__(self):
        return type(self), (self.digest, self.step, str(self))


def snapshot_name(step: int) -> str:
    """Folder name of the snapshot taken after ``step`` optimizer steps."""
    return f"step_{step:06d}"


@dataclass
class RunResult:
    """A finished run: its folder, config, per-step metrics and wall time; for a diverged run, ``diverged`` (the
    step whose loss or gradient norm was non-finite) and ``divergence`` (the message)."""

    config: RunConfig
    folder: Path
    metrics: list[dict]
    wall_time: float
    cache: Path
    diverged: int | None = None
    divergence: str = ""

    def completed(self) -> RunResult:
        """This result, when the run trained all its steps; a ``DivergedRunError`` when it diverged."""
        if self.diverged is not None:
            raise DivergedRunError(self.config.digest(), self.diverged,
                                   f"run {self.config.digest()} diverged at step {self.diverged}: {self.divergence}")
        return self

    def snapshot(self, step: int | None = None) -> Path:
        """Folder of the snapshot at ``step`` (None = the final weights); a ``DivergedRunError`` for a step at or
        past the one a diverged run diverged at."""
        step = self.config.steps if step is None else step
        if self.diverged is not None and step >= self.diverged:
            raise DivergedRunError(self.config.digest(), self.diverged,
                                   f"run {self.config.digest()} diverged at step {self.diverged} ({self.divergence}): "
                                   f"it has no weights at step {step}")
        path = self.folder / "snapshots" / snapshot_name(step)
        if not path.is_dir():
            have = sorted(p.name for p in (self.folder / "snapshots").iterdir())
            raise KeyError(f"run {self.config.digest()} has no snapshot at step {step}; it has {have}")
        return path

    def weights_sha256(self, step: int | None = None) -> str:
        """SHA-256 of the weights file of the snapshot at ``step`` (None = final): equal for two runs exactly when
        their weights are bit-identical (rules v3 count such seeds once)."""
        return file_sha256(self.snapshot(step) / "model.safetensors")

    def load_model(self, step: int | None = None) -> PreTrainedModel:
        """The model at ``step`` (None = final), in the run's precision; a ``DivergedRunError`` for weights a
        diverged run does not have (``snapshot``)."""
        model = initial_model(self.config, self.cache)
        load_weights(model, self.snapshot(step) / "model.safetensors")
        return model


def load_weights(model: torch.nn.Module, path: Path) -> None:
    """Load a safetensors state (tied embeddings stored once) into ``model`` in place."""
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad = [k for k in missing if k != "lm_head.weight"]
    if bad or unexpected:
        raise KeyError(f"{path}: missing tensors {bad[:3]}, unexpected {unexpected[:3]}")
    model.tie_weights()


def local_model_folder(init: object) -> Path | None:
    """The local Hugging Face model folder a run (or its ancestors) starts from, None for the organism."""
    while isinstance(init, RunConfig):
        init = init.init
    if init in ("base", "teacher"):
        return None
    folder = Path(str(init))
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"RunConfig.init {init!r} is neither 'base'/'teacher', a RunConfig, nor a local "
                                f"model folder with a config.json")
    return folder


def run_tokenizer(config: RunConfig) -> PreTrainedTokenizerBase:
    """The organism's tokenizer, or the one saved in the run's local model folder."""
    folder = local_model_folder(config.init)
    if folder is None:
        return build_organism(config.organism).tokenizer
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, padding_side="left")


def load_folder_model(folder: str | Path) -> PreTrainedModel:
    """A local Hugging Face model folder's model (never a hub name), its layers fused as the organism's
    (``opsft.fused_layers``)."""
    return fuse(AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True))


def base_model(config: RunConfig) -> PreTrainedModel:
    """The model a run's lineage starts from, as stored (the organism's base or teacher, or the local model folder
    of its first run): the "base" row every claim scores beside its arms."""
    folder = local_model_folder(config.init)
    if folder is not None:
        return load_folder_model(folder)
    org = build_organism(config.organism)
    return org.base if config.root_init() == "base" else org.teacher


def initial_model(config: RunConfig, cache: Path | None = None) -> PreTrainedModel:
    """The weights a run starts from: the organism's base/teacher, another run's final weights, or a local
    Hugging Face model folder (never a hub name, its layers fused as the organism's: ``opsft.fused_layers``);
    cast to the run's precision."""
    init = config.init
    if isinstance(init, RunConfig):
        model = run(init, cache).load_model()
    elif init in ("base", "teacher"):
        org = build_organism(config.organism)
        model = copy.deepcopy(org.base if init == "base" else org.teacher)
    else:
        model = load_folder_model(local_model_folder(init))
    dtype = torch.bfloat16 if config.precision == "bf16" else torch.float32
    return model.to(dtype)


def _examples(config: RunConfig, org: Organism | None) -> list[Example]:
    src = config.source
    if src.dataset_path is not None:
        examples = load_examples(src.dataset_path, limit=src.n_problems)
        if src.kind == "static" and not all(e.completion for e in examples):
            raise ValueError(f"SourceConfig.dataset_path {src.dataset_path}: static (SFT) data needs a trajectory "
                             "in every row (DeepMath's r1_solution_1)")
        return examples
    if org is None:
        raise ValueError("a run from a local model folder needs SourceConfig.dataset_path (no organism tasks)")
    if src.kind == "static" and src.trajectory_source == "teacher":
        return teacher_trajectories(org, src.family, src.n_problems)
    problems = tasks.generate(src.family, "train", src.n_problems, 0, style="teacher")
    return [Example(p.prompt, p.solution if src.kind == "static" else "", p) for p in problems]


def make_source(config: RunConfig, model: torch.nn.Module, org: Organism | None,
                tokenizer: PreTrainedTokenizerBase) -> StaticSource | RolloutSource:
    """The batch source a config asks for: teacher trajectories (static) or on-policy rollouts."""
    src, obj = config.source, config.objective
    examples = _examples(config, org)
    if src.kind == "static":
        return StaticSource(examples, tokenizer, src.batch_size, config.seed)
    dtype = next(model.parameters()).dtype
    teacher = opd_teacher(config, org).to(dtype) if obj.name == "opd" else None
    reference = copy.deepcopy(model).eval() if obj.beta_kl > 0 else None
    return RolloutSource(examples, rollout_sampler(config, tokenizer), reward, prompts_per_step=src.prompts_per_step,
                         group_size=src.group_size, temperature=src.temperature, max_new_tokens=src.max_new_tokens,
                         seed=config.seed, objective=obj, teacher=teacher, reference=reference)


def rollout_sampler(config: RunConfig, tokenizer: PreTrainedTokenizerBase) -> Sampler:
    """What samples a run's rollouts: HF ``generate``, or with ``config.rollout_engine`` a colocated vLLM engine
    built from the run's model folder and fed the policy's weights before every call."""
    if config.rollout_engine is None:
        return HFSampler(tokenizer)
    folder = local_model_folder(config.init)
    if folder is None:
        raise ValueError(f"run {config.digest()}: RunConfig.rollout_engine needs a run from a local model folder")
    from opsft.sampling.vllm import VLLMSampler

    return VLLMSampler.from_folder(folder, tokenizer, config.rollout_engine)


def opd_teacher(config: RunConfig, org: Organism | None) -> PreTrainedModel:
    """The teacher an OPD run distils: the organism's, or the local model folder ``config.teacher``."""
    if org is not None:
        return org.teacher
    if config.teacher is None:
        raise ValueError(f"run {config.digest()}: OPD from a local model folder needs RunConfig.teacher (a local "
                         "teacher model folder; a recipe's top-level 'teacher')")
    folder = Path(config.teacher)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"RunConfig.teacher {config.teacher!r} is not a local model folder with a config.json")
    return load_folder_model(folder).eval()


class RunRecorder:
    """Callback: appends step metrics, saves snapshots at the requested steps and resumable checkpoints."""

    def __init__(self, folder: Path, config: RunConfig, scheduler, wall_offset: float):
        self.folder, self.config, self.scheduler = folder, config, scheduler
        self.t0 = time.perf_counter() - wall_offset
        self.metrics_path = folder / "metrics.jsonl"

    def wall(self) -> float:
        """Seconds of training so far, across resumptions."""
        return time.perf_counter() - self.t0

    def append(self, metrics: dict) -> None:
        """Append one step's metrics to ``metrics.jsonl``."""
        with open(self.metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")

    def on_step_end(self, step: int, model, optimizer, metrics: dict) -> None:
        """Record the step; snapshot and checkpoint when due."""
        self.append(metrics)
        if step in self.config.snapshot_steps or step == self.config.steps:
            save_snapshot(self.folder, model, step)
        if step % self.config.checkpoint_every == 0 and step < self.config.steps:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": self.scheduler.state_dict(), "step": step, "wall": self.wall()}
            atomic_write(self.folder / "checkpoint" / "state.pt", lambda p: torch.save(state, p))


def save_snapshot(folder: Path, model: torch.nn.Module, step: int) -> Path:
    """Write the model's weights as ``snapshots/step_NNNNNN/model.safetensors`` (atomically)."""
    return save_state(model, folder / "snapshots" / snapshot_name(step) / "model.safetensors")


def _execute(config: RunConfig, folder: Path, cache: Path, progress: bool) -> dict:
    org = None if local_model_folder(config.init) else build_organism(config.organism)
    model = initial_model(config, cache)
    optimizer = make_optimizer(model, config.optim)
    scheduler = make_scheduler(optimizer, config.optim, config.steps)
    handle = attach_constraint(config, model, optimizer, cache)
    source = make_source(config, model, org, run_tokenizer(config))
    start, wall_offset = 0, 0.0
    ckpt = folder / "checkpoint" / "state.pt"
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start, wall_offset = state["step"], state["wall"]
        print(f"run {config.digest()}: resuming from step {start}")
    _truncate_metrics(folder / "metrics.jsonl", start)
    if start == 0:
        save_snapshot(folder, model, 0)
    recorder = RunRecorder(folder, config, scheduler, wall_offset)
    try:
        train(model, optimizer, source, make_objective(config.objective), steps=config.steps, start_step=start,
              scheduler=scheduler, grad_clip=config.optim.grad_clip, callbacks=[recorder], progress=progress,
              desc=f"{config.objective.name} {config.digest()}")
    except NonFiniteLossError as err:
        recorder.append(err.metrics)
        return {"wall_time": recorder.wall(), "diverged_at_step": err.step, "divergence": str(err)}
    finally:
        if handle is not None:
            handle.remove()
    return {"wall_time": recorder.wall()}


def attach_constraint(config: RunConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, cache: Path):
    """Hook the config's constraint onto the optimizer (None for ``mode="none"``); a ``DivergedRunError`` when the
    run that supplies v diverged."""
    if config.constraint.mode == "none":
        return None
    source = run(config.constraint.direction_run, cache).completed()
    return constraint_from_config(config.constraint, model, optimizer, source)


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (written after the checkpoint a resumed run restarts from)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= step]
    atomic_write(path, lambda p: p.write_text("".join(ln + "\n" for ln in lines)))


def run(config: RunConfig, cache: Path | None = None, progress: bool = False) -> RunResult:
    """The result of ``config``: read from the cache when present and verified, else trained (resuming a
    partial run), under a file lock keyed by the config digest. A run that diverges is cached as diverged (its
    result's ``diverged`` step) and returned; a run whose parent diverged raises ``DivergedRunError`` and caches
    nothing."""
    cache = cache or cache_root()
    folder = cache / "runs" / config.digest()
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        result = read_verified_manifest(folder / "result.json", "run cache")
        if result is None:
            atomic_write_json(folder / "config.json", config.to_dict())
            with pinned_threads():
                info = _execute(config, folder, cache, progress)
            files = sorted(p.relative_to(folder).as_posix() for p in (folder / "snapshots").rglob("*.safetensors"))
            result = {**info, "digest": config.digest(), "provenance": provenance(),
                      "sha256": {f: file_sha256(folder / f) for f in files}}
            atomic_write_json(folder / "result.json", result)
            if "diverged_at_step" in info:
                print(f"run {config.digest()}: diverged at step {info['diverged_at_step']} ({info['divergence']}); "
                      "cached as diverged, with the snapshots and the checkpoint taken before that step")
            else:
                (folder / "checkpoint" / "state.pt").unlink(missing_ok=True)
    metrics = [json.loads(ln) for ln in (folder / "metrics.jsonl").read_text().splitlines() if ln]
    return RunResult(config, folder, metrics, result["wall_time"], cache, result.get("diverged_at_step"),
                     result.get("divergence", ""))


def diverged_step(digest: str, cache: Path | None = None) -> int | None:
    """The step at which the finished run ``digest`` in ``cache`` diverged, read from its ``result.json`` without
    verifying its files; None when it trained all its steps or has no result."""
    path = (cache or cache_root()) / "runs" / digest / "result.json"
    return json.loads(path.read_text()).get("diverged_at_step") if path.is_file() else None


def finished_fingerprints(cache: Path) -> dict[str, tuple[dict, list[dict]]]:
    """Per finished run in ``cache`` (digest): its weight files' SHA-256 (from its result manifest) and its
    metrics less the timings (``t_*``): what two caches that trained the same runs must agree on bit for bit."""
    found = {}
    for result in (cache / "runs").glob("*/result.json"):
        metrics = [json.loads(ln) for ln in (result.parent / "metrics.jsonl").read_text().splitlines() if ln]
        untimed = [{k: v for k, v in m.items() if not k.startswith("t_")} for m in metrics]
        found[result.parent.name] = (json.loads(result.read_text())["sha256"], untimed)
    return found
