"""Paper-scale recipes (``--scale paper``): the papers' settings as TOML files under ``recipes/``, loaded into
the project's frozen RunConfigs, and checked against the local disk before any GPU time is spent.

A recipe names local folders only (``${OPSFT_MODELS}`` / ``${OPSFT_DATA}`` or any environment variable in its
strings); nothing is downloaded (recipes/README.md says how to fetch models and data beforehand). Layout::

    name = "..."                 # also: description, paper, extends = "other.toml" (deep-merged under this file)
    teacher = "<folder>"         # trajectory writer and/or OPD teacher
    [sampler]                    # backend = "vllm" | "hf", top_p; [sampler.engine]: opsft.config.EngineSettings
    [trajectories]               # the teacher-trajectories step: dataset_path, output, n_problems, [trajectories.params]
    [eval]                       # benchmarks, k, temperature, top_p, max_new_tokens
    [defaults]                   # RunConfig fields every run starts from (objective/source/optim/constraint tables)
    [runs.NAME]                  # RunConfig fields; like = "OTHER" starts from run OTHER's table;
                                 # init / constraint.direction_run = "runs.OTHER" refer to another run

``validate(recipe, world_size)`` reports every missing folder or file, unsupported architecture (read from
``config.json`` without loading weights), unreadable dataset row and world size that does not split a batch,
each naming the recipe key and the path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from opsft.config import (
    ConstraintConfig,
    EngineSettings,
    ObjectiveConfig,
    OptimConfig,
    RunConfig,
    SourceConfig,
)
from opsft.data.real import row_to_example
from opsft.evals.benchmarks import MATH_BENCHMARKS, MathProtocol
from opsft.evals.paper import CODE_BENCHMARKS
from opsft.trajectories import TrajectoryParams

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
ROOT_VARIABLES = {"models": "OPSFT_MODELS", "data": "OPSFT_DATA"}
RUN_REFERENCE = "runs."
# Architectures the trainer (HF model + our loop, direction extraction, vLLM weight sync) is built and tested
# for: the papers' students (Qwen3 dense; DeepSeek-R1-Distill-Llama / -Qwen). Teachers that are only sampled or
# scored may be any causal LM transformers builds without remote code (e.g. Qwen3-30B-A3B's Qwen3MoeForCausalLM).
TRAINABLE_ARCHITECTURES: tuple[str, ...] = ("Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM")
TOP_LEVEL_KEYS = {"name", "description", "paper", "extends", "teacher", "sampler", "trajectories", "eval",
                  "defaults", "runs"}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class RecipeError(ValueError):
    """A recipe that cannot be loaded or run: the message names the file, the key and the path at fault."""


@dataclass(frozen=True)
class SamplerSettings:
    """Which backend samples rollouts, and how (``top_p`` for every sampled step; the engine for vLLM)."""

    backend: Literal["hf", "vllm"] = "vllm"
    top_p: float = 1.0
    engine: EngineSettings = field(default_factory=EngineSettings)

    def __post_init__(self) -> None:
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"backend must be hf|vllm, got {self.backend!r}")


@dataclass(frozen=True)
class TrajectorySettings:
    """The teacher-trajectories step: prompts from ``dataset_path`` (first ``n_problems`` rows), verified
    completions written to ``output``."""

    dataset_path: str
    output: str
    n_problems: int | None = None
    params: TrajectoryParams = field(default_factory=TrajectoryParams)


@dataclass(frozen=True)
class EvalSettings:
    """The math benchmarks and their sampling protocol (avg@k), the code benchmarks scored the same way
    (``opsft.evals.paper``), how many problems of each (``limit``; None: all) and of the training set
    (``train_problems``, greedy) the claims score."""

    benchmarks: tuple[str, ...] = MATH_BENCHMARKS
    k: int = 8
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 32768
    code: tuple[str, ...] = ()
    limit: int | None = None
    train_problems: int = 0

    def __post_init__(self) -> None:
        unknown = [b for b in self.benchmarks if b not in MATH_BENCHMARKS]
        if unknown:
            raise ValueError(f"unknown benchmarks {unknown}; known: {', '.join(MATH_BENCHMARKS)}")
        unknown = [b for b in self.code if b not in CODE_BENCHMARKS]
        if unknown:
            raise ValueError(f"unknown code benchmarks {unknown}; known: {', '.join(CODE_BENCHMARKS)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 (or unset: every problem), got {self.limit}")

    def protocol(self) -> MathProtocol:
        """The evaluators' sampling protocol with these settings."""
        return MathProtocol(k=self.k, temperature=self.temperature, top_p=self.top_p)


@dataclass(frozen=True)
class Recipe:
    """A loaded recipe: its runs in file order (RunConfigs, references resolved) and the settings around them."""

    name: str
    path: Path
    runs: dict[str, RunConfig]
    sampler: SamplerSettings
    eval: EvalSettings
    teacher: str | None = None
    trajectories: TrajectorySettings | None = None
    description: str = ""
    paper: str = ""

    def run_name(self, config: RunConfig) -> str:
        """The recipe's name for one of its runs (``runs.NAME``)."""
        for name, cfg in self.runs.items():
            if cfg is config:
                return f"{RUN_REFERENCE}{name}"
        return f"<run {config.digest()}>"


# --- loading ---------------------------------------------------------------------------------------------


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file: a path as given, else ``recipes/NAME.toml`` of this checkout."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    named = RECIPES_DIR / f"{name_or_path}.toml"
    if named.is_file():
        return named
    known = sorted(p.stem for p in RECIPES_DIR.glob("*.toml") if not p.stem.startswith("_"))
    raise FileNotFoundError(f"recipe {name_or_path!r}: no such file, and not a name under {RECIPES_DIR} "
                            f"(known: {', '.join(known)})")


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: tables merge key by key, any other value replaces."""
    out = dict(base)
    for key, value in over.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_raw(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The recipe's TOML with its ``extends`` chain merged in (the extending file wins)."""
    path = path.resolve()
    if path in chain:
        raise RecipeError(f"{chain[0]}: 'extends' loops through {' -> '.join(p.name for p in (*chain, path))}")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise RecipeError(f"{path}: not valid TOML ({err})") from err
    unknown = sorted(set(raw) - TOP_LEVEL_KEYS)
    if unknown:
        raise RecipeError(f"{path}: unknown top-level key {unknown[0]!r}; known: {', '.join(sorted(TOP_LEVEL_KEYS))}")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    parent_path = path.parent / parent
    if not parent_path.is_file():
        raise RecipeError(f"{path}: extends = {parent!r}, but {parent_path} does not exist")
    return deep_merge(read_raw(parent_path, (*chain, path)), raw)


def expand(value: Any, env: Mapping[str, str], where: str, key: str = "") -> Any:
    """Every ``${VAR}`` in the strings of ``value`` replaced from ``env``; an unset variable is an error naming
    the key that uses it."""
    if isinstance(value, dict):
        return {k: expand(v, env, where, f"{key}.{k}" if key else k) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, env, where, f"{key}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def lookup(match: re.Match) -> str:
        var = match.group(1)
        if var not in env:
            roots = {v: k for k, v in ROOT_VARIABLES.items()}
            flag = f", or pass --{roots[var]} DIR to an opsft recipe command" if var in roots else ""
            raise RecipeError(f"{where}: {key} = {value!r} uses ${{{var}}}, which is not set (export {var}=...{flag})")
        return env[var]

    return _VARIABLE.sub(lookup, value)


def build_dataclass(cls: type, table: Any, key: str, where: str, **fixed: Any) -> Any:
    """``cls(**table)`` with lists as tuples; an unknown key or a value the class refuses is an error naming
    ``key``. ``fixed`` holds fields already converted by the caller (nested dataclasses, run references)."""
    if not isinstance(table, dict):
        raise RecipeError(f"{where}: {key} must be a table, got {table!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise RecipeError(f"{where}: {key}.{unknown[0]} is not a setting of {cls.__name__}; "
                          f"known: {', '.join(sorted(names))}")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
    try:
        return cls(**{**kwargs, **fixed})
    except (TypeError, ValueError) as err:
        raise RecipeError(f"{where}: {key}: {err}") from err


class _RunBuilder:
    """Turns the ``[runs.*]`` tables into RunConfigs: ``like`` chains merged, ``runs.NAME`` references resolved
    (each run built once, so runs that share a parent share the same RunConfig value). An OPD run distils the
    recipe's ``teacher`` unless its table names its own; with a vLLM ``engine`` (``[sampler] backend = "vllm"``),
    every rollout run samples through it."""

    def __init__(self, defaults: dict, runs: dict, where: str, teacher: str | None, engine: EngineSettings | None):
        self.defaults, self.runs, self.where, self.teacher, self.engine = defaults, runs, where, teacher, engine
        self.built: dict[str, RunConfig] = {}

    def table(self, name: str, chain: tuple[str, ...] = ()) -> dict:
        """Run ``name``'s table laid over its ``like`` run's table (or over ``[defaults]``)."""
        if name in chain:
            raise RecipeError(f"{self.where}: runs.{name}.like loops through {' -> '.join((*chain, name))}")
        own = dict(self.runs[name])
        like = own.pop("like", None)
        if like is None:
            return deep_merge(self.defaults, own)
        if like not in self.runs:
            raise RecipeError(f"{self.where}: runs.{name}.like = {like!r} names no run; runs: {', '.join(self.runs)}")
        return deep_merge(self.table(like, (*chain, name)), own)

    def reference(self, value: Any, key: str, chain: tuple[str, ...]) -> Any:
        """A ``runs.NAME`` string as that run's RunConfig; any other value unchanged."""
        if not (isinstance(value, str) and value.startswith(RUN_REFERENCE)):
            return value
        name = value[len(RUN_REFERENCE):]
        if name not in self.runs:
            raise RecipeError(f"{self.where}: {key} = {value!r} names no run; runs: {', '.join(self.runs)}")
        return self.build(name, chain)

    def build(self, name: str, chain: tuple[str, ...] = ()) -> RunConfig:
        """The RunConfig of run ``name``."""
        if name in self.built:
            return self.built[name]
        if name in chain:
            raise RecipeError(f"{self.where}: runs.{name} depends on itself through {' -> '.join((*chain, name))}")
        key, chain = f"runs.{name}", (*chain, name)
        table = self.table(name)
        if "init" not in table:
            raise RecipeError(f"{self.where}: {key}.init is not set (a local model folder or runs.OTHER)")
        constraint = table.get("constraint", {})
        sub = {
            "objective": build_dataclass(ObjectiveConfig, table.get("objective", {}), f"{key}.objective", self.where),
            "source": build_dataclass(SourceConfig, table.get("source", {}), f"{key}.source", self.where),
            "optim": build_dataclass(OptimConfig, table.get("optim", {}), f"{key}.optim", self.where),
            "constraint": build_dataclass(
                ConstraintConfig, constraint, f"{key}.constraint", self.where,
                direction_run=self.reference(constraint.get("direction_run"), f"{key}.constraint.direction_run", chain)),
            "init": self.reference(table["init"], f"{key}.init", chain),
        }
        if sub["objective"].name == "opd":
            sub["teacher"] = table.get("teacher", self.teacher)
        if sub["source"].kind == "rollout" and self.engine is not None:
            sub["rollout_engine"] = self.engine
        self.built[name] = build_dataclass(RunConfig, table, key, self.where, **sub)
        return self.built[name]


def load_recipe(name_or_path: str | Path, env: Mapping[str, str] | None = None) -> Recipe:
    """The recipe at a path (or ``recipes/NAME.toml``), variables taken from ``env`` (default: the process
    environment). Raises RecipeError naming the key at fault; checks nothing on disk (see ``validate``)."""
    path = recipe_path(name_or_path)
    where = str(path)
    raw = expand(read_raw(path), os.environ if env is None else env, where)
    runs = raw.get("runs", {})
    if not runs:
        raise RecipeError(f"{where}: no [runs.NAME] tables")
    sampler_table = dict(raw.get("sampler", {}))
    engine = build_dataclass(EngineSettings, sampler_table.pop("engine", {}), "sampler.engine", where)
    sampler = build_dataclass(SamplerSettings, sampler_table, "sampler", where, engine=engine)
    builder = _RunBuilder(raw.get("defaults", {}), runs, where, raw.get("teacher"),
                          engine if sampler.backend == "vllm" else None)
    trajectories = None
    if "trajectories" in raw:
        table = dict(raw["trajectories"])
        params = build_dataclass(TrajectoryParams, table.pop("params", {}), "trajectories.params", where)
        trajectories = build_dataclass(TrajectorySettings, table, "trajectories", where, params=params)
    if "name" not in raw:
        raise RecipeError(f"{where}: 'name' is not set")
    return Recipe(
        name=raw["name"], path=path, runs={name: builder.build(name) for name in runs},
        sampler=sampler,
        eval=build_dataclass(EvalSettings, raw.get("eval", {}), "eval", where),
        teacher=raw.get("teacher"), trajectories=trajectories,
        description=raw.get("description", ""), paper=raw.get("paper", ""),
    )


# --- validation ------------------------------------------------------------------------------------------


def _causal_lm_types() -> Mapping[str, str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def read_model_config(folder: str | Path) -> dict:
    """A model folder's ``config.json`` (no weights are read)."""
    return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))


def model_folder_problems(folder: str, key: str, *, trainable: bool) -> list[str]:
    """What keeps ``folder`` from serving as a model: missing folder, config, weights (every shard the index
    names) or tokenizer; a model type transformers cannot build; for a trained model, an architecture outside
    TRAINABLE_ARCHITECTURES."""
    at = f"{key} = {folder!r}"
    path = Path(folder)
    if not path.is_dir():
        return [f"{at}: no such folder (fetch the model beforehand: recipes/README.md)"]
    try:
        config = read_model_config(path)
    except FileNotFoundError:
        return [f"{at}: no config.json (not a Hugging Face model folder)"]
    except json.JSONDecodeError as err:
        return [f"{at}: config.json is not valid JSON ({err})"]
    problems = []
    model_type, architecture = config.get("model_type"), (config.get("architectures") or [None])[0]
    if model_type not in _causal_lm_types():
        problems.append(f"{at}: model_type {model_type!r} is not a causal LM this transformers builds "
                        "without remote code")
    elif trainable and architecture not in TRAINABLE_ARCHITECTURES:
        problems.append(f"{at}: architecture {architecture!r} is not one the trainer supports "
                        f"({', '.join(TRAINABLE_ARCHITECTURES)})")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            problems.append(f"{at}: {len(missing)} of {len(shards)} weight shards are missing (first: {missing[0]})")
    elif not any(path.glob("*.safetensors")):
        problems.append(f"{at}: no *.safetensors weights")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        problems.append(f"{at}: no tokenizer (tokenizer.json / tokenizer_config.json)")
    return problems


def first_row(path: Path) -> dict:
    """The first row of a local ``.jsonl`` / ``.parquet`` file, read without loading the rest."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        batch = next(pq.ParquetFile(path).iter_batches(batch_size=1), None)
        rows = batch.to_pylist() if batch is not None else []
    else:
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()][:1]
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows[0]


def dataset_problems(dataset: str, key: str, *, needs_trajectory: bool, hint: str = "") -> list[str]:
    """What keeps a dataset file from feeding a run: absent, unreadable, an unknown schema in its first row, or
    (static data) no trajectory there."""
    at = f"{key} = {dataset!r}"
    path = Path(dataset)
    if not path.is_file():
        return [f"{at}: no such file{hint or ' (fetch the data beforehand: recipes/README.md)'}"]
    try:
        example = row_to_example(first_row(path), f"{path}: row 1")
    except (ValueError, KeyError, OSError) as err:
        return [f"{key}: {err}"]
    if needs_trajectory and not example.completion:
        return [f"{at}: static (SFT) data needs a trajectory in every row; row 1 has none"]
    return []


def world_size_problems(source: SourceConfig, key: str, world_size: int) -> list[str]:
    """A world size that does not split the step's batch evenly (whole GRPO groups per rank)."""
    from opsft.distributed.world import rows_per_rank

    try:
        rows_per_rank(source, world_size)
    except ValueError as err:
        return [f"{key}.source: {err}"]
    return []


def _local_folder(init: Any) -> str | None:
    """The local model folder a run starts from, following ``runs.OTHER`` parents."""
    while isinstance(init, RunConfig):
        init = init.init
    return init if isinstance(init, str) else None


def run_problems(recipe: Recipe, name: str, config: RunConfig, world_size: int) -> list[str]:
    """Everything in one run that would fail after the GPUs were taken."""
    key, src = f"runs.{name}", config.source
    problems = []
    if isinstance(config.init, str):
        problems += model_folder_problems(config.init, f"{key}.init", trainable=True)
    if src.dataset_path is None:
        problems.append(f"{key}.source.dataset_path is not set (a real-model run reads a local dataset file)")
    else:
        made_here = recipe.trajectories is not None and src.dataset_path == recipe.trajectories.output
        hint = f" (write it first: opsft recipe trajectories {recipe.path})" if made_here else ""
        problems += dataset_problems(src.dataset_path, f"{key}.source.dataset_path",
                                     needs_trajectory=src.kind == "static", hint=hint)
    problems += world_size_problems(src, key, world_size)
    constraint = config.constraint
    if constraint.mode != "none" and constraint.direction_step is not None:
        source = constraint.direction_run
        saved = sorted({*source.snapshot_steps, source.steps})
        if constraint.direction_step not in saved:
            problems.append(f"{key}.constraint.direction_step = {constraint.direction_step}: "
                            f"{recipe.run_name(source)} saves snapshots only at steps {saved}")
    if config.objective.name == "opd":
        problems += opd_teacher_problems(config.teacher, key, _local_folder(config.init))
    return problems


def opd_teacher_problems(teacher: str | None, key: str, student: str | None) -> list[str]:
    """An OPD run needs a teacher (the recipe's, or the run's own ``teacher``) with the student's vocabulary
    (token log-probabilities are compared position by position)."""
    if teacher is None:
        return [f"{key}.objective.name = 'opd' needs the recipe's 'teacher' (a local model folder)"]
    problems = model_folder_problems(teacher, "teacher", trainable=False)
    if problems or student is None or not (Path(student) / "config.json").is_file():
        return problems
    vocab = {who: read_model_config(folder).get("vocab_size") for who, folder in (("teacher", teacher),
                                                                                  ("student", student))}
    if vocab["teacher"] != vocab["student"]:
        return [f"teacher = {teacher!r}: vocab_size {vocab['teacher']} differs from the student's "
                f"{vocab['student']} ({student}); OPD compares log-probabilities token by token"]
    return []


def trajectory_problems(recipe: Recipe) -> list[str]:
    """The trajectories step needs the teacher folder and its prompt file."""
    settings = recipe.trajectories
    if settings is None:
        return []
    if recipe.teacher is None:
        return ["[trajectories] needs the recipe's 'teacher' (a local model folder that writes them)"]
    return (model_folder_problems(recipe.teacher, "teacher", trainable=False)
            + dataset_problems(settings.dataset_path, "trajectories.dataset_path", needs_trajectory=False))


def eval_problems(recipe: Recipe) -> list[str]:
    """Each benchmark's data file must be in the checkout (evals/data/)."""
    from opsft.evals.paths import data_file

    problems = []
    for name in recipe.eval.benchmarks:
        try:
            data_file(f"{name}.jsonl")
        except FileNotFoundError as err:
            problems.append(f"eval.benchmarks: {err}")
    return problems


def validate(recipe: Recipe, world_size: int = 1, *, runs: tuple[str, ...] | None = None,
             trajectories: bool = True) -> None:
    """Raise one RecipeError listing every problem of the recipe on this machine (for ``world_size`` processes),
    each naming its key and path; reads configs and first dataset rows, never weights. ``runs`` limits the check
    to those runs; ``trajectories=False`` skips the trajectories step's inputs."""
    if world_size < 1:
        raise RecipeError(f"world size must be >= 1, got {world_size}")
    names = runs or tuple(recipe.runs)
    unknown = [n for n in names if n not in recipe.runs]
    if unknown:
        raise RecipeError(f"{recipe.path}: no run {unknown[0]!r}; runs: {', '.join(recipe.runs)}")
    problems = [p for n in names for p in run_problems(recipe, n, recipe.runs[n], world_size)]
    problems += (trajectory_problems(recipe) if trajectories else []) + eval_problems(recipe)
    unique = list(dict.fromkeys(problems))
    if unique:
        raise RecipeError(f"recipe {recipe.name} ({recipe.path}) cannot run on {world_size} process(es):\n"
                          + "\n".join(f"  - {p}" for p in unique))


# --- command line ----------------------------------------------------------------------------------------


def describe(recipe: Recipe) -> str:
    """A markdown summary: one line per run (digest, objective, steps, lr, batch, start, constraint)."""
    lines = [f"# {recipe.name} ({recipe.path})", ""]
    lines += [text for text in (recipe.paper, recipe.description) if text]
    lines += ["", f"sampler: {recipe.sampler.backend} (top_p {recipe.sampler.top_p}); teacher: {recipe.teacher}; "
              f"eval: {', '.join(recipe.eval.benchmarks)} avg@{recipe.eval.k}", "",
              "| run | digest | objective | steps | lr | batch | precision | init | constraint |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, cfg in recipe.runs.items():
        src, con = cfg.source, cfg.constraint
        batch = str(src.batch_size) if src.kind == "static" else f"{src.prompts_per_step} x {src.group_size}"
        init = recipe.run_name(cfg.init) if isinstance(cfg.init, RunConfig) else cfg.init
        constraint = "none" if con.mode == "none" else (
            f"{con.mode}, v of {recipe.run_name(con.direction_run)} at step {'final' if con.direction_step is None else con.direction_step} ({con.rule})")
        lines.append(f"| {name} | {cfg.digest()} | {cfg.objective.name} | {cfg.steps} | {cfg.optim.lr:g} "
                     f"({cfg.optim.schedule}) | {batch} | {cfg.precision} | {init} | {constraint} |")
    if recipe.trajectories is not None:
        t = recipe.trajectories
        lines += ["", f"trajectories: {t.params.k} samples/prompt of {t.dataset_path} "
                  f"(first {t.n_problems or 'all'} rows) -> {t.output}"]
    return "\n".join(lines)


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    for flag, var in ROOT_VARIABLES.items():
        if getattr(args, flag):
            env[var] = str(Path(getattr(args, flag)).resolve())
    return env


def _cmd_show(args: argparse.Namespace) -> None:
    recipe = load_recipe(args.recipe, _env(args))
    if args.json:
        print(json.dumps({name: cfg.to_dict() for name, cfg in recipe.runs.items()}, indent=2, sort_keys=True))
    else:
        print(describe(recipe))


def _cmd_validate(args: argparse.Namespace) -> None:
    recipe = load_recipe(args.recipe, _env(args))
    validate(recipe, args.world_size, runs=tuple(args.run) if args.run else None)
    print(f"recipe {recipe.name}: {len(args.run or recipe.runs)} run(s) ready for {args.world_size} process(es)")


def _cmd_trajectories(args: argparse.Namespace) -> None:
    from opsft.trajectories import trajectories_from_folder

    recipe = load_recipe(args.recipe, _env(args))
    settings = recipe.trajectories
    if settings is None:
        raise RecipeError(f"{recipe.path}: no [trajectories] table")
    problems = trajectory_problems(recipe)
    if problems:
        raise RecipeError("\n".join(problems))
    done = trajectories_from_folder(recipe.teacher, settings.dataset_path, settings.output, settings.params,
                                    backend=args.backend or recipe.sampler.backend, n_problems=settings.n_problems,
                                    engine=recipe.sampler.engine)
    print(f"{'reused' if done.reused else 'wrote'} {done.path}: {json.dumps(done.provenance['counts'])}")


def _reporting_errors(command: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], int]:
    """A subcommand that prints a recipe's problems (exit status 1) instead of a traceback."""
    def run(args: argparse.Namespace) -> int:
        try:
            command(args)
        except (RecipeError, FileNotFoundError) as err:
            print(f"error: {err}")
            return 1
        return 0

    return run
