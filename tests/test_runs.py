"""Runs are values: determinism, the cache, resume after a real kill, corrupt entries, diverged runs."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
from opsft.runs import DivergedRunError, run, snapshot_name

pytestmark = pytest.mark.slow

SFT = RunConfig(
    organism="nano",
    objective=ObjectiveConfig(name="sft"),
    source=SourceConfig(kind="static", family="arith", n_problems=32, batch_size=8, trajectory_source="reference"),
    optim=OptimConfig(lr=1e-3),
    steps=6,
    snapshot_steps=(2, 4),
    checkpoint_every=2,
)
GRPO = RunConfig(
    organism="nano",
    objective=ObjectiveConfig(name="grpo"),
    source=SourceConfig(kind="rollout", family="arith", n_problems=32, prompts_per_step=4, group_size=4,
                        max_new_tokens=12),
    optim=OptimConfig(lr=1e-3),
    steps=4,
    checkpoint_every=2,
)


def final_weights(result):
    return load_file(str(result.snapshot() / "model.safetensors"))


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("config", [SFT, GRPO], ids=["sft", "grpo"])
def test_same_config_and_seed_give_bit_identical_weights(config, tmp_path, cache_env):
    first = run(config, cache=tmp_path / "a")
    second = run(config, cache=tmp_path / "b")
    assert_same(final_weights(first), final_weights(second))
    assert [m["loss"] for m in first.metrics] == [m["loss"] for m in second.metrics]
    assert len(first.metrics) == config.steps


def test_a_cached_run_is_returned_without_training_again(tmp_path, cache_env):
    first = run(SFT, cache=tmp_path)
    stamp = (first.folder / "result.json").stat().st_mtime_ns
    again = run(SFT, cache=tmp_path)
    assert (again.folder / "result.json").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in (first.folder / "snapshots").iterdir()) == [
        "step_000000", "step_000002", "step_000004", "step_000006"]


def test_a_corrupted_snapshot_is_detected_and_the_run_recomputed(tmp_path, cache_env, capsys):
    first = run(SFT, cache=tmp_path)
    good = final_weights(first)
    path = first.snapshot(4) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    again = run(SFT, cache=tmp_path)
    assert "corrupt" in capsys.readouterr().out
    assert_same(final_weights(again), good)


def test_a_killed_run_resumes_to_the_same_final_weights(tmp_path, cache_env):
    config = RunConfig(**{**SFT.__dict__, "steps": 120, "snapshot_steps": (), "checkpoint_every": 5})
    reference = final_weights(run(config, cache=tmp_path / "ref"))
    script = (f"import torch; torch.set_num_threads(1); from pathlib import Path; from opsft.runs import run; "
              f"from opsft.config import *; run({config!r}, cache=Path({str(tmp_path / 'killed')!r}))")
    proc = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    folder = tmp_path / "killed" / "runs" / config.digest()
    deadline = time.time() + 120
    while not (folder / "checkpoint" / "state.pt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (folder / "checkpoint" / "state.pt").exists(), "the child never wrote a checkpoint"
    assert not (folder / "result.json").exists(), "the child finished before it could be killed"
    resumed = run(config, cache=tmp_path / "killed")
    assert_same(final_weights(resumed), reference)
    assert [m["step"] for m in resumed.metrics] == list(range(1, 121))


DIVERGING = RunConfig(**{**SFT.__dict__, "optim": OptimConfig(lr=1e6, grad_clip=0.0)})  # a NaN loss within 6 steps


def test_a_diverging_run_is_cached_as_diverged_with_its_earlier_snapshots_and_never_trained_again(
        tmp_path, cache_env, monkeypatch):
    result = run(DIVERGING, cache=tmp_path)
    step = result.diverged
    assert step is not None and 1 <= step <= DIVERGING.steps
    manifest = json.loads((result.folder / "result.json").read_text())
    assert manifest["diverged_at_step"] == step and "non-finite loss" in manifest["divergence"]
    assert result.metrics[-1]["step"] == step and not math.isfinite(result.metrics[-1]["loss"])
    kept = [snapshot_name(s) for s in (0, 2, 4) if s < step]
    assert sorted(p.name for p in (result.folder / "snapshots").iterdir()) == kept
    assert (result.folder / "checkpoint" / "state.pt").is_file() == (step > DIVERGING.checkpoint_every)
    result.load_model(0)  # the weights before the divergence stay readable by their step
    with pytest.raises(DivergedRunError, match=f"run {DIVERGING.digest()} diverged at step {step}") as err:
        result.load_model()
    assert (err.value.digest, err.value.step) == (DIVERGING.digest(), step)
    monkeypatch.setattr("opsft.runs._execute", lambda *args: pytest.fail("a diverged run was trained again"))
    again = run(DIVERGING, cache=tmp_path)
    assert again.diverged == step and len(again.metrics) == step
    with pytest.raises(DivergedRunError):
        again.completed()


def test_runs_that_start_from_or_take_v_from_a_diverged_run_raise_naming_it_and_cache_nothing(tmp_path, cache_env):
    from opsft.config import ConstraintConfig

    step = run(DIVERGING, cache=tmp_path).diverged
    child = RunConfig(**{**SFT.__dict__, "init": DIVERGING, "steps": 2, "snapshot_steps": ()})
    constraint = ConstraintConfig(mode="sign", direction_run=DIVERGING, direction_step=0, rule="fp32")
    opsft = RunConfig(**{**SFT.__dict__, "constraint": constraint, "steps": 2, "snapshot_steps": ()})
    for config in (child, opsft):
        with pytest.raises(DivergedRunError) as err:
            run(config, cache=tmp_path)
        assert (err.value.digest, err.value.step) == (DIVERGING.digest(), step)
        assert not (tmp_path / "runs" / config.digest() / "result.json").exists()


def test_continued_training_starts_from_the_parent_run(tmp_path, cache_env):
    child = RunConfig(**{**SFT.__dict__, "init": SFT, "steps": 2, "snapshot_steps": ()})
    parent = run(SFT, cache=tmp_path)
    result = run(child, cache=tmp_path)
    assert_same(load_file(str(result.snapshot(0) / "model.safetensors")), final_weights(parent))
    assert Path(result.folder).name == child.digest()


def test_an_opsft_run_moves_only_along_the_direction_of_its_source_run(tmp_path, cache_env):
    from opsft.config import ConstraintConfig
    from opsft.directions import extract

    constraint = ConstraintConfig(mode="sign", direction_run=GRPO, rule="fp32")
    opsft = RunConfig(**{**SFT.__dict__, "constraint": constraint, "snapshot_steps": ()})
    grpo = run(GRPO, cache=tmp_path)
    result = run(opsft, cache=tmp_path)
    v = extract(grpo.snapshot(0), grpo.snapshot(), rule="fp32").signs
    moved = extract(result.snapshot(0), result.snapshot(), rule="fp32").signs
    assert any(m.any() for m in moved.values()), "OPSFT did not move at all"
    for name, m in moved.items():
        assert ((m == 0) | (m == v[name])).all(), name
