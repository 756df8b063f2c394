"""Saved claims runs: baselines compare only with a run measured on the same CPU model; a run file with bad
contents is refused with the file, claim and field named; the summary decides saved rows again under the
current rules."""

import copy
import json
from pathlib import Path

import pytest

from opsft.claims.evaluate import CURRENT_VERSION, evaluate
from opsft.claims.registry import CLAIMS, RULE_VERSIONS
from opsft.claims.storage import load_baseline, read_run, save_run, summary_entry

C02_ROWS = [{"arm": arm, "seed": s, "values": {"in_domain": value + s}}
            for s in range(3) for arm, value in (("opsft", 45.0), ("sft", 40.0), ("grpo", 45.0))]
# C08 under version 1 passes "diminishing > 0" although the late snapshot is worse; version 2 needs v_late > v_mid
C08_ROWS = [{"arm": arm, "seed": s, "values": {"in_domain": v + s}}
            for s in range(3) for arm, v in (("v_early", 10.0), ("v_mid", 20.0), ("v_late", 15.0))]
C08_ROWS += [{"arm": "snapshots", "seed": s, "values": {"diminishing": 15.0}} for s in range(3)]


def saved_record(claim_id: str, rows: list[dict]) -> dict:
    """A claim's record as the claims session saves it: its verdicts under every rule version, rows (a copy, for
    the test to spoil) and seeds."""
    return {**evaluate(CLAIMS[claim_id], rows).to_dict(), "rows": copy.deepcopy(rows), "runs": [],
            "seeds": sorted({row["seed"] for row in rows})}


def payload(cpu: str, value: float, numerics: str = "native") -> dict:
    record = saved_record("C02", [{**row, "values": {"in_domain": value}} for row in C02_ROWS[:1]])
    prov = {"machine": {"cpu": cpu}, **({} if numerics == "native" else {"numerics": {"tag": numerics}})}
    return {"scale": "ci", "claims": {"C02": record}, "provenance": prov}


def first_mean(run: dict) -> float:
    return run["claims"]["C02"]["rows"][0]["values"]["in_domain"]


def test_a_native_baseline_is_the_latest_named_native_run_measured_on_this_cpu(tmp_path):
    save_run(tmp_path, "ci", payload("Intel Xeon", 1.0))
    save_run(tmp_path, "ci", payload("AMD EPYC", 2.0))
    save_run(tmp_path, "ci", payload("Intel Xeon", 3.0))
    save_run(tmp_path, "ci", payload("AMD EPYC", 5.0, "pinned-1"))
    save_run(tmp_path, "other", payload("AMD EPYC", 4.0))
    run, note = load_baseline(tmp_path, "ci", "AMD EPYC", "native")
    assert first_mean(run) == 2.0 and "0002_ci.json" in note
    run, _ = load_baseline(tmp_path, "ci", "Intel Xeon", "native")
    assert first_mean(run) == 3.0
    run, _ = load_baseline(tmp_path, None, "AMD EPYC", "native")
    assert first_mean(run) == 4.0


def test_a_pinned_baseline_is_the_latest_run_under_the_same_pinned_numerics_on_any_cpu(tmp_path):
    save_run(tmp_path, "ci", payload("AMD EPYC", 1.0, "pinned-1"))
    save_run(tmp_path, "ci", payload("Intel Xeon", 2.0))
    save_run(tmp_path, "ci", payload("AMD EPYC", 3.0, "pinned-2"))
    run, note = load_baseline(tmp_path, "ci", "Intel Xeon", "pinned-1")
    assert first_mean(run) == 1.0 and "0001_ci.json" in note and "any CPU" in note
    assert first_mean(load_baseline(tmp_path, "ci", "Intel Xeon", "pinned-2")[0]) == 3.0


def test_without_a_comparable_run_numbers_are_not_compared_and_the_note_says_why(tmp_path):
    save_run(tmp_path, "ci", payload("Intel Xeon", 1.0))
    run, note = load_baseline(tmp_path, "ci", "AMD EPYC", "native")
    assert run is None
    assert note.startswith("numbers not compared") and "AMD EPYC" in note and "native on Intel Xeon" in note
    run, note = load_baseline(tmp_path, "ci", "Intel Xeon", "pinned-1")
    assert run is None and "pinned-1 numerics" in note


def set_field(record: dict, field: str, value) -> None:
    """Set (or, for ``None``, delete) the ``field`` of ``record`` that a path of keys names, e.g.
    ``rows/2/values/in_domain``."""
    *parents, last = field.split("/")
    for key in parents:
        record = record[int(key)] if isinstance(record, list) else record[key]
    if value is None:
        del record[int(last) if isinstance(record, list) else last]
    else:
        record[int(last) if isinstance(record, list) else last] = value


@pytest.mark.parametrize(("field", "value", "named", "says"), [
    ("rows", "opsft,sft", "rows", "'opsft,sft' (str), not a list"),
    ("rows", None, "rows", "is missing"),
    ("verdict", "MAYBE", "verdict", "'MAYBE', not one of REPRODUCED, NOT REPRODUCED, INCONCLUSIVE"),
    ("verdict", None, "verdict", "is missing"),
    ("versions/1/verdict", "PASSED", "versions.1.verdict", "'PASSED', not one of REPRODUCED"),
    ("rows/1/arm", None, "rows[1].arm", "is missing"),
    ("rows/1/seed", None, "rows[1].seed", "is missing"),
    ("rows/1/seed", "0", "rows[1].seed", "'0' (str), not an integer"),
    ("rows/1/values", None, "rows[1].values", "is missing"),
    ("rows/1", ["sft", 0, 40.0], "rows[1]", "not an object"),
    ("rows/2/values/in_domain", "high", "rows[2].values.in_domain", "'high' (str), not a number"),
    ("rows/2/values/in_domain", True, "rows[2].values.in_domain", "True (bool), not a number"),
    ("rows/3", {"arm": "opsft", "seed": 0, "values": {"in_domain": 1.0}}, "rows[3].values.in_domain",
     "records opsft.in_domain for seed 0 a second time"),
    ("rows/2/problems", "0110", "rows[2].problems", "not an object"),
    ("seeds", None, "seeds", "is missing"),
    ("measured/opsft.in_domain/mean", "45", "measured.opsft.in_domain.mean", "not a number"),
])
def test_a_run_file_with_a_bad_field_is_refused_naming_file_claim_and_field(tmp_path, field, value, named, says):
    run = {"scale": "ci", "claims": {"C02": saved_record("C02", C02_ROWS)}}
    set_field(run["claims"]["C02"], field, value)
    path = tmp_path / "0001_ci.json"
    path.write_text(json.dumps(run))
    with pytest.raises(ValueError) as refused:
        read_run(path)
    message = str(refused.value)
    assert message.startswith(f"claims run file {path}: claim C02: field '{named}' ") and says in message


def test_a_run_file_with_an_unregistered_claim_is_refused_listing_the_registered_ids(tmp_path):
    path = tmp_path / "0001_ci.json"
    path.write_text(json.dumps({"scale": "ci", "claims": {"C99": saved_record("C02", C02_ROWS)}}))
    with pytest.raises(ValueError, match=f"claims run file {path}: claim C99: field 'claims' holds 'C99', which is "
                       "not a registered claim id; registered: C01, C02, "):
        read_run(path)


def test_every_committed_run_file_is_a_valid_claims_run():
    files = sorted((Path(__file__).parents[1] / ".claims").rglob("*.json"))
    assert files, "no committed claims run found under .claims"
    for path in files:
        assert read_run(path)["claims"]


def test_the_summary_decides_saved_rows_again_under_every_rule_version():
    saved_under_v1 = {"verdict": "REPRODUCED", "rules": [], "rows": C08_ROWS, "seeds": [0, 1, 2], "measured": {}}
    run = {"scale": "full", "claims": {"C08": saved_under_v1}, "provenance": {"commit": "0123456789abcdef"}}
    entry = summary_entry(run, "C08", "0001_full")
    assert entry.verdicts.keys() == set(RULE_VERSIONS)
    assert entry.verdicts[1] == "REPRODUCED" and entry.verdicts[2] == "NOT REPRODUCED"
    assert entry.verdicts[CURRENT_VERSION] == evaluate(CLAIMS["C08"], C08_ROWS).verdict.value
    assert (entry.saved, entry.saved_version, entry.scale, entry.run_name, entry.commit) == (
        "REPRODUCED", 1, "full", "0001_full", "0123456789abcdef")
    newer = {"scale": "ci", "claims": {"C02": saved_record("C02", C02_ROWS)}}
    assert summary_entry(newer, "C02", "0002_ci").saved_version == CURRENT_VERSION


def test_a_claim_saved_as_error_stays_error_under_every_rule_version():
    errored = {**saved_record("C08", C08_ROWS), "verdict": "ERROR"}
    entry = summary_entry({"scale": "ci", "claims": {"C08": errored}}, "C08", "0003_ci")
    assert set(entry.verdicts.values()) == {"ERROR"} and entry.saved == "ERROR"
