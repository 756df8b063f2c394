"""Tokenizer round trips, organism sizes, config digests and the checkpoint reader."""

import dataclasses

import pytest
import torch

from opsft.checkpoints import iter_tensors, save_state, tensor_names
from opsft.config import OptimConfig, RunConfig, SourceConfig
from opsft.organism.models import build_model, parameter_count
from opsft.organism.tokenizer import build_tokenizer, load_tokenizer


def test_tokenizer_round_trips_text_and_reloads_from_folder(tmp_path):
    tok = build_tokenizer()
    text = "Q: 12+34-5=?\n def f(x):\treturn x*2 \\boxed{41}"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    tok.save_pretrained(tmp_path)
    assert load_tokenizer(tmp_path)(text)["input_ids"] == ids


def test_tokenizer_pads_left_for_generation():
    batch = build_tokenizer()(["ab", "abcd"], padding=True)
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1]


def test_load_tokenizer_names_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize(("size", "low", "high"), [("nano", 0.1e6, 0.3e6), ("micro", 0.3e6, 3e6)])
def test_named_sizes_match_their_parameter_budgets(size, low, high):
    assert low <= parameter_count(build_model(size)) <= high


def test_unknown_size_is_named():
    with pytest.raises(KeyError, match="huge"):
        build_model("huge")


def test_same_seed_same_init_and_different_seed_differs():
    a, b, c = build_model("nano", 1), build_model("nano", 1), build_model("nano", 2)
    for (_, x), (_, y), (_, _z) in zip(iter_tensors(a), iter_tensors(b), iter_tensors(c), strict=True):
        assert torch.equal(x, y)
    assert not all(torch.equal(x, z) for (_, x), (_, z) in zip(iter_tensors(a), iter_tensors(c), strict=True))


def test_digest_is_stable_and_sensitive_to_every_field():
    cfg = RunConfig()
    assert cfg.digest() == RunConfig().digest()
    assert cfg.digest() != dataclasses.replace(cfg, seed=1).digest()
    assert cfg.digest() != dataclasses.replace(cfg, optim=OptimConfig(lr=2e-6)).digest()
    assert cfg.digest() != RunConfig(init=RunConfig()).digest()


def test_bad_config_values_are_named():
    with pytest.raises(ValueError, match="OptimConfig.lr"):
        OptimConfig(lr=0)
    with pytest.raises(ValueError, match="SourceConfig.group_size"):
        SourceConfig(group_size=0)
    with pytest.raises(ValueError, match="snapshot_steps"):
        RunConfig(steps=10, snapshot_steps=(20,))


def test_checkpoint_folder_streams_tied_weights_once(tmp_path):
    model = build_model("nano")
    save_state(model, tmp_path / "model.safetensors")
    names = tensor_names(tmp_path)
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    loaded = dict(iter_tensors(tmp_path))
    for name, t in iter_tensors(model):
        assert torch.equal(loaded[name], t)
    with pytest.raises(KeyError, match="nope"):
        list(iter_tensors(tmp_path, names=["nope"]))
