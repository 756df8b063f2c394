"""``torchrun --nproc-per-node N -m opsft.distributed --config PACKAGE.MODULE:NAME [--strategy ddp|fsdp2]``:
train one RunConfig on every process of the job (nccl on GPUs, gloo on CPU) into the run cache. ``--config`` may
also name a ``.pkl`` file holding a pickled RunConfig (what a Ray task of ``opsft.cluster`` writes)."""

from __future__ import annotations

import argparse
import importlib
import pickle
import sys
from pathlib import Path

from opsft.config import RunConfig
from opsft.distributed.parallel import STRATEGIES
from opsft.distributed.run import run_distributed
from opsft.distributed.world import BACKENDS


def load_config(reference: str) -> RunConfig:
    """The RunConfig named by ``package.module:NAME`` (the object itself, or what calling it returns), or pickled
    in the ``.pkl`` file ``reference``."""
    if reference.endswith(".pkl"):
        with open(reference, "rb") as fh:
            config = pickle.load(fh)
        if not isinstance(config, RunConfig):
            raise TypeError(f"--config {reference}: holds a {type(config).__name__}, not a RunConfig")
        return config
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--config must look like package.module:NAME, got {reference!r}")
    module = importlib.import_module(module_name)
    if not hasattr(module, attr):
        raise ValueError(f"--config {reference!r}: module {module_name!r} has no attribute {attr!r}")
    config = getattr(module, attr)
    config = config() if callable(config) and not isinstance(config, RunConfig) else config
    if not isinstance(config, RunConfig):
        raise TypeError(f"--config {reference!r} is a {type(config).__name__}, not a RunConfig")
    return config


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the torchrun entry point."""
    parser = argparse.ArgumentParser(prog="python -m opsft.distributed", description=__doc__)
    parser.add_argument("--config", required=True, help="package.module:NAME of a RunConfig (or a function returning one), or a .pkl file of one")
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp", help="ddp: small models; fsdp2: sharded")
    parser.add_argument("--backend", choices=BACKENDS, default=None, help="default: nccl with CUDA, gloo without")
    parser.add_argument("--cache", type=Path, default=None, help="run cache folder (default: $OPSFT_CACHE)")
    parser.add_argument("--progress", action="store_true", help="a progress bar on rank 0")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, train the run, and print its folder."""
    args = build_parser().parse_args(argv)
    folder = run_distributed(load_config(args.config), args.strategy, args.backend, args.cache, args.progress)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
