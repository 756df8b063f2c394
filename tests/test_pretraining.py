"""The organism cache: each model under its own recipe, shared between organisms, runs keyed by the recipe."""

import dataclasses
import json

import pytest

from opsft.config import RunConfig
from opsft.pretraining import ORGANISMS, build_organism

pytestmark = pytest.mark.slow


@pytest.fixture
def other_base(monkeypatch):
    """An organism ``nano_other`` that differs from ``nano`` only in its base's pretraining steps."""
    monkeypatch.setitem(ORGANISMS, "nano_other", dataclasses.replace(ORGANISMS["nano"], base_steps=40))
    return "nano_other"


def test_organisms_that_share_a_teacher_recipe_train_it_once(tmp_path, other_base):
    first = build_organism("nano", cache=tmp_path)
    teacher_manifest = first.folder / first.report["models"]["teacher"].replace("model.safetensors", "model.json")
    stamp = teacher_manifest.stat().st_mtime_ns
    second = build_organism(other_base, cache=tmp_path)
    assert second.report["models"]["teacher"] == first.report["models"]["teacher"]
    assert second.report["models"]["base"] != first.report["models"]["base"]
    assert teacher_manifest.stat().st_mtime_ns == stamp  # reused, not retrained
    assert json.loads(teacher_manifest.read_text())["recipe"]["steps"] == ORGANISMS["nano"].teacher_steps


def test_a_run_digest_changes_with_its_organism_recipe(other_base, monkeypatch):
    before = RunConfig(organism="nano").digest()
    monkeypatch.setitem(ORGANISMS, "nano", ORGANISMS[other_base])
    assert RunConfig(organism="nano").digest() != before


def test_a_corrupt_model_file_is_retrained(tmp_path, capsys):
    org = build_organism("nano", cache=tmp_path)
    weights = org.folder / org.report["models"]["base"]
    weights.write_bytes(weights.read_bytes()[:-8] + b"corrupt!")
    again = build_organism("nano", cache=tmp_path)
    assert "missing or corrupt" in capsys.readouterr().out
    assert again.report["sha256"] == org.report["sha256"]  # retrained to the same weights


def test_unknown_roles_are_named():
    with pytest.raises(KeyError, match="'student'"):
        ORGANISMS["nano"].recipe("student")


def test_a_cold_build_trains_the_teacher_in_a_second_process_to_the_same_weights(tmp_path):
    """The cold build pretrains the teacher in a worker process beside the base; the weights must be those of
    the same recipe trained here (cache keys must not depend on where a model was trained)."""
    from opsft.organism.tokenizer import build_tokenizer
    from opsft.pretraining import _trained

    org = build_organism("nano", cache=tmp_path / "cold")
    here, _ = _trained(ORGANISMS["nano"].recipe("teacher"), tmp_path / "here" / "organisms", build_tokenizer())
    built = org.folder / org.report["models"]["teacher"]
    assert built.read_bytes() == here.read_bytes()
