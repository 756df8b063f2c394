"""The lm-eval adapter on an in-memory organism model and local tasks written at test time."""

import pytest

from opsft.evals.generation import Sampling, generate
from opsft.evals.lm_eval_adapter import (
    LocalTask,
    dataset_cached,
    generation_kwargs,
    logged_samples,
    write_local_tasks,
)
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer


@pytest.fixture(autouse=True)
def _private_caches(tmp_path, monkeypatch):
    for var in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))


@pytest.fixture(scope="module")
def nano():
    return build_model("nano", seed=0), build_tokenizer()


def _tasks():
    gen = tuple({"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(6))
    mc = tuple({"prompt": f"{i}+1=", "choices": [f"\\boxed{{{i + 1}}}", f"\\boxed{{{i + 9}}}"], "label": 0}
               for i in range(6))
    return [LocalTask("t_gen", "math_verify", gen), LocalTask("t_em", "exact_match", gen),
            LocalTask("t_mc", "multiple_choice", mc)]


def test_local_tasks_run_on_an_in_memory_model_with_all_k_samples(nano, tmp_path):
    from opsft.evals.lm_eval_adapter import run_lm_eval

    model, tok = nano
    folder = write_local_tasks(_tasks(), tmp_path / "tasks", Sampling(k=3, temperature=1.0, max_new_tokens=6))
    rows = run_lm_eval(model, tok, ["t_gen", "t_em", "t_mc"], include_path=folder, batch_size=32)
    by_key = {(r["task"], r["metric"]): r for r in rows}
    assert {("t_gen", "avg_at_k"), ("t_gen", "pass_at_k"), ("t_em", "maj_at_k"), ("t_mc", "acc")} <= set(by_key)
    assert by_key[("t_gen", "avg_at_k")]["k"] == 3 and by_key[("t_mc", "acc")]["n"] == 6
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)
    assert not (tmp_path / "hf_home").exists()  # the datasets cache stayed inside the task folder


def test_keep_all_samples_filter_feeds_every_repeat_to_the_metrics():
    import importlib.util

    from opsft.evals.paths import evals_root

    spec = importlib.util.spec_from_file_location("lm_utils", evals_root() / "lm_eval_tasks" / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    kept = utils.keep_all_samples([["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"]], [{"answer": "4"}])
    metrics = utils.process_math_verify({"answer": "4"}, kept)
    assert metrics == {"avg_at_k": pytest.approx(2 / 3), "pass_at_k": 1.0, "maj_at_k": 1.0}
    assert utils.process_exact_match({"answer": "4"}, [["\\boxed{4.0}"]])["avg_at_k"] == 0.0


def test_bad_rows_and_templates_are_named(tmp_path):
    with pytest.raises(ValueError, match="'t_mc', row 0: missing field.*label"):
        write_local_tasks([LocalTask("t_mc", "multiple_choice", ({"prompt": "1", "choices": ["a"]},))],
                          tmp_path, Sampling())
    with pytest.raises(ValueError, match="unknown template"):
        write_local_tasks([LocalTask("t", "nope", ())], tmp_path, Sampling())


def test_logged_samples_come_in_document_order_and_must_cover_every_document():
    out = {"samples": {"t": [{"doc_id": 1, "acc": 0.0}, {"doc_id": 0, "acc": 1.0}]}}
    assert [s["acc"] for s in logged_samples(out, "t", 2)] == [1.0, 0.0]
    with pytest.raises(RuntimeError, match="2 samples for the 3 documents of t"):
        logged_samples(out, "t", 3)


def test_generation_settings_map_to_lm_eval_kwargs():
    assert generation_kwargs(Sampling(max_new_tokens=7))["do_sample"] is False
    sampled = generation_kwargs(Sampling(k=2, temperature=0.7, top_p=0.9, max_new_tokens=7))
    assert sampled["temperature"] == 0.7 and sampled["top_p"] == 0.9 and sampled["max_gen_toks"] == 7


def test_real_tasks_without_local_data_are_skipped_without_download(monkeypatch):
    from opsft.evals import lm_eval_adapter

    assert not dataset_cached("allenai/ai2_arc")
    monkeypatch.setattr(lm_eval_adapter, "run_lm_eval", lambda *a, **k: pytest.fail("must not run"))
    rows = lm_eval_adapter.run_real_tasks(None, None, ["arc_challenge", "halueval"])
    assert [r["metric"] for r in rows] == [
        "skipped: no local data for arc_challenge (allenai/ai2_arc not in the local datasets cache)",
        "skipped: task halueval is not in lm-eval's registry",
    ]


def test_generate_returns_k_completions_per_prompt_and_is_seeded(nano):
    model, tok = nano
    sampling = Sampling(k=3, temperature=1.0, max_new_tokens=5, batch_size=4)
    first = generate(model, tok, ["1+1=", "22+3=", "4-4="], sampling)
    assert [len(g) for g in first] == [3, 3, 3]
    assert generate(model, tok, ["1+1=", "22+3=", "4-4="], sampling) == first
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0)
