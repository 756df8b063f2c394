"""Paper recipes: the papers' settings as loaded RunConfigs, and validation of local folders, files,
architectures and world sizes on tiny fixtures (nothing is downloaded, no weights are read)."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_real_data import DAPO, DEEPMATH, write_jsonl

from opsft.cli import main
from opsft.config import RunConfig
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.recipes import RECIPES_DIR, RecipeError, load_recipe, validate

OPSFT_RECIPES = ("opsft-qwen3-1.7b", "opsft-qwen3-4b", "opsft-qwen3-8b")
MODELS = ("Qwen3-1.7B", "Qwen3-4B", "Qwen3-8B", "Qwen3-8B-Base", "Qwen3-30B-A3B", "Qwen3-32B")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny Qwen3 folder as save_pretrained writes it (config.json, model.safetensors, tokenizer files)."""
    folder = tmp_path_factory.mktemp("tiny") / "model"
    build_model("nano").save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def roots(tmp_path, tiny_model):
    """OPSFT_MODELS / OPSFT_DATA folders holding every model and dataset the shipped recipes name."""
    models, data = tmp_path / "models", tmp_path / "data"
    for name in MODELS:
        shutil.copytree(tiny_model, models / name)
    (data / "deepmath-103k").mkdir(parents=True)
    pd.DataFrame(DEEPMATH).to_parquet(data / "deepmath-103k" / "train.parquet")
    (data / "dapo-math-17k").mkdir()
    pd.DataFrame(DAPO).to_parquet(data / "dapo-math-17k" / "train.parquet")
    (data / "trajectories").mkdir()
    write_jsonl(data / "trajectories" / "deepmath-qwen3-30b-a3b.jsonl", DEEPMATH)  # static rows with trajectories
    (data / "dolci-think-sft").mkdir()
    write_jsonl(data / "dolci-think-sft" / "train.jsonl", DEEPMATH)
    return {"OPSFT_MODELS": str(models), "OPSFT_DATA": str(data)}


def test_the_opsft_recipes_state_the_papers_schedule(roots):
    recipe = load_recipe("opsft-qwen3-8b", roots)
    runs = recipe.runs
    assert list(runs) == ["grpo", "opd", "sft", "dft", "opsft", "sft_continued", "opsft_continued"]
    # "GRPO 100 steps; SFT 700, DFT 700; OPSFT: 50 GRPO steps fix v, then 100 constrained SFT steps"
    assert (runs["grpo"].steps, runs["sft"].steps, runs["dft"].steps, runs["opsft"].steps) == (100, 700, 700, 100)
    assert runs["grpo"].objective.name == "grpo" and runs["dft"].objective.name == "dft"
    con = runs["opsft"].constraint
    assert con.mode == "sign" and con.direction_run is runs["grpo"] and con.direction_step == 50
    assert 50 in runs["grpo"].snapshot_steps
    # continued training starts from the GRPO model and keeps its final v
    assert runs["sft_continued"].init is runs["grpo"] and runs["opsft_continued"].init is runs["grpo"]
    assert runs["opsft_continued"].constraint.direction_step is None and runs["sft_continued"].constraint.mode == "none"
    # "data DeepMath", "teacher Qwen3-30B-A3B", the four benchmarks, Acc@8
    assert runs["grpo"].init == f"{roots['OPSFT_MODELS']}/Qwen3-8B"
    assert runs["grpo"].source.dataset_path == f"{roots['OPSFT_DATA']}/deepmath-103k/train.parquet"
    assert recipe.teacher == f"{roots['OPSFT_MODELS']}/Qwen3-30B-A3B"
    assert runs["sft"].source.dataset_path == recipe.trajectories.output and runs["sft"].source.kind == "static"
    assert recipe.eval.benchmarks == ("aime24", "aime25", "hmmt25_feb", "hmmt25_nov") and recipe.eval.k == 8
    assert recipe.sampler.backend == "vllm"


def test_the_three_opsft_recipes_differ_only_in_the_student(roots):
    def without_student(name):
        recipe = load_recipe(name, roots)
        text = json.dumps({n: c.to_dict() for n, c in recipe.runs.items()}, sort_keys=True)
        student = recipe.runs["grpo"].init
        return text.replace(json.dumps(student), '"<student>"'), student

    (a, sa), (b, sb), (c, sc) = (without_student(n) for n in OPSFT_RECIPES)
    assert a == b == c and len({sa, sb, sc}) == 3


def test_the_geometry_recipe_states_its_hyper_parameters(roots):
    runs = load_recipe("geo-qwen3-8b", roots).runs
    anchor, opd, rlvr = runs["sft_anchor"], runs["opd"], runs["rlvr"]
    # SFT anchor: "lr 1e-5 cosine to 1e-6, 10% warmup, AdamW wd 0.1 betas (0.9, 0.95)", batch 256, iter 5375
    assert (anchor.optim.lr, anchor.optim.schedule) == (1e-5, "cosine")
    assert anchor.optim.min_lr_ratio * anchor.optim.lr == pytest.approx(1e-6, rel=1e-12)
    assert (anchor.optim.warmup_frac, anchor.optim.weight_decay, anchor.optim.betas) == (0.1, 0.1, (0.9, 0.95))
    assert (anchor.source.batch_size, anchor.steps) == (256, 5375) and anchor.init.endswith("/Qwen3-8B-Base")
    # OPD: 8 samples/prompt, temperature 1.0, lr 1e-6 constant, wd 0.1 betas (0.9, 0.98), 300 steps, from the anchor
    assert opd.objective.name == "opd" and opd.init is anchor and opd.steps == 300
    assert (opd.source.group_size, opd.source.temperature) == (8, 1.0)
    assert (opd.optim.lr, opd.optim.schedule, opd.optim.weight_decay, opd.optim.betas) == (1e-6, "constant", 0.1, (0.9, 0.98))
    assert opd.snapshot_steps == (64, 128, 192, 256)  # iterations 63/127/191/255, then the final 300
    assert opd.source.prompts_per_step * opd.source.group_size == 64  # "global batch size 64"
    # RLVR: clip 0.2 / 0.28, lr 1e-6, ~1k steps, Adam epsilon 1e-15, global batch 512
    assert (rlvr.objective.eps_low, rlvr.objective.eps_high, rlvr.optim.lr, rlvr.optim.eps) == (0.2, 0.28, 1e-6, 1e-15)
    assert rlvr.steps == 1024 and rlvr.source.prompts_per_step * rlvr.source.group_size == 512
    assert rlvr.source.dataset_path.endswith("dapo-math-17k/train.parquet")


def test_shipped_recipes_validate_on_tiny_local_fixtures(roots):
    for name in (*OPSFT_RECIPES, "geo-qwen3-8b"):
        validate(load_recipe(name, roots), world_size=8)


def test_validation_reads_no_weights(roots):
    folder = roots["OPSFT_MODELS"] + "/Qwen3-8B"
    with open(f"{folder}/model.safetensors", "wb") as fh:
        fh.write(b"not a safetensors file")  # loading it would fail; validation only looks at config.json
    validate(load_recipe("opsft-qwen3-8b", roots), world_size=1)


def problems_of(recipe, world_size=1, **kwargs):
    with pytest.raises(RecipeError) as err:
        validate(recipe, world_size, **kwargs)
    return str(err.value)


def test_missing_folders_files_and_shards_are_named_with_their_keys(roots):
    models, data = roots["OPSFT_MODELS"], roots["OPSFT_DATA"]
    shutil.rmtree(f"{models}/Qwen3-8B")
    data_file = Path(f"{data}/deepmath-103k/train.parquet")
    data_file.unlink()
    text = problems_of(load_recipe("opsft-qwen3-8b", roots))
    assert f"runs.grpo.init = '{models}/Qwen3-8B': no such folder" in text
    assert f"runs.grpo.source.dataset_path = '{data_file}': no such file" in text
    assert f"trajectories.dataset_path = '{data_file}'" in text
    # a sharded model whose index names a shard that was never downloaded
    folder = f"{models}/Qwen3-4B"
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    with open(f"{folder}/model.safetensors.index.json", "w") as fh:
        json.dump(index, fh)
    shutil.move(f"{folder}/model.safetensors", f"{folder}/model-00001-of-00002.safetensors")
    text = problems_of(load_recipe("opsft-qwen3-4b", roots))
    assert f"runs.grpo.init = '{folder}': 1 of 2 weight shards are missing (first: model-00002-of-00002.safetensors)" in text


def edit_config(folder, **changes):
    """Rewrite a model folder's config.json with some fields changed."""
    path = Path(folder) / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_an_architecture_the_trainer_does_not_support_is_refused_from_config_json(roots):
    folder = roots["OPSFT_MODELS"] + "/Qwen3-1.7B"
    edit_config(folder, architectures=["MambaForCausalLM"], model_type="mamba")
    text = problems_of(load_recipe("opsft-qwen3-1.7b", roots))
    assert f"runs.grpo.init = '{folder}': architecture 'MambaForCausalLM' is not one the trainer supports" in text
    edit_config(folder, model_type="no-such-model")
    assert "model_type 'no-such-model' is not a causal LM" in problems_of(load_recipe("opsft-qwen3-1.7b", roots))
    # a teacher is only sampled: a mixture-of-experts causal LM is fine there
    edit_config(roots["OPSFT_MODELS"] + "/Qwen3-30B-A3B", architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe")
    validate(load_recipe("opsft-qwen3-8b", roots))


def test_a_world_size_that_does_not_split_the_batch_is_refused_before_any_gpu_work(roots):
    text = problems_of(load_recipe("opsft-qwen3-8b", roots), world_size=3)
    assert "runs.grpo.source: world size 3 does not divide the prompts per step" in text
    assert "runs.sft.source: world size 3 does not divide the global batch size" in text
    with pytest.raises(RecipeError, match="world size must be >= 1"):
        validate(load_recipe("opsft-qwen3-8b", roots), 0)


def test_an_opd_teacher_with_another_vocabulary_is_refused(roots):
    edit_config(roots["OPSFT_MODELS"] + "/Qwen3-32B", vocab_size=151936)
    assert "vocab_size 151936 differs from the student's" in problems_of(load_recipe("geo-qwen3-8b", roots))


def write_recipe(tmp_path, text, name="r.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


MINIMAL = """
name = "t"
[defaults]
init = "${OPSFT_MODELS}/Qwen3-8B"
source.dataset_path = "${OPSFT_DATA}/deepmath-103k/train.parquet"
source.kind = "rollout"
[runs.grpo]
steps = 10
objective.name = "grpo"
"""


@pytest.mark.parametrize("extra, message", [
    ("[runs.bad]\nstpes = 3\n", "runs.bad.stpes is not a setting of RunConfig"),
    ("[runs.bad]\noptim.learning_rate = 3\n", "runs.bad.optim.learning_rate is not a setting of OptimConfig"),
    ("[runs.bad]\nlike = \"nope\"\n", "runs.bad.like = 'nope' names no run"),
    ("[runs.bad]\ninit = \"runs.nope\"\n", "runs.bad.init = 'runs.nope' names no run"),
    ("[runs.bad]\ninit = \"runs.bad\"\n", "runs.bad depends on itself"),
    ("[runs.bad]\nsteps = 0\n", "runs.bad: RunConfig.steps must be >= 1"),
    ("[runs.bad]\nconstraint.mode = \"sign\"\n", "needs direction_run"),
    ("[runs.bad]\nsource.dataset_path = \"${NOT_SET_ANYWHERE}/x\"\n", "runs.bad.source.dataset_path = '${NOT_SET_ANYWHERE}/x' uses"),
    ("[sampler]\nbackend = \"tgi\"\n", "sampler: backend must be hf|vllm"),
    ("[eval]\nbenchmarks = [\"gsm8k\"]\n", "unknown benchmarks ['gsm8k']"),
    ("typo = 1\n", "unknown top-level key 'typo'"),
])
def test_recipe_mistakes_are_named_by_key(tmp_path, roots, extra, message):
    path = write_recipe(tmp_path, extra + MINIMAL if extra.startswith("typo") else MINIMAL + extra)
    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(path, roots)


def test_an_unset_root_variable_names_the_key_and_the_flag(tmp_path):
    with pytest.raises(RecipeError, match=r"defaults.init = '\$\{OPSFT_MODELS\}/Qwen3-8B' uses \$\{OPSFT_MODELS\}, "
                                          r"which is not set \(export OPSFT_MODELS=..., or pass --models DIR to an "
                                          r"opsft recipe command\)"):
        load_recipe(write_recipe(tmp_path, MINIMAL), {})


def test_a_constraint_on_a_snapshot_its_direction_run_never_saves_is_refused(tmp_path, roots):
    text = MINIMAL + '[runs.opsft]\nconstraint = { mode = "sign", direction_run = "runs.grpo", direction_step = 5 }\n'
    recipe = load_recipe(write_recipe(tmp_path, text), roots)
    assert isinstance(recipe.runs["opsft"].constraint.direction_run, RunConfig)
    assert "runs.opsft.constraint.direction_step = 5: runs.grpo saves snapshots only at steps [10]" in problems_of(recipe)


def test_extends_merges_under_the_extending_file_and_loops_are_refused(tmp_path, roots):
    write_recipe(tmp_path, MINIMAL, "base.toml")
    child = load_recipe(write_recipe(tmp_path, 'extends = "base.toml"\nname = "child"\n[runs.grpo]\nsteps = 20\n'), roots)
    assert child.name == "child" and child.runs["grpo"].steps == 20 and child.runs["grpo"].objective.name == "grpo"
    write_recipe(tmp_path, 'extends = "b.toml"\nname = "a"', "a.toml")
    write_recipe(tmp_path, 'extends = "a.toml"\nname = "b"', "b.toml")
    with pytest.raises(RecipeError, match="'extends' loops through a.toml -> b.toml -> a.toml"):
        load_recipe(tmp_path / "a.toml", roots)


def test_every_shipped_recipe_is_listed_and_the_cli_shows_and_validates(roots, capsys):
    assert {p.stem for p in RECIPES_DIR.glob("*.toml")} == {"_opsft-deepmath", *OPSFT_RECIPES, "geo-qwen3-8b",
                                                               "paper-tiny"}
    flags = ["--models", roots["OPSFT_MODELS"], "--data", roots["OPSFT_DATA"]]
    assert main(["recipe", "show", "opsft-qwen3-4b", *flags]) == 0
    out = capsys.readouterr().out
    assert "| opsft | " in out and "sign, v of runs.grpo at step 50 (fp32)" in out and "/Qwen3-4B" in out
    assert main(["recipe", "show", "geo-qwen3-8b", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["opd"]["steps"] == 300
    assert main(["recipe", "validate", "opsft-qwen3-4b", "--world-size", "4", *flags]) == 0
    assert "7 run(s) ready for 4 process(es)" in capsys.readouterr().out
    assert main(["recipe", "validate", "opsft-qwen3-4b", "--world-size", "3", "--run", "sft", *flags]) == 1
    out = capsys.readouterr().out
    assert "runs.sft.source: world size 3" in out and "runs.grpo" not in out
    assert main(["recipe", "show", "no-such-recipe"]) == 1
    assert "known: geo-qwen3-8b, opsft-qwen3-1.7b" in capsys.readouterr().out


@pytest.mark.slow
def test_the_cli_writes_a_recipes_teacher_trajectories(tmp_path, tiny_model, capsys):
    data = write_jsonl(tmp_path / "deepmath.jsonl", DEEPMATH)
    text = f"""
name = "t"
teacher = "{tiny_model}"
[sampler]
backend = "vllm"
[trajectories]
dataset_path = "{data}"
output = "{tmp_path}/out/traj.jsonl"
n_problems = 1
params = {{ k = 2, max_new_tokens = 8 }}
[runs.sft]
init = "{tiny_model}"
source.dataset_path = "{data}"
"""
    path = write_recipe(tmp_path, text)
    assert main(["recipe", "trajectories", str(path), "--backend", "hf"]) == 0
    assert f"wrote {tmp_path}/out/traj.jsonl" in capsys.readouterr().out
    prov = json.loads((tmp_path / "out" / "traj.jsonl.provenance.json").read_text())
    assert prov["counts"]["samples"] == 2 and prov["sampler"] == "HFSampler"


def test_a_vllm_recipes_rollout_runs_sample_through_an_engine_built_from_their_model_folder(roots, monkeypatch):
    import opsft.sampling.vllm as vllm_module
    from opsft.runs import make_source, run_tokenizer
    from opsft.sampling.vllm import VLLMSampler

    recipe = load_recipe("opsft-qwen3-8b", roots)
    assert recipe.sampler.backend == "vllm"
    runs = recipe.runs
    assert runs["grpo"].rollout_engine == runs["opd"].rollout_engine == recipe.sampler.engine
    assert runs["sft"].rollout_engine is None and runs["opsft"].rollout_engine is None  # static data: no rollouts
    built = []
    monkeypatch.setattr(vllm_module, "build_engine", lambda folder, settings: built.append((folder, settings)) or "llm")
    grpo = runs["grpo"]
    source = make_source(grpo, build_model("nano"), None, run_tokenizer(grpo))
    assert isinstance(source.sampler, VLLMSampler) and source.sampler.llm == "llm" and source.sampler.sync_weights
    assert built == [(Path(grpo.init), recipe.sampler.engine)]
