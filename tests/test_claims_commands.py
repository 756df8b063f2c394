"""``opsft claims list``, ``compare`` and ``verdicts`` on saved run files written here (nothing trains)."""

import argparse
import json
import math

import pytest

from opsft.claims.commands import (
    cmd_compare,
    cmd_list,
    compare_notes,
    compare_table,
    interval_cell,
    list_table,
    run_files,
    verdicts_table,
)
from opsft.claims.storage import save_run
from opsft.claims.tables import REPO_ROOT
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


def one_seed_payload(scale: str, means: dict[str, float], cpu: str = "Intel(R) Xeon(R) Processor",
                     seeds: tuple[int, ...] = (0,)) -> dict:
    """A run as the `ci` scale saves it: one seed, so every interval is NaN (no interval exists)."""
    measured = {key: {"mean": m, "low": math.nan, "high": math.nan, "n": 1} for key, m in means.items()}
    return {"scale": scale, "provenance": {"commit": "fedcba9876543210", "dirty": False, "utc": "2026-12-07",
                                           "machine": {"cpu": cpu}},
            "claims": {"C02": {"verdict": "INCONCLUSIVE", "measured": measured, "rows": [], "seeds": list(seeds)}}}


def test_single_seed_runs_say_no_interval_exists_and_exit_0_within_tolerance(tmp_path, capsys):
    save_run(tmp_path, "ci", one_seed_payload("ci", {"opsft.in_domain": 40.0, "sft.in_domain": 30.0}))
    save_run(tmp_path, "ci", one_seed_payload("ci", {"opsft.in_domain": 42.0, "sft.in_domain": 30.0}))
    assert main(["claims", "compare", "1", "2", "--storage", str(tmp_path), "-k", "c02"]) == 0
    out, err = capsys.readouterr()
    assert "nan" not in out
    assert "B holds one seed of every claim compared (seed 0), so no interval exists" in out
    assert "| opsft.in_domain | 40 | 42 | 2 | none (one seed) | better |" in out
    assert "| sft.in_domain | 30 | 30 | 0 | none (one seed) | unchanged |" in out
    assert out.startswith("- A: `0001_ci`, scale ci, commit fedcba987654 (clean), 2026-12-07, Intel(R) Xeon(R)")
    assert err == ("no mean moved past the tolerances (in_domain:5, train_set:5, held_out_mean:5, updated_pct:5): "
                   "2 means compared, 1 unchanged; exit 0\n")


def test_single_seed_runs_still_fail_on_a_mean_past_the_tolerance_and_say_so(tmp_path, capsys):
    save_run(tmp_path, "ci", one_seed_payload("ci", {"opsft.in_domain": 40.0, "sft.in_domain": 30.0}))
    save_run(tmp_path, "ci", one_seed_payload("ci", {"opsft.in_domain": 29.0, "sft.in_domain": math.nan}))
    assert main(["claims", "compare", "1", "2", "--storage", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "| opsft.in_domain | 40 | 29 | -11 | none (one seed) | FAIL |" in out
    assert "| sft.in_domain | 30 | nan | nan | none (one seed) | FAIL |" in out  # a mean that became NaN
    assert not err.startswith("opsft: error")
    assert err.startswith("2 of 2 means moved past the tolerances (in_domain:5, ") and err.endswith("; exit 1\n")


def test_a_claim_with_one_seed_among_others_is_named_and_other_undefined_intervals_say_why():
    a = payload("ci", 40.0)
    a["claims"]["C03"] = one_seed_payload("ci", {"opsft.in_domain": 40.0})["claims"]["C02"]
    b = json.loads(json.dumps(a))
    b["claims"]["C02"]["measured"]["grpo.in_domain"] = {"mean": 0.0, "low": math.nan, "high": math.nan, "n": 1}
    a["claims"]["C02"]["measured"]["grpo.in_domain"] = {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 3}
    table, failed = compare_table(a, b, ["C02", "C03"], [])
    assert not failed and "nan" not in table
    assert "B holds one seed of C03 (seed 0): no interval exists." in table
    assert "B holds one seed of C02" not in table and "every claim compared" not in table
    assert "| grpo.in_domain | 0 | 0 | 0 | none (identical seeds, counted once) | unchanged |" in table
    assert compare_notes(a, b, ["C02", "C03"]) == []
    assert compare_notes(a, b, ["C03"]) == ["B holds one seed of every claim compared (seed 0), so no interval "
                                            "exists and none is shown; each mean is judged against the "
                                            "tolerances alone."]


def test_runs_from_different_cpus_are_named_as_such():
    a = one_seed_payload("ci", {"opsft.in_domain": 40.0}, seeds=(0, 1))
    b = one_seed_payload("ci", {"opsft.in_domain": 40.0}, cpu="AMD EPYC", seeds=(0, 1))
    assert compare_notes(a, b, ["C02"]) == [
        "A and B were measured on different CPUs (Intel(R) Xeon(R) Processor; AMD EPYC) under native numerics: their "
        "means differ by the CPU's kernels as well as by the code, so CI compares native runs of one CPU model only."]
    pinned = {"numerics": {"tag": "pinned-1"}}
    a["provenance"] |= pinned
    b["provenance"] |= pinned
    assert compare_notes(a, b, ["C02"]) == []
    del a["provenance"]["numerics"]
    assert compare_notes(a, b, ["C02"]) == [
        "A and B ran under different numerics (native; pinned-1): their means differ by the kernels as well as by "
        "the code."]


def test_the_readme_examples_over_the_committed_runs(capsys):
    # single seed at `ci`: no interval, and the two runs' C02 means are bit-identical
    assert main(["claims", "compare", "2", "3", "--storage", str(REPO_ROOT / ".claims" / "ci"), "-k", "c02"]) == 0
    out, err = capsys.readouterr()
    assert "nan" not in out and "so no interval exists" in out and err.endswith("12 unchanged; exit 0\n")
    # the Intel and the AMD baselines: the note says the CPUs differ, and C02's means moved past the tolerances
    assert main(["claims", "compare", "3", "4", "--storage", str(REPO_ROOT / ".claims" / "ci"), "-k", "c02"]) == 1
    out, err = capsys.readouterr()
    assert "nan" not in out and "A and B were measured on different CPUs" in out
    assert err.startswith("11 of 12 means moved past the tolerances")


@pytest.mark.parametrize("estimate, seeds, cell", [
    ({"mean": 1.0, "low": 0.5, "high": 1.5, "n": 3}, [0, 1, 2], "[0.5, 1.5]"),
    ({"mean": 1.0}, [0, 1, 2], "—"),
    ({"mean": 1.0, "low": math.nan, "high": math.nan, "n": 1}, [0], "none (one seed)"),
    ({"mean": 1.0, "low": math.nan, "high": math.nan, "n": 1}, [0, 1], "none (identical seeds, counted once)"),
    ({"mean": 1.0, "low": math.nan, "high": math.nan, "n": 1}, None, "none (n = 1)"),
    ({"mean": math.nan, "low": math.nan, "high": math.nan, "n": 3}, [0, 1, 2], "none"),
])
def test_an_interval_cell_says_why_there_is_no_interval(estimate, seeds, cell):
    assert interval_cell(estimate, seeds) == cell
