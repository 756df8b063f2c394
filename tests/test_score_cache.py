"""The score cache (opsft.evals.score_cache): a model's scores are computed once per weights, draw and scorer, and
a copy of the same weights reads them back; other weights, another draw, a refresh or a corrupt entry compute."""

import copy

import torch

from opsft.evals.score_cache import FOLDER, cached_scores, model_digest, score_key
from opsft.organism.tokenizer import build_tokenizer

DRAW = {"in_domain": {"family": "arith", "split": "test", "seed": 1, "n": 3}}


def _scorer(calls: list, flags=(1, 0, 1)):
    def compute():
        calls.append(1)
        return {"in_domain": flags}
    return compute


def test_same_weights_are_scored_once_and_a_copy_reads_the_entry(tmp_path):
    tok, model, calls = build_tokenizer(), torch.nn.Linear(3, 2), []
    first = cached_scores(model, tok, DRAW, tmp_path, _scorer(calls))
    again = cached_scores(copy.deepcopy(model), tok, DRAW, tmp_path, _scorer(calls, (0, 0, 0)))
    assert first == again == {"in_domain": [1, 0, 1]} and len(calls) == 1
    assert len(list((tmp_path / FOLDER).glob("*.json"))) == 1


def test_other_weights_another_draw_refresh_and_corruption_compute_again(tmp_path):
    tok, model, calls = build_tokenizer(), torch.nn.Linear(3, 2), []
    cached_scores(model, tok, DRAW, tmp_path, _scorer(calls))
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.weight[0, 0] += 1e-7  # one weight, one ulp-scale change
    assert model_digest(moved, tok) != model_digest(model, tok)
    cached_scores(moved, tok, DRAW, tmp_path, _scorer(calls))
    other = {"in_domain": {**DRAW["in_domain"], "seed": 2}}
    assert score_key(model, tok, other) != score_key(model, tok, DRAW)
    cached_scores(model, tok, other, tmp_path, _scorer(calls))
    assert cached_scores(model, tok, DRAW, tmp_path, _scorer(calls, (0, 0, 0)), refresh=True) == {"in_domain": [0, 0, 0]}
    assert len(calls) == 4
    (tmp_path / FOLDER / f"{score_key(model, tok, DRAW)}.json").write_text("{not json")
    assert cached_scores(model, tok, DRAW, tmp_path, _scorer(calls)) == {"in_domain": [1, 0, 1]} and len(calls) == 5
