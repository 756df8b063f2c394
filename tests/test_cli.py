"""The `opsft` command line registers every subcommand module."""

import re
import subprocess
import sys
import typing

import pytest

from opsft.checkpoints import iter_tensors
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


HEAVY = ("torch", "transformers", "matplotlib")


@pytest.fixture
def checkpoints(tmp_path):
    """Two tiny sharded checkpoint folders (nano organism, base and perturbed) and a direction file."""
    from test_directions import perturbed, write_sharded

    from opsft.directions import extract
    from opsft.organism.models import build_model

    model = build_model("nano", seed=0)
    base = write_sharded({n: p.detach() for n, p in model.named_parameters()}, tmp_path / "base")
    after = write_sharded(perturbed(model, 1, scale=0.1), tmp_path / "after")
    direction = extract(base, after, rule="fp32").save(tmp_path / "v.safetensors")  # no kernel build
    return base, after, direction


def run_cli(capsys, *argv: str) -> tuple[int, list[str]]:
    """Exit status of `opsft ARGV` and the lines it wrote to stderr."""
    capsys.readouterr()
    status = main(list(argv))
    return status, capsys.readouterr().err.splitlines()


def test_building_the_parser_imports_no_heavy_module():
    code = ("import sys; from opsft.cli import build_parser; build_parser(); "
            f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_choices_and_defaults_declared_in_the_cli_agree_with_their_modules():
    from opsft import cli, directions
    from opsft.diagnostics import metrics as M

    assert cli.RULES == directions.RULES
    assert cli.PACKINGS == typing.get_args(directions.Packing)
    assert cli.DIAGNOSE_DEFAULTS == {"k": M.DEFAULT_ANGLE_K, "rank": M.DEFAULT_MASK_RANK,
                                     "alpha": M.DEFAULT_MASK_ALPHA, "subspace_k": M.DEFAULT_SUBSPACE_K}


def test_a_runtime_error_is_one_line_and_its_traceback_needs_debug(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    argv = ["direction", missing, missing, "-o", str(tmp_path / "v.safetensors")]
    message = f"opsft: error: no safetensors weights found at {missing}"
    assert run_cli(capsys, *argv) == (1, [message])
    status, err = run_cli(capsys, "--debug", *argv)
    assert status == 1 and err[0] == "Traceback (most recent call last):" and err[-1] == message


def test_a_truncated_shard_is_named(checkpoints, tmp_path, capsys):
    base, after, _ = checkpoints
    shard = after / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    status, err = run_cli(capsys, "direction", str(base), str(after), "-o", str(tmp_path / "v2.safetensors"),
                          "--rule", "fp32")
    assert status == 1 and len(err) == 1 and "incomplete" in err[0]
    assert err[0].startswith(f"opsft: error: cannot read safetensors file {shard}: ")
    with pytest.raises(ValueError, match=re.escape(str(shard))) as raised:
        dict(iter_tensors(after))
    assert type(raised.value.__cause__).__name__ == "SafetensorError"


def test_compare_of_a_checkpoint_folder_without_base_asks_for_base(checkpoints, capsys):
    base, after, direction = checkpoints
    assert main(["compare", str(direction), str(direction)]) == 0
    assert "| overall | " in capsys.readouterr().out
    assert main(["compare", str(after), str(after), "--base", str(base)]) == 0
    assert "| overall | " in capsys.readouterr().out
    status, err = run_cli(capsys, "compare", str(after), str(direction))
    assert status == 1 and len(err) == 1
    assert err[0].startswith(f"opsft: error: {after} is a checkpoint folder: comparing checkpoints needs")
    assert "--base BASE" in err[0]


@pytest.mark.parametrize("command", [["direction", "b", "a"], ["diagnose", "b", "a"],
                                     ["calibrate", "--scale", "smoke"]])
def test_an_output_under_a_regular_file_is_named_before_any_work(tmp_path, capsys, command):
    blocker = tmp_path / "somefile"
    blocker.write_text("")
    status, err = run_cli(capsys, *command, "-o", str(blocker / "out"))
    message = f"opsft: error: -o {blocker / 'out'}: {blocker} is a file, so nothing can be written under it"
    assert (status, err) == (1, [message])
