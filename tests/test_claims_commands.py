"""``opsft claims list``, ``compare`` and ``verdicts`` on saved run files written here (nothing trains)."""

import argparse
import json

import pytest

from opsft.claims.commands import cmd_compare, cmd_list, compare_table, list_table, run_files, verdicts_table
from opsft.claims.storage import save_run
from opsft.cli import main


def payload(scale: str, opsft_mean: float, verdict: str = "REPRODUCED") -> dict:
    """A saved run holding C02 with one measured mean that the test chooses."""
    est = {"mean": opsft_mean, "low": opsft_mean - 1, "high": opsft_mean + 1, "n": 3}
    return {"scale": scale, "provenance": {"commit": "0123456789abcdef0", "dirty": False, "utc": "2026-12-06"},
            "claims": {"C02": {"verdict": verdict, "versions": {"1": {"verdict": "INCONCLUSIVE"},
                                                                 "2": {"verdict": verdict}},
                               "measured": {"opsft.in_domain": est}, "rows": [], "seeds": [0, 1, 2]}}}


@pytest.fixture
def storage(tmp_path):
    save_run(tmp_path / "ci", "ci", payload("ci", 40.0))
    save_run(tmp_path / "ci", "ci", payload("ci", 42.0, "NOT REPRODUCED"))
    save_run(tmp_path / "ci", "ci", payload("ci", 50.0))
    return tmp_path


def test_list_shows_every_saved_run_with_commit_tree_date_and_seeds(storage, capsys):
    assert [p.name for p in run_files(storage)] == ["0001_ci.json", "0002_ci.json", "0003_ci.json"]
    assert f"| {storage / 'ci' / '0001_ci.json'} | ci | 0123456789ab | clean | 2026-12-06 | 1 | 0, 1, 2 |" in \
        list_table(run_files(storage))
    assert cmd_list(argparse.Namespace(storage=storage)) == 0
    assert "0003_ci.json" in capsys.readouterr().out


def test_compare_shows_verdict_changes_and_deltas_and_fails_past_the_ci_tolerance(storage, capsys):
    runs = {n: json.loads((storage / "ci" / f"000{n}_ci.json").read_text()) for n in (1, 2, 3)}
    table, failed = compare_table(runs[1], runs[2], ["C02"], [])
    assert not failed
    assert "## C02 (v1: INCONCLUSIVE -> INCONCLUSIVE, v2: REPRODUCED -> NOT REPRODUCED)" in table
    assert "| opsft.in_domain | 40 | 42 | 2 | [41, 43] | better |" in table
    within = argparse.Namespace(a="1", b="2", storage=storage / "ci", k=["c02"], fail=None)
    assert cmd_compare(within) == 0  # 2 points: inside CI's 5
    past = argparse.Namespace(a=str(storage / "ci" / "0001_ci.json"), b="3", storage=storage / "ci", k=None, fail=None)
    assert cmd_compare(past) == 1  # 10 points past CI's 5
    assert "| FAIL |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no claim of both runs matches -k"):
        cmd_compare(argparse.Namespace(a="1", b="2", storage=storage / "ci", k=["c1"], fail=None))


def test_a_k_that_matches_no_registered_claim_is_an_error_naming_it_and_the_registered_ids(storage, capsys):
    assert main(["claims", "compare", "1", "2", "--storage", str(storage / "ci"), "-k", "C02", "-k", "c99"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("opsft: error: -k c99: matches no registered claim id") and err.count("\n") == 1
    assert "registered: C01, C02, " in err
    assert main(["claims", "compare", "1", "2", "--storage", str(storage / "ci"), "-k", "c02"]) == 0


def test_list_of_a_storage_folder_that_does_not_exist_is_an_error_and_an_empty_one_says_so(tmp_path, capsys):
    assert main(["claims", "list", "--storage", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err == f"opsft: error: --storage {tmp_path / 'nope'}: no such folder of claims runs\n"
    assert main(["claims", "list", "--storage", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert err == f"no saved claims run in {tmp_path} or its subfolders\n" and out.startswith("| run | scale |")


@pytest.mark.parametrize("command", [["list"], ["verdicts", "4"], ["compare", "1", "4"]])
def test_a_run_file_with_bad_contents_stops_every_command_with_one_line(storage, capsys, command):
    bad = payload("ci", 40.0)
    bad["claims"]["C02"]["rows"] = "opsft,sft"
    save_run(storage / "ci", "ci", bad)
    assert main(["claims", *command, "--storage", str(storage if command == ["list"] else storage / "ci")]) == 1
    err = capsys.readouterr().err
    assert err == (f"opsft: error: claims run file {storage / 'ci' / '0004_ci.json'}: claim C02: field 'rows' is "
                   "'opsft,sft' (str), not a list\n")


def test_verdicts_decides_saved_rows_again_under_every_rule_version(tmp_path):
    # C08 under version 1 passes "diminishing > 0" although the late snapshot is worse; version 2 needs
    # v_late > v_mid as well
    values = {"v_early": 10.0, "v_mid": 20.0, "v_late": 15.0}
    rows = [{"arm": arm, "seed": s, "values": {"in_domain": v + s}} for s in range(3) for arm, v in values.items()]
    rows += [{"arm": "snapshots", "seed": s, "values": {"diminishing": 15.0}} for s in range(3)]
    run = {"scale": "full", "claims": {"C08": {"verdict": "REPRODUCED", "rows": rows}}}
    assert verdicts_table([("0001_full", run)]).splitlines()[-1].startswith(  # saved, then v1, v2 (and any newer)
        "| C08 snapshot_steps | 0001_full | REPRODUCED | REPRODUCED | NOT REPRODUCED |")
