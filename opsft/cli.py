"""`opsft` command line. Each subcommand lives beside the code it drives and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules exposing ``register_cli(subparsers)``; each adds one or more subcommands.
COMMAND_MODULES: tuple[str, ...] = ("opsft.directions", "opsft.diagnostics", "opsft.calibrate", "opsft.recipes")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="opsft", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand (its handler is stored as ``args.func``)."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
