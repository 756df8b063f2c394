"""The teacher-trajectories step: verification filter, dataset and provenance files, reuse, local teacher folders."""

import json

import pytest
import torch
from test_real_data import DEEPMATH, EURUS, write_jsonl

from opsft.data.real import RealProblem, load_examples
from opsft.io import file_sha256
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.sampling.base import Rollout
from opsft.sources import Example
from opsft.trajectories import (
    TrajectoryParams,
    extract_program,
    make_trajectories,
    passes_stdio_tests,
    read_trajectories,
    teacher_identity,
    trajectories_from_folder,
)


class ScriptedSampler:
    """A teacher whose samples are scripted per prompt; records every call."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def sample(self, model, prompts, n, temperature, max_new_tokens, seed, top_p=1.0):
        self.calls.append((model, list(prompts), n, temperature, max_new_tokens, seed, top_p))
        texts = [self.script(prompt, j) for prompt in prompts for j in range(n)]
        empty = torch.zeros((len(texts), 1), dtype=torch.long)
        return Rollout(empty, empty, empty, texts)


MATH_SAMPLES = {  # DeepMath fixture: gold 5 and gold 3
    0: ["so \\boxed{4}", "so \\boxed{5}", "so \\boxed{\\frac{10}{2}}"],
    1: ["no box: 3", "\\boxed{2}", "\\boxed{7}"],
}


def math_sampler(examples):
    index = {e.prompt: i for i, e in enumerate(examples)}
    return ScriptedSampler(lambda prompt, j: MATH_SAMPLES[index[prompt]][j])


def test_only_verified_samples_are_kept_and_written_with_provenance(tmp_path):
    examples = load_examples(write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH))
    params = TrajectoryParams(k=3, max_new_tokens=32)
    out = tmp_path / "out" / "traj.jsonl"
    done = make_trajectories(examples, math_sampler(examples), None, out, params,
                             teacher_id={"folder": "/teacher", "digest": "abc"}, source="deepmath.jsonl")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # math-verify on the boxed answer: \boxed{4} wrong, \boxed{5} right (kept, the first), \frac{10}{2} right
    assert [(r["problem"], r["sample"], r["completion"]) for r in rows] == [(0, 1, "so \\boxed{5}")]
    assert rows[0]["answer"] == "5" and rows[0]["kind"] == "math" and rows[0]["prompt"] == examples[0].prompt
    prov = json.loads((tmp_path / "out" / "traj.jsonl.provenance.json").read_text())
    assert prov["counts"] == {"problems": 2, "samples": 6, "verified_samples": 2, "problems_kept": 1, "rows": 1}
    assert prov["teacher"] == {"folder": "/teacher", "digest": "abc"} and prov["sampler"] == "ScriptedSampler"
    assert prov["params"]["k"] == 3 and prov["prompts"]["source"] == "deepmath.jsonl"
    assert prov["sha256"] == {"traj.jsonl": file_sha256(out)} and prov["seconds"] >= 0 and prov["provenance"]["utc"]
    assert done.examples() == [Example(examples[0].prompt, "so \\boxed{5}", RealProblem("5"))]

    every = make_trajectories(examples, math_sampler(examples), None, tmp_path / "all.jsonl",
                              TrajectoryParams(k=3, keep="all"), teacher_id={"digest": "abc"})
    assert [r.completion for r in every.examples()] == ["so \\boxed{5}", "so \\boxed{\\frac{10}{2}}"]


def test_a_matching_provenance_file_is_reused_and_anything_else_resamples(tmp_path, capsys):
    examples = load_examples(write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH))
    sampler, out = math_sampler(examples), tmp_path / "traj.jsonl"

    def make(temperature=1.0, digest="abc"):
        params = TrajectoryParams(k=3, temperature=temperature)
        return make_trajectories(examples, sampler, None, out, params, teacher_id={"digest": digest})

    assert not make().reused and make().reused and len(sampler.calls) == 1
    assert not make(digest="other-teacher").reused and len(sampler.calls) == 2
    assert not make(temperature=0.5).reused and len(sampler.calls) == 3
    out.write_text(out.read_text() + "{}\n")  # a tampered data file no longer matches its recorded checksum
    assert not make(temperature=0.5).reused
    assert "trajectories" in capsys.readouterr().out and len(sampler.calls) == 4


def test_code_is_verified_by_its_stdin_stdout_tests_in_a_child_process():
    tests = json.loads(EURUS[0]["reward_model"]["ground_truth"])  # input "1\n" -> output "1\n"
    doubled = {"inputs": ["1\n", "21\n"], "outputs": ["2\n", "42"]}
    assert passes_stdio_tests("```python\nprint(input())\n```", tests)
    assert passes_stdio_tests("Here:\n```python\nn = int(input())\nprint(n * 2)   \n```\n", doubled)
    assert not passes_stdio_tests("```python\nprint(int(input()) + 2)\n```", doubled)  # wrong on the second case
    assert not passes_stdio_tests("```python\nraise SystemExit(3)\n```", tests)
    assert not passes_stdio_tests("```python\nwhile True: pass\n```", tests, timeout=1.0)
    assert not passes_stdio_tests("print(input())", tests)  # no fenced program
    assert not passes_stdio_tests("```python\nprint(1)\n```", {"inputs": ["1"], "outputs": []})
    assert extract_program("```\na\n```\n```py\nb\n```") == "b\n"


def test_code_rows_keep_their_tests(tmp_path):
    examples = load_examples(write_jsonl(tmp_path / "eurus.jsonl", EURUS))
    sampler = ScriptedSampler(lambda prompt, j: ["```python\nprint(2)\n```", "```python\nprint(input())\n```"][j])
    done = make_trajectories(examples, sampler, None, tmp_path / "code.jsonl", TrajectoryParams(k=2),
                             teacher_id={"digest": "t"})
    [example] = done.examples()
    assert example.key == RealProblem("", kind="code", tests={"inputs": ["1\n"], "outputs": ["1\n"]})
    assert example.completion.endswith("print(input())\n```")


def test_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="needs k, max_new_tokens and batch_size >= 1"):
        TrajectoryParams(k=0)
    with pytest.raises(ValueError, match="keep must be first\\|all"):
        TrajectoryParams(keep="best")
    with pytest.raises(ValueError, match="at least one prompt"):
        make_trajectories([], ScriptedSampler(None), None, tmp_path / "x.jsonl", TrajectoryParams(), teacher_id={})
    with pytest.raises(FileNotFoundError, match="nope"):
        trajectories_from_folder(tmp_path / "nope", tmp_path / "d.jsonl", tmp_path / "o.jsonl", TrajectoryParams())
    (tmp_path / "bad.jsonl").write_text('{"prompt": "p"}\n')
    with pytest.raises(KeyError, match="bad.jsonl:1: trajectory row lacks"):
        read_trajectories(tmp_path / "bad.jsonl")


@pytest.mark.slow
def test_a_local_hf_teacher_folder_writes_trajectories_with_its_digest(tmp_path):
    folder = tmp_path / "teacher"
    build_model("nano", seed=1).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    data = write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH)
    params = TrajectoryParams(k=2, max_new_tokens=8)
    done = trajectories_from_folder(folder, data, tmp_path / "t.jsonl", params, n_problems=1)
    prov = done.provenance
    assert prov["teacher"] == teacher_identity(folder) and prov["teacher"]["folder"] == str(folder.resolve())
    assert prov["sampler"] == "HFSampler" and prov["counts"]["problems"] == 1 and prov["counts"]["samples"] == 2
    assert prov["counts"]["rows"] == len(done.examples())  # an untrained teacher: most likely none verify
    assert trajectories_from_folder(folder, data, tmp_path / "t.jsonl", params, n_problems=1).reused
    with pytest.raises(ValueError, match="backend must be hf\\|vllm"):
        trajectories_from_folder(folder, data, tmp_path / "t.jsonl", params, backend="tgi")
