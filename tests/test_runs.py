"""Runs are values: determinism, the cache, resume after a real kill, corrupt entries, non-finite losses."""

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
from opsft.runs import run

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


def test_a_non_finite_loss_stops_the_run_naming_the_step_and_keeps_the_checkpoint(tmp_path, cache_env):
    config = RunConfig(**{**SFT.__dict__, "optim": OptimConfig(lr=1e4, grad_clip=0.0), "steps": 200,
                          "checkpoint_every": 1})
    with pytest.raises(RuntimeError, match=r"non-finite .* at step \d+"):
        run(config, cache=tmp_path)
    folder = tmp_path / "runs" / config.digest()
    assert (folder / "checkpoint" / "state.pt").is_file()
    assert not (folder / "result.json").exists()


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
