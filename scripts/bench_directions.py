"""Benchmark of direction extraction, written to section "directions" of results/perf.md.

Two sharded fp32 safetensors checkpoints (~1 GB together, 32 tensors a side), page cache warm: a plain read of
both against ``extract`` under the bf16 rule (the compiled one-pass kernel, and the torch ops that run without a
compiler, which are the rule as of commit 44326c9) and the fp32 rule; per operation the best of alternating
repeats and the growth of the process's peak resident memory (Linux), beside the figures recorded at 44326c9.
Then the bytes per parameter of the stored direction, int8 and 2-bit packed.

    python scripts/bench_directions.py [--quick] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from safetensors.torch import save_file

from opsft import directions
from opsft.checkpoints import iter_tensors
from opsft.directions import Direction, extract
from opsft.io import update_markdown_section

# GB/s of checkpoint read at commit 44326c9 (results/perf.md, section constraints, measured at 1b708f5 with the
# same extraction code), by row: the bf16 rule ran at 26% of a plain read
RECORDED_AT = "44326c9"
RECORDED = {"plain read": 19.34, "extract, rule bf16": 5.08, "extract, rule fp32": 8.37}
N_TENSORS, SHARDS = 32, 4


def write_checkpoint(state: dict[str, torch.Tensor], folder: Path, shards: int) -> None:
    """A Hugging Face style sharded folder with model.safetensors.index.json."""
    folder.mkdir(parents=True)
    names = list(state)
    weight_map = {}
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[k::shards]}
        save_file(part, str(folder / fname))
        weight_map.update(dict.fromkeys(part, fname))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def write_pair(total_bytes: int, tmp: Path) -> int:
    """BEFORE and AFTER checkpoints of ``total_bytes`` together under ``tmp`` (fp32; AFTER moves 30% of the
    weights by ~1e-2); returns the bytes of one tensor."""
    numel = total_bytes // 2 // 4 // N_TENSORS
    g = torch.Generator().manual_seed(0)
    before = {f"model.layers.{i}.mlp.up_proj.weight": torch.randn(numel, generator=g) for i in range(N_TENSORS)}
    write_checkpoint(before, tmp / "before", shards=SHARDS)
    after = {n: t + 1e-2 * torch.randn(numel, generator=g) * (torch.rand(numel, generator=g) < 0.3)
             for n, t in before.items()}
    write_checkpoint(after, tmp / "after", shards=SHARDS)
    return numel * 4


def resident_kb(field: str) -> int:
    """A memory line of /proc/self/status in kB (VmRSS: resident now, VmHWM: peak since the last reset)."""
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith(field + ":"))
    return int(line.split()[1])


def operations(tmp: Path) -> dict[str, Callable[[], object]]:
    """The measured operations, by row name."""

    def plain_read() -> None:
        for side in ("before", "after"):
            for _, t in iter_tensors(tmp / side):
                t.sum()  # touch every byte, as extraction does

    def torch_ops() -> Direction:
        with mock.patch.object(directions, "BF16_KERNEL_MIN_NUMEL", float("inf")):
            return extract(tmp / "before", tmp / "after", "bf16")

    return {
        "plain read": plain_read,
        "extract, rule bf16": lambda: extract(tmp / "before", tmp / "after", "bf16"),
        f"extract, rule bf16, torch ops (the rule of {RECORDED_AT})": torch_ops,
        "extract, rule fp32": lambda: extract(tmp / "before", tmp / "after", "fp32"),
    }


def peak_growth(name: str, tmp: Path) -> int:
    """Bytes by which the peak resident memory of this (fresh) process rose over one run of operation ``name``
    above its resident memory at the start (the peak is reset through /proc/self/clear_refs; Linux)."""
    fn = operations(tmp)[name]
    directions.bf16_kernel()  # loaded before the start
    Path("/proc/self/clear_refs").write_text("5")
    start = resident_kb("VmRSS")
    fn()
    return 1024 * (resident_kb("VmHWM") - start)


def measure(tmp: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Per operation: best seconds over ``repeats`` alternating rounds, and the peak memory growth (bytes) of one
    run in a fresh process (in this one, freed memory that the allocator keeps would hide allocations)."""
    ops = operations(tmp)
    directions.bf16_kernel()  # built (or loaded) before any timing
    for fn in ops.values():  # warm: page cache, allocator
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(repeats):
        for name, fn in ops.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        peaks = {name: pool.apply(peak_growth, (name, tmp)) for name in ops}
    return {name: {"s": min(seconds[name]), "peak": peaks[name]} for name in ops}


def stored_bytes_per_param(tmp: Path) -> dict[str, float]:
    """Size of the saved direction per parameter, header included, for each packing."""
    direction = extract(tmp / "before", tmp / "after", "bf16")
    return {packing: direction.save(tmp / f"v_{packing}.safetensors", packing=packing).stat().st_size
            / direction.num_params for packing in ("int8", "2bit")}


def provenance(load_start: float) -> str:
    """Commit (and whether the tree is dirty), torch, CPU, threads, load average (at the start and now) and time
    of this run."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    dirty = "dirty" if git("status", "--porcelain") else "clean"
    return (f"commit {git('rev-parse', '--short', 'HEAD')} ({dirty}), torch {torch.__version__}, "
            f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} "
            "cores (other jobs inflate times), "
            f"{time.strftime('%Y-%m-%d %H:%M')}")


def render(rows: dict[str, dict[str, float]], stored: dict[str, float], total_bytes: int, tensor_bytes: int,
           header: str) -> str:
    """The markdown section: the table of operations against the figures recorded at 44326c9."""
    gb, read_s = total_bytes / 1e9, rows["plain read"]["s"]
    signs_bytes = total_bytes // 2 // 4  # int8 signs of one side's parameters, held in the returned Direction
    lines = [
        f"Direction extraction, two sharded fp32 checkpoints of {gb / 2:.2f} GB each ({signs_bytes / 1e6:.0f}M "
        f"params, {N_TENSORS} tensors of {tensor_bytes / 1e6:.1f} MB a side, {SHARDS} shards), page cache warm; "
        "best of alternating repeats. Peak memory: growth of the process's peak resident memory over one call "
        "(mapped checkpoint pages included), and that growth less the int8 signs the returned Direction holds, "
        "in fp32 tensors of the checkpoint. `python scripts/bench_directions.py`",
        header,
        "",
        "| operation | seconds | GB/s of checkpoint read | share of plain read | "
        f"GB/s at {RECORDED_AT} (recorded) | peak memory growth (MB) | beyond the signs (tensors) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        held = 0 if name == "plain read" else signs_bytes
        lines.append(
            f"| {name} | {r['s']:.3f} | {gb / r['s']:.2f} | {100 * read_s / r['s']:.0f}% | "
            f"{RECORDED.get(name, '-')} | {r['peak'] / 1e6:.0f} | "
            f"{(r['peak'] - held) / tensor_bytes:.1f} |"
        )
    lines += [
        "",
        f"At {RECORDED_AT} the bf16 rule ran at {RECORDED['extract, rule bf16']} GB/s against a plain read's "
        f"{RECORDED['plain read']} GB/s "
        f"({100 * RECORDED['extract, rule bf16'] / RECORDED['plain read']:.0f}%); the torch-ops row is that code "
        "path measured in this run.",
        "",
        f"Stored direction: {stored['int8']:.4f} bytes/param (int8), {stored['2bit']:.4f} bytes/param "
        "(2-bit packed), header included.",
    ]
    return "\n".join(lines)


def main() -> None:
    """Measure, print, and (unless --quick) write the section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/perf.md")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (nothing written)")
    args = parser.parse_args()
    total, repeats = (2**28, 2) if args.quick else (2**30, 7)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tensor_bytes = write_pair(total, Path(tmp))
        rows = measure(Path(tmp), repeats)
        stored = stored_bytes_per_param(Path(tmp))
    body = render(rows, stored, total, tensor_bytes, provenance(load_start))
    print(body)
    if not args.quick:
        update_markdown_section(args.out, "directions", body)


if __name__ == "__main__":
    main()
