"""lm-eval on any in-memory model: local tasks rendered from ``evals/lm_eval_tasks/`` templates, and the real
out-of-domain tasks of OPSFT Table 1 passed through by name when their data is on this machine.

The model and tokenizer instances go to ``HFLM`` (never a name: it would load from a hub). Local tasks are
written at run time into a folder (data jsonl + a small YAML that ``include``s a template by absolute path,
because ``dataset_kwargs.data_files`` needs absolute paths) and registered with ``TaskManager(include_path=...)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from opsft.evals.generation import Sampling
from opsft.evals.paths import evals_root
from opsft.io import atomic_write_text

Template = Literal["math_verify", "exact_match", "multiple_choice"]
TEMPLATE_FILES: dict[str, str] = {
    "math_verify": "_organism_generate.yaml",
    "exact_match": "_organism_exact_match.yaml",
    "multiple_choice": "_organism_multiple_choice.yaml",
}
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "math_verify": ("prompt", "answer"),
    "exact_match": ("prompt", "answer"),
    "multiple_choice": ("prompt", "choices", "label"),
}
# OPSFT Table 1's out-of-domain tasks, by their lm-eval names.
REAL_OOD_TASKS: tuple[str, ...] = ("ifeval", "arc_challenge", "halueval", "hellaswag", "winogrande", "piqa")
Row = dict[str, Any]


@dataclass(frozen=True)
class LocalTask:
    """A task on in-memory rows, rendered from one of the templates in ``evals/lm_eval_tasks/``."""

    name: str
    template: Template
    rows: tuple[Row, ...]


def write_local_tasks(tasks: Sequence[LocalTask], folder: str | Path, sampling: Sampling,
                      until: Sequence[str] = ()) -> Path:
    """Write each task's rows as ``NAME.jsonl`` and its YAML as ``NAME.yaml`` into ``folder``; returns it.

    Generation tasks draw ``sampling.k`` repeats with its temperature / top-p / max_new_tokens, each stopping at
    the end-of-text token or at the first of ``until`` (none by default: the organism's sampler, whose
    completions the organism is trained and rewarded on, stops only at the end-of-text token).
    """
    folder = Path(folder).resolve()
    templates = evals_root() / "lm_eval_tasks"
    for task in tasks:
        if task.template not in TEMPLATE_FILES:
            raise ValueError(f"task {task.name!r}: unknown template {task.template!r}")
        for index, row in enumerate(task.rows):
            missing = [key for key in REQUIRED_FIELDS[task.template] if key not in row]
            if missing:
                raise ValueError(f"task {task.name!r}, row {index}: missing field(s) {', '.join(missing)}")
        data = atomic_write_text(folder / f"{task.name}.jsonl", "".join(json.dumps(r) + "\n" for r in task.rows))
        config: dict[str, Any] = {
            "task": task.name,
            "include": str(templates / TEMPLATE_FILES[task.template]),
            # A private datasets cache: never the user's ~/.cache/huggingface, whatever HF_HOME says.
            "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(folder / ".datasets_cache")},
        }
        if task.template != "multiple_choice":
            config["repeats"] = sampling.k
            config["generation_kwargs"] = generation_kwargs(sampling, until)
        atomic_write_text(folder / f"{task.name}.yaml", json.dumps(config, indent=2) + "\n")  # JSON is YAML
    return folder


def generation_kwargs(sampling: Sampling, until: Sequence[str] = ()) -> dict[str, Any]:
    """lm-eval ``generation_kwargs`` of a sampling setting (greedy when temperature is 0), stopping at ``until``
    (lm-eval adds the end-of-text token)."""
    kwargs: dict[str, Any] = {"until": list(until), "max_gen_toks": sampling.max_new_tokens}
    if sampling.temperature == 0:
        return kwargs | {"do_sample": False}
    return kwargs | {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}


def run_lm_eval(model: Any, tokenizer: Any, tasks: Sequence[str], **kwargs: Any) -> list[Row]:
    """``lm_eval.simple_evaluate`` on the given task names; one row (task, metric, value, interval, n, k) per metric.

    ``interval`` is the 95% half-width 1.96 * stderr that lm-eval reports (0 when it reports none); ``kwargs``
    are those of :func:`lm_eval_output`.
    """
    return output_rows(lm_eval_output(model, tokenizer, tasks, **kwargs))


def output_rows(out: Mapping[str, Any]) -> list[Row]:
    """Tidy rows (``results_rows``) of a dict ``lm_eval.simple_evaluate`` returned."""
    return results_rows(out["results"], out.get("n-samples", {}), out.get("configs", {}))


def logged_samples(out: Mapping[str, Any], task: str, n: int) -> list[dict[str, Any]]:
    """The logged samples (``lm_eval_output(..., log_samples=True)``) of ``task``, one a document in document
    order, each with its per-document metrics by name; a RuntimeError naming the task unless they are exactly
    documents 0 .. n - 1."""
    samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
    if [s["doc_id"] for s in samples] != list(range(n)):
        raise RuntimeError(f"lm-eval logged {len(samples)} samples for the {n} documents of {task}")
    return samples


def lm_eval_output(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[str],
    include_path: str | Path | None = None,
    batch_size: int = 64,
    max_length: int | None = None,
    add_bos_token: bool = True,
    seed: int = 0,
    log_samples: bool = False,
) -> dict[str, Any]:
    """The dict ``lm_eval.simple_evaluate`` returns for the given task names on the in-memory model; with
    ``log_samples`` its ``samples`` hold each document's responses and per-document metrics."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if max_length is None:
        max_length = int(getattr(model.config, "max_position_embeddings", 2048))
    lm = HFLM(
        pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length, device=str(model.device),
        add_bos_token=add_bos_token,
    )
    # Indexing lm-eval's built-in tasks costs ~5-10 s: skip it when only local tasks are asked for.
    manager = TaskManager(include_path=str(include_path), include_defaults=False) if include_path else TaskManager()
    return lm_eval.simple_evaluate(
        model=lm, tasks=list(tasks), task_manager=manager, log_samples=log_samples,
        bootstrap_iters=100,  # "mean" metrics use the closed-form stderr
        random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
    )


def results_rows(results: Mapping[str, Mapping], n_samples: Mapping[str, Mapping], configs: Mapping) -> list[Row]:
    """Tidy rows from lm-eval's ``results`` dict: keys ``metric,filter`` and ``metric_stderr,filter``."""
    rows = []
    for task, metrics in results.items():
        n = int(n_samples.get(task, {}).get("effective", 0))
        k = int(configs.get(task, {}).get("repeats", 1) or 1)
        for key, value in metrics.items():
            if "," not in key or "_stderr," in key or not isinstance(value, int | float):
                continue
            metric, filter_name = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filter_name}")
            interval = 1.96 * stderr if isinstance(stderr, int | float) else 0.0
            rows.append({"task": task, "metric": metric, "value": float(value), "interval": interval, "n": n, "k": k})
    return rows


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Set ``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE`` for the duration (restored after): no download is tried."""
    saved = {key: os.environ.get(key) for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    os.environ.update(dict.fromkeys(saved, "1"))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def dataset_cached(dataset_path: str) -> bool:
    """Whether a hub dataset has a local copy: in the ``datasets`` cache (``owner___name``) or the hub cache."""
    from datasets import config as ds_config
    from huggingface_hub import constants as hub_constants

    if Path(dataset_path).exists():
        return True
    datasets_dir = Path(ds_config.HF_DATASETS_CACHE) / dataset_path.replace("/", "___")
    hub_dir = Path(hub_constants.HF_HUB_CACHE) / f"datasets--{dataset_path.replace('/', '--')}"
    return datasets_dir.is_dir() or hub_dir.is_dir()


def builtin_task_configs(names: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """The YAML config (includes merged, functions unresolved) of each named built-in lm-eval task, or None.

    One text scan over lm-eval's task YAMLs for ``task: NAME`` lines: ~0.5 s, where ``TaskManager()``
    indexes every task in 5-20 s.
    """
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    patterns = {name: re.compile(rf"^task:\s*['\"]?{re.escape(name)}['\"]?\s*$", re.M) for name in names}
    found: dict[str, dict[str, Any] | None] = dict.fromkeys(names)
    for path in sorted(Path(lm_eval.tasks.__file__).parent.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8", errors="ignore")
        for name, pattern in patterns.items():
            if found[name] is None and pattern.search(text):
                found[name] = load_yaml(path, resolve_func=False)
    return found


def real_task_availability(names: Sequence[str] = REAL_OOD_TASKS) -> dict[str, str | None]:
    """For each lm-eval task name: None when it can run offline here, else the reason it is skipped."""
    status: dict[str, str | None] = {}
    for name, config in builtin_task_configs(names).items():
        dataset_path = None if config is None else config.get("dataset_path")
        if config is None:
            status[name] = f"skipped: task {name} is not in lm-eval's registry"
        elif dataset_path is None:
            status[name] = f"skipped: no local data for {name} (its config names no dataset_path)"
        elif dataset_cached(str(dataset_path)):
            status[name] = None
        else:
            status[name] = f"skipped: no local data for {name} ({dataset_path} not in the local datasets cache)"
    return status


def run_real_tasks(model: Any, tokenizer: Any, names: Sequence[str] = REAL_OOD_TASKS, **kwargs: Any) -> list[Row]:
    """Real lm-eval tasks by name, offline; each task without local data becomes one ``skipped`` row."""
    status = real_task_availability(names)
    rows: list[Row] = [
        {"task": name, "metric": reason, "value": float("nan"), "interval": float("nan"), "n": 0, "k": 0}
        for name, reason in status.items()
        if reason is not None
    ]
    runnable = [name for name, reason in status.items() if reason is None]
    if runnable:
        with hub_offline():
            rows.extend(run_lm_eval(model, tokenizer, runnable, **kwargs))
    return rows
