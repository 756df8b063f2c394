"""Streaming access to weights: a model, a state dict, or a local checkpoint folder of (sharded) safetensors.

Readers yield ``(name, tensor)`` one tensor at a time so that two 8B checkpoints can be compared while
holding about one tensor from each side. Tied parameters appear once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from opsft.io import atomic_write

WeightSource = torch.nn.Module | Mapping[str, torch.Tensor] | str | Path


def open_safetensors(path: Path) -> safe_open:
    """``safe_open(path)`` for torch tensors; a file that safetensors cannot read (truncated, not safetensors)
    raises a ValueError naming ``path``, with the library's error as its ``__cause__``."""
    try:
        return safe_open(str(path), framework="pt")
    except SafetensorError as err:
        raise ValueError(f"cannot read safetensors file {path}: {err}") from err


def _folder_files(folder: Path) -> dict[str, Path]:
    """Map tensor name -> safetensors file inside a checkpoint folder (index-aware)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: folder / fname for name, fname in weight_map.items()}
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else [folder]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"no safetensors weights found at {folder}")
    out: dict[str, Path] = {}
    for f in files:
        with open_safetensors(f) as fh:
            for name in fh.keys():
                out[name] = f
    return out


def tensor_names(source: WeightSource) -> list[str]:
    """Names of the distinct tensors in a weight source, in a stable order (tied duplicates dropped)."""
    if isinstance(source, (str, Path)):
        return sorted(_folder_files(Path(source)))
    return [name for name, _ in iter_tensors(source)]


def iter_tensors(source: WeightSource, names: list[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` pairs, one at a time; from a folder each tensor is read only when reached."""
    if isinstance(source, (str, Path)):
        files = _folder_files(Path(source))
        wanted = names if names is not None else sorted(files)
        for name in wanted:
            if name not in files:
                raise KeyError(f"tensor {name!r} missing from checkpoint {source}")
            with open_safetensors(files[name]) as fh:
                yield name, fh.get_tensor(name)
        return
    if isinstance(source, torch.nn.Module):
        items = source.named_parameters()  # named_parameters() already drops tied duplicates
    else:
        items = _dedup_state(source)
    table = dict(items)
    for name in names if names is not None else list(table):
        if name not in table:
            raise KeyError(f"tensor {name!r} missing from the given weights")
        yield name, table[name].detach()


def _dedup_state(state: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    seen: set[int] = set()
    out = []
    for name, t in state.items():
        key = t.data_ptr() if t.numel() else id(t)
        if key in seen:
            continue
        seen.add(key)
        out.append((name, t))
    return out


def load_state(source: WeightSource) -> dict[str, torch.Tensor]:
    """All distinct tensors of a source in memory (for organism-sized models only)."""
    return {name: t.clone() for name, t in iter_tensors(source)}


def save_state(model_or_state: torch.nn.Module | Mapping[str, torch.Tensor], path: str | Path) -> Path:
    """Write the distinct parameters to one safetensors file, atomically."""
    state = {n: t.detach().contiguous().cpu() for n, t in iter_tensors(model_or_state)}
    return atomic_write(path, lambda p: save_file(state, str(p)))


def save_sharded(model, folder: Path, shards: int, tokenizer=None) -> int:
    """``model`` (and ``tokenizer``, when given) as a Hugging Face folder of about ``shards`` safetensors shards
    plus the index ``from_pretrained`` follows (``save_pretrained`` with a matching ``max_shard_size``); returns
    the number of shards written."""
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    model.save_pretrained(folder, max_shard_size=size // shards + 1)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return len(list(Path(folder).glob("*.safetensors")))
