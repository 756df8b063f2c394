"""Atomic, checksummed file writes: nothing half-written is ever left where a reader looks."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, fsync it, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.chmod(tmp_path, 0o644)  # mkstemp creates 0600; results and caches are meant to be shared
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    return atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON to ``path`` atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def update_markdown_section(path: str | Path, section: str, body: str) -> Path:
    """Replace (or append) the block between ``<!-- begin:SECTION -->`` and ``<!-- end:SECTION -->`` in a
    markdown file, under a file lock and atomically, so several benchmarks can share one results page."""
    from filelock import FileLock

    path = Path(path)
    begin, end = f"<!-- begin:{section} -->", f"<!-- end:{section} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            tail = rest.split(end, 1)[1].lstrip("\n")
            text = head + block + tail
        else:
            text = (text.rstrip() + "\n\n" if text.strip() else "") + block
        atomic_write_text(path, text)
    return path


def read_verified_manifest(path: str | Path, what: str) -> dict | None:
    """The JSON manifest at ``path`` if every file it lists under ``"sha256"`` (paths relative to its folder)
    exists with that SHA-256; otherwise None. A manifest naming a missing or corrupt file is removed, with a
    message naming ``what`` and the file, so that the cache entry is recomputed."""
    path = Path(path)
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    for rel, digest in manifest["sha256"].items():
        f = path.parent / rel
        if not f.is_file() or file_sha256(f) != digest:
            print(f"{what} {path.parent}: {rel} is missing or corrupt; recomputing")
            path.unlink()
            return None
    return manifest


def write_figures_section(path: str | Path, section: str, caption: str, figures: Mapping[str, float]) -> str:
    """Write ``figures`` (measure -> number, 3 significant digits) as a two-column markdown table under
    ``caption`` into section ``section`` of the markdown file ``path``; returns the section's text."""
    lines = [caption, "", "| measure | value |", "|---|---|", *(f"| {k} | {v:.3g} |" for k, v in figures.items())]
    text = "\n".join(lines)
    update_markdown_section(path, section, text)
    return text
