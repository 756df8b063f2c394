"""The `opsft` command line registers every subcommand module."""

import pytest

from opsft.cli import build_parser, main


def test_every_subcommand_is_registered():
    parser = build_parser()
    for argv in (["direction", "a", "b", "-o", "v.safetensors"], ["compare", "a", "b"], ["diagnose", "a", "b", "-o", "d"],
                 ["calibrate", "--scale", "smoke", "-o", "out"]):
        assert callable(parser.parse_args(argv).func)


def test_unknown_subcommand_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
