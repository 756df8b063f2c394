"""The real-model / real-data path on tiny local fixtures in the same formats (no hub)."""

import json

import pytest

from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
from opsft.data.real import RealProblem, load_examples
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.rewards import reward
from opsft.runs import run

DEEPMATH = [{"question": "What is 2+3?", "final_answer": "5", "difficulty": 1.0, "topic": "arith",
             "r1_solution_1": "2+3=5 so \\boxed{5}"},
            {"question": "What is 7-4?", "final_answer": "3", "difficulty": 1.0, "topic": "arith",
             "r1_solution_1": "\\boxed{3}"}]
DAPO = [{"data_source": "math_dapo", "prompt": [{"role": "user", "content": "Compute 1/2+1/4."}],
         "ability": "MATH", "reward_model": {"ground_truth": "3/4", "style": "rule"}, "extra_info": {"index": "0"}}]
EURUS = [{"data_source": "taco", "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Echo."}],
          "ability": "coding", "reward_model": {"style": "rule", "ground_truth": json.dumps({"inputs": ["1\n"],
                                                                                           "outputs": ["1\n"]})}}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_each_schema_is_read_into_prompts_and_golds(tmp_path):
    deepmath = load_examples(write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH))
    assert deepmath[0].key == RealProblem("5") and deepmath[0].completion.endswith("\\boxed{5}")
    assert "\\boxed{}" in deepmath[0].prompt
    dapo = load_examples(write_jsonl(tmp_path / "dapo.jsonl", DAPO))
    assert dapo[0].prompt == "Compute 1/2+1/4." and dapo[0].key.answer == "3/4"
    eurus = load_examples(write_jsonl(tmp_path / "eurus.jsonl", EURUS))
    assert eurus[0].prompt == "Echo." and eurus[0].key.kind == "code" and eurus[0].key.tests["inputs"] == ["1\n"]
    written = load_examples(write_jsonl(tmp_path / "traj.jsonl", [{"prompt": "p", "completion": "\\boxed{5}",
                                                                   "answer": "5"}]))
    assert written[0].completion == "\\boxed{5}" and written[0].key == RealProblem("5")


def test_parquet_reads_like_jsonl(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame(DEEPMATH).to_parquet(tmp_path / "d.parquet")
    assert load_examples(tmp_path / "d.parquet") == load_examples(write_jsonl(tmp_path / "d.jsonl", DEEPMATH))


def test_bad_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_examples(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "final_answer": "1"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_examples(bad)
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"text": "x"}])
    with pytest.raises(KeyError, match=r"odd.jsonl: row 1: unknown schema"):
        load_examples(odd)


def test_real_math_rewards_use_math_verify_and_real_code_rewards_refuse():
    assert reward(RealProblem("3/4"), "so \\boxed{\\frac{3}{4}}") == 1.0
    assert reward(RealProblem("3/4"), "so \\boxed{0.7}") == 0.0
    with pytest.raises(ValueError, match="evalplus"):
        reward(RealProblem("", kind="code", tests={}), "print(1)")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["static", "rollout"])
def test_a_run_trains_a_local_hf_model_folder_on_a_local_file(tmp_path, kind):
    folder = tmp_path / "model"
    build_model("nano").save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    data = write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH)
    config = RunConfig(init=str(folder), objective=ObjectiveConfig(name="sft" if kind == "static" else "grpo"),
                       source=SourceConfig(kind=kind, dataset_path=str(data), n_problems=2, batch_size=2,
                                           prompts_per_step=2, group_size=2, max_new_tokens=8),
                       optim=OptimConfig(lr=1e-3), steps=2)
    result = run(config, cache=tmp_path / "cache")
    assert [m["step"] for m in result.metrics] == [1, 2]
    assert result.load_model().config.hidden_size == 64
