"""The committed fingerprints of pinned numerics (``opsft.fingerprints``, ``tests/fingerprints.json``): nano's
models and short runs recomputed here must match the file, whichever x86-64 CPU runs the tests; the micro
organism's are checked by ``opsft fingerprints --organisms micro`` after the `ci` claims (``nox -s tests``),
which build it."""

import json

import pytest

from opsft import fingerprints
from opsft.cli import main
from opsft.numerics import digest_tag
from opsft.provenance import cpu_model


@pytest.mark.slow
def test_nano_models_and_short_runs_match_the_committed_fingerprints(cache_env):
    expected = fingerprints.read()
    assert expected["numerics"] == digest_tag(), "the file holds another numerics version: remake it with --write"
    found = fingerprints.compute(("nano",))
    assert len(found) == 2 + len(fingerprints.RUNS)
    assert fingerprints.mismatches(expected, found, cpu_model()) == []


def test_a_mismatch_names_the_model_and_the_cpus_on_both_sides():
    expected = {"made_on": {"cpu": "Intel Xeon"}, "matched_on": [{"cpu": "Intel Xeon"}, {"cpu": "AMD EPYC"}],
                "sha256": {"nano/base": "a" * 64, "nano/sft": "b" * 64}}
    lines = fingerprints.mismatches(expected, {"nano/base": "a" * 64, "nano/sft": "c" * 64, "micro/base": "d" * 64},
                                    "Some CPU")
    assert lines == [
        f"micro/base: {'d' * 16} on Some CPU, but no entry in the file (made on Intel Xeon; matched on AMD EPYC, "
        "Intel Xeon)",
        f"nano/sft: {'c' * 16} on Some CPU, but {'b' * 16} in the file (made on Intel Xeon; matched on AMD EPYC, "
        "Intel Xeon)"]


def test_the_committed_file_is_of_the_current_pinned_numerics():
    data = fingerprints.read()
    assert data["numerics"] == digest_tag() and data["matched_on"]
    assert {"nano/base", "nano/teacher", "micro/base", "micro/teacher"} <= set(data["sha256"])


def test_a_malformed_file_is_named(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text(json.dumps({"numerics": "pinned-1"}))
    with pytest.raises(ValueError, match=f"fingerprint file {bad}: .*made_on"):
        fingerprints.read(bad)


def test_the_command_refuses_native_numerics(monkeypatch, capsys):
    monkeypatch.setenv("OPSFT_NUMERICS", "native")
    monkeypatch.setattr(fingerprints, "compute", lambda organisms: {})
    assert main(["fingerprints", "--organisms", "nano"]) == 1
    assert "pinned numerics only" in capsys.readouterr().err
