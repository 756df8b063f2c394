"""Saved claims runs as baselines: numbers compare only with a run measured on the same CPU model."""

from opsft.claims.storage import load_baseline, save_run


def payload(cpu: str, value: float) -> dict:
    return {"scale": "ci", "claims": {"C02": {"value": value}}, "provenance": {"machine": {"cpu": cpu}}}


def test_the_baseline_is_the_latest_named_run_measured_on_this_cpu(tmp_path):
    save_run(tmp_path, "ci", payload("Intel Xeon", 1.0))
    save_run(tmp_path, "ci", payload("AMD EPYC", 2.0))
    save_run(tmp_path, "ci", payload("Intel Xeon", 3.0))
    save_run(tmp_path, "other", payload("AMD EPYC", 4.0))
    run, note = load_baseline(tmp_path, "ci", "AMD EPYC")
    assert run["claims"]["C02"]["value"] == 2.0 and "0002_ci.json" in note
    run, _ = load_baseline(tmp_path, "ci", "Intel Xeon")
    assert run["claims"]["C02"]["value"] == 3.0
    run, _ = load_baseline(tmp_path, None, "AMD EPYC")
    assert run["claims"]["C02"]["value"] == 4.0


def test_without_a_run_from_this_cpu_numbers_are_not_compared_and_the_note_says_why(tmp_path):
    save_run(tmp_path, "ci", payload("Intel Xeon", 1.0))
    run, note = load_baseline(tmp_path, "ci", "AMD EPYC")
    assert run is None
    assert note.startswith("numbers not compared") and "AMD EPYC" in note and "Intel Xeon" in note
