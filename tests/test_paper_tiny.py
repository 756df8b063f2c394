"""The paper scale's path on CPU (``--scale paper-tiny``): the stand-in model folders and data in the real
formats, recipe runs as the claims' arms, OPD from a teacher folder, the plan, and the paper evaluators' tasks."""

import dataclasses
import json
import os

import pytest

from ablations.claims import RECIPE_CLAIMS, is_recipe_scale, scale_profile, skip_reason
from opsft.claims.arms import baseline, opsft_arm
from opsft.config import RunConfig
from opsft.data.real import load_examples, read_rows
from opsft.evals.benchmarks import BOXED_SUFFIX
from opsft.evals.generation import Sampling
from opsft.evals.lm_eval_adapter import generation_kwargs
from opsft.evals.paper import math_task
from opsft.paper_tiny import DEEPMATH, STUDENT, TEACHER, write_stand_ins
from opsft.plan import build_plan
from opsft.recipes import EvalSettings, RecipeError, load_recipe, validate
from opsft.runs import opd_teacher

SCALE = scale_profile("paper-tiny")


@pytest.fixture
def roots(cache_env):
    """The stand-ins, written into the session's test cache (where a recipe scale's arms find them)."""
    return write_stand_ins(cache_env)


def test_the_stand_ins_are_hf_folders_with_sharded_weights_and_deepmath_rows(roots):
    for name in (STUDENT, TEACHER):
        folder = os.path.join(roots["OPSFT_MODELS"], name)
        index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
        assert len(set(index["weight_map"].values())) >= 2, f"{name}: not sharded"
        assert json.load(open(os.path.join(folder, "config.json")))["architectures"] == ["Qwen3ForCausalLM"]
    rows = read_rows(os.path.join(roots["OPSFT_DATA"], DEEPMATH))
    assert {"question", "final_answer", "r1_solution_1", "difficulty", "topic"} <= rows[0].keys()
    example = load_examples(os.path.join(roots["OPSFT_DATA"], DEEPMATH), limit=1)[0]
    assert example.completion and example.key.answer == rows[0]["final_answer"]
    validate(load_recipe("paper-tiny", roots), world_size=1)


def test_the_stand_ins_are_written_once(roots, cache_env):
    index = os.path.join(roots["OPSFT_MODELS"], STUDENT, "model.safetensors.index.json")
    before = os.stat(index).st_mtime_ns
    assert write_stand_ins(cache_env) == roots and os.stat(index).st_mtime_ns == before
    assert not [p for p in os.listdir(cache_env / "paper-tiny") if p.startswith(".")]  # no half-written folder


def test_an_opd_run_distils_the_recipes_teacher_unless_it_names_its_own(roots, tmp_path):
    recipe = load_recipe("paper-tiny", roots)
    assert recipe.runs["opd"].teacher == os.path.join(roots["OPSFT_MODELS"], TEACHER)
    assert recipe.runs["sft"].teacher is None and recipe.runs["grpo"].teacher is None
    own = tmp_path / "own.toml"
    own.write_text('name = "own"\nteacher = "/recipe/teacher"\n[defaults]\ninit = "/m"\n'
                   '[runs.opd]\nobjective.name = "opd"\nsource.kind = "rollout"\nteacher = "/run/teacher"\n')
    assert load_recipe(own, {}).runs["opd"].teacher == "/run/teacher"


def test_opd_from_a_folder_needs_a_teacher_folder(roots):
    config = dataclasses.replace(load_recipe("paper-tiny", roots).runs["opd"], teacher=None)
    with pytest.raises(ValueError, match="RunConfig.teacher"):
        opd_teacher(config, None)
    with pytest.raises(FileNotFoundError, match="/no/such/teacher"):
        opd_teacher(dataclasses.replace(config, teacher="/no/such/teacher"), None)


def test_a_field_added_later_keeps_every_earlier_digest(native_numerics):
    # The digests at d97ae45, before OrganismSpec.pretrain_length_chunks existed (and equal to 6d0347f's, before
    # RunConfig.teacher existed): unset, a later field is left out of the digest. The micro organism's recipe
    # changed after d97ae45, so its runs' digests moved on purpose; nano's did not.
    assert RunConfig(organism="nano").digest() == "2211475f82ba02e9"
    assert RunConfig(init=RunConfig(organism="nano"), organism="nano").digest() == "d4899a5f3f9c067c"
    assert "teacher" not in RunConfig().to_dict()
    assert RunConfig(teacher="/t").digest() != RunConfig().digest()


def test_the_claims_arms_at_a_recipe_scale_are_the_recipes_runs(roots, monkeypatch):
    assert is_recipe_scale(SCALE) and not is_recipe_scale(scale_profile("regime"))
    assert skip_reason("C02", "paper-tiny", SCALE) is None and "C02" in RECIPE_CLAIMS
    assert "only C02, C16, X04 run" in skip_reason("C03", "paper-tiny", SCALE)
    assert skip_reason("C03", "ci", scale_profile("ci")) is None
    recipe = load_recipe("paper-tiny", roots)
    grpo = baseline("grpo", SCALE, 1)
    assert grpo == dataclasses.replace(recipe.runs["grpo"], seed=1) and not grpo.uses_organism()
    assert grpo.model_label() == STUDENT
    monkeypatch.setenv("OPSFT_RECIPE", "opsft-qwen3-8b")
    monkeypatch.delenv("OPSFT_MODELS", raising=False)
    with pytest.raises(RecipeError, match="OPSFT_MODELS"):
        baseline("sft", scale_profile("paper"), 0)


def test_the_plan_at_paper_tiny_holds_the_recipe_runs_and_no_organism(roots):
    """C02's OPSFT arm is the recipe's runs.opsft (its fp32 rule and v at step 4 of runs.grpo)."""
    plan = build_plan("paper-tiny")
    sft, grpo = baseline("sft", SCALE, 0), baseline("grpo", SCALE, 0)
    c02 = {r.key for r in plan.runs.values() if "C02 seed0" in r.needed_by}
    opsft = opsft_arm(sft, grpo, SCALE)
    assert c02 == {sft.digest(), grpo.digest(), opsft.digest()}
    recipe_opsft = load_recipe("paper-tiny", roots).runs["opsft"]  # the recipe's own OPSFT, as it states it
    assert opsft == recipe_opsft and opsft.constraint.rule == "fp32" and opsft.constraint.direction_step == 4
    assert plan.organisms == set() and {r.config.model_label() for r in plan.runs.values()} == {STUDENT}
    assert {label.split()[0] for r in plan.runs.values() for label in r.needed_by} == set(RECIPE_CLAIMS)


def test_a_benchmark_task_asks_for_a_boxed_answer_and_keeps_the_first_problems():
    settings = EvalSettings(limit=3)
    task = math_task("aime24", settings.protocol(), settings.limit)
    assert len(task.rows) == 3 and all(row["prompt"].endswith(BOXED_SUFFIX) for row in task.rows)
    assert generation_kwargs(Sampling(k=2, temperature=0.6), until=())["until"] == []
    for bad, match in (({"code": ("humaneval",)}, "unknown code benchmarks"), ({"limit": 0}, "limit must be")):
        with pytest.raises(ValueError, match=match):
            EvalSettings(**bad)


def test_only_the_engine_settings_that_change_the_samples_are_digested(roots):
    from opsft.config import EngineSettings

    grpo = load_recipe("paper-tiny", roots).runs["grpo"]
    engine = dataclasses.replace(grpo, rollout_engine=EngineSettings())
    assert engine.digest() != grpo.digest()  # vLLM samples differ from HF generate's
    roomier = dataclasses.replace(grpo, rollout_engine=EngineSettings(gpu_memory_utilization=0.6, enforce_eager=True))
    assert roomier.digest() == engine.digest()
    assert roomier.to_dict()["rollout_engine"]["gpu_memory_utilization"] == "0.6"  # stored with the run all the same
    assert dataclasses.replace(grpo, rollout_engine=EngineSettings(dtype="float16")).digest() != engine.digest()


def test_a_model_folder_replaced_at_the_same_path_is_another_run(roots, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(os.path.join(roots["OPSFT_MODELS"], STUDENT), folder)
    config = RunConfig(init=str(folder))
    before = config.digest()
    (folder / "config.json").write_text(json.dumps({**json.load(open(folder / "config.json")), "num_hidden_layers": 9}))
    assert config.digest() != before
    after_config = config.digest()
    shard = sorted(folder.glob("*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes() + b"\0")
    assert config.digest() != after_config
    assert RunConfig(init=str(tmp_path / "absent")).digest() != before  # a missing folder is fingerprinted too


def test_mbpp_plus_scores_the_program_evalplus_extracts_from_a_greedy_completion(monkeypatch):
    import opsft.evals.paper as paper
    from opsft.evals.evalplus_adapter import load_mbpp_plus

    problems = list(load_mbpp_plus().values())[:2]
    chat = {problems[0]["prompt"]: "Here it is:\n```python\n" + problems[0]["canonical_solution"] + "\n```\n"}
    direct = {problems[1]["prompt"]: problems[1]["canonical_solution"] + "\n\n\nprint(1/0"}  # a base model rambles on
    answers = {**chat, **direct}

    def fake_generate(model, tokenizer, prompts, sampling):
        assert sampling.k == 1 and sampling.temperature == 0.0
        return [[answers.get(prompt, "@@ not code")] for prompt in prompts]

    monkeypatch.setattr(paper, "generate", fake_generate)
    assert paper.code_problem_scores(None, None, 64, limit=2) == [1.0, 1.0]
    answers.clear()
    assert paper.code_problem_scores(None, None, 64, limit=2) == [0.0, 0.0]
