"""The Ray executor (``opsft.cluster``): a dead address is one clear error within 30 s; on a local Ray instance a
plan trains to exactly the runs the local executor trains; a two-node cluster shares one cache; a worker killed
mid-run is retried and resumes to an uninterrupted run's weights.

The equivalence test runs in CI (marked ``slow``). The two-node and worker-kill tests start extra Ray processes
and are marked ``cluster``: ``pytest -m cluster tests/test_cluster.py``."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opsft.cluster import RayWorkers, check_reachable, host_and_port
from opsft.execute import execute
from opsft.plan import Plan, build_plan
from opsft.runs import finished_fingerprints
from opsft.workers import LocalWorkers


def needs_ray():
    """``ray``, or a skip naming the extra that installs it (a ``.[dev]`` install has no Ray)."""
    return pytest.importorskip("ray", reason="needs the [cluster] extra: pip install -e '.[cluster]'")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke_plan(cache: Path, expr: str = "c02 or c19") -> Plan:
    plan = build_plan("smoke", expr=expr, calibration=False, regime_map=False)
    plan.price(cache)
    return plan


@pytest.mark.parametrize(("address", "expected"), [("10.0.0.5:6379", ("10.0.0.5", 6379)),
                                                   ("ray://head.local", ("head.local", 10001)),
                                                   ("ray://[::1]:10002", ("::1", 10002)),
                                                   ("ray://[::1]", ("::1", 10001)), ("[::1]:6379", ("::1", 6379))])
def test_a_ray_address_is_a_host_and_a_port(address, expected):
    assert host_and_port(address) == expected


@pytest.mark.parametrize("address", ["head.local", "head.local:port", ":6379", "::1"])
def test_a_malformed_address_is_named(address):
    with pytest.raises(ValueError, match=f"--address {address}: expected HOST:PORT"):
        host_and_port(address)


def test_a_dead_address_is_one_error_naming_it():
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(ConnectionError, match=f"--address {address}: no Ray cluster answers"):
        check_reachable(address)


def test_opsft_execute_on_a_dead_address_fails_in_one_line_within_30_s(tmp_path):
    needs_ray()
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "opsft.cli", "execute", "--scale", "smoke", "--executor", "ray",
                           "--address", address], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OPSFT_CACHE": str(tmp_path)})
    assert time.monotonic() - start < 30
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert f"--address {address}: no Ray cluster answers" in done.stderr


@pytest.mark.slow
def test_a_plan_on_a_local_ray_instance_trains_exactly_the_local_executors_runs(tmp_path):
    needs_ray()
    lines: list[str] = []
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    with LocalWorkers(2, local) as workers:
        execute(smoke_plan(local), workers, log=lines.append)
    with RayWorkers(None, on_ray, cpus=2) as workers:
        assert workers.slots == 2
        planned = smoke_plan(on_ray)
        assert execute(planned, workers, log=lines.append) == len(planned.runs)
    assert lines[-1].startswith(f"execute: {len(planned.runs)}/{len(planned.runs)} runs done")
    ours, theirs = finished_fingerprints(on_ray), finished_fingerprints(local)
    assert len(ours) >= len(planned.runs) and ours == theirs


@pytest.mark.slow
def test_a_run_that_diverges_in_a_ray_task_blocks_its_child_and_the_others_train(tmp_path, cache_env):
    """The task's ``DivergedRunError`` reaches the executor through Ray with its digest and step."""
    import dataclasses

    from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
    from opsft.runs import diverged_step

    needs_ray()
    sane = RunConfig(organism="nano", objective=ObjectiveConfig(name="sft"), steps=4,
                     source=SourceConfig(kind="static", family="arith", n_problems=32, batch_size=8,
                                         trajectory_source="reference"), optim=OptimConfig(lr=1e-3))
    diverging = dataclasses.replace(sane, steps=6, optim=OptimConfig(lr=1e6, grad_clip=0.0))
    plan = Plan()
    plan.add("a", dataclasses.replace(sane, init=diverging))
    plan.add("b", sane)
    lines: list[str] = []
    with RayWorkers(None, tmp_path, cpus=1) as workers:
        assert execute(plan, workers, log=lines.append) == 2
    step = diverged_step(diverging.digest(), tmp_path)
    assert step is not None and f"diverged at step {step})" in "".join(lines)
    assert lines[-1] == ("execute: 1 run(s) diverged (cached as diverged), 1 run(s) blocked by a diverged run and not "
                         f"trained; diverged: {diverging.digest()[:16]} at step {step}")


@pytest.mark.cluster
def test_two_ray_nodes_train_one_plan_into_one_shared_cache(tmp_path):
    ray = needs_ray()
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        plan = smoke_plan(tmp_path)
        with RayWorkers(cluster.address, tmp_path) as workers:
            assert workers.slots == 2
            assert execute(plan, workers, log=lambda line: None) == len(plan.runs)
        assert len(set(workers.nodes.values())) == 2, "one node trained every run"
        again = smoke_plan(tmp_path)
        assert all(r.cached for r in again.runs.values() if r.staged is None)
    finally:
        ray.shutdown()
        cluster.shutdown()


def ray_task_processes(name: str) -> list:
    """This test's descendant processes whose title says they run the Ray task ``name`` (the local instance's
    workers are children of its raylet, a child of this process)."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if any(f"ray::{name}" in part for part in p.cmdline() or ())]


@pytest.mark.cluster
def test_a_killed_ray_worker_is_retried_and_resumes_to_the_same_final_weights(tmp_path):
    needs_ray()
    from safetensors.torch import load_file

    from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
    from opsft.runs import run

    config = RunConfig(organism="nano", objective=ObjectiveConfig(name="sft"), optim=OptimConfig(lr=1e-3),
                       source=SourceConfig(kind="static", family="arith", n_problems=32, batch_size=8,
                                           trajectory_source="reference"), steps=120, checkpoint_every=5)
    reference = load_file(str(run(config, cache=tmp_path / "ref").snapshot() / "model.safetensors"))
    plan = Plan()
    plan.add("killed", config)
    plan.price(tmp_path / "killed")
    folder = tmp_path / "killed" / "runs" / config.digest()
    outcome: dict = {}
    with RayWorkers(None, tmp_path / "killed", cpus=1, retries=2) as workers:
        thread = threading.Thread(target=lambda: outcome.setdefault("trained", execute(plan, workers, print)),
                                  daemon=True)
        thread.start()
        deadline = time.time() + 300
        while not (folder / "checkpoint" / "state.pt").exists() and time.time() < deadline:
            time.sleep(0.05)
        victims = ray_task_processes("train_on_node")
        assert len(victims) == 1, f"expected one worker running the task, found {victims}"
        victims[0].send_signal(signal.SIGKILL)
        victims[0].wait(timeout=30)
        assert not (folder / "result.json").exists(), "the run finished before its worker was killed"
        thread.join(timeout=600)
    assert outcome.get("trained") == 1
    resumed = load_file(str(run(config, cache=tmp_path / "killed").snapshot() / "model.safetensors"))
    assert reference.keys() == resumed.keys() and all((reference[k] == resumed[k]).all() for k in reference)
    steps = [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, config.steps + 1))


@pytest.mark.cluster
def test_a_recipe_run_with_gpus_is_a_ray_task_that_trains_through_torchrun(tmp_path, monkeypatch):
    """A node that declares one GPU (there is none: the torchrun job falls back to gloo on CPU) trains a
    paper-tiny run as a one-GPU task through torchrun, while an organism run stays a one-CPU task."""
    ray = needs_ray()
    from ablations.claims import scale_profile
    from opsft.claims.arms import baseline

    monkeypatch.setenv("OPSFT_CACHE", str(tmp_path))
    recipe_run = baseline("sft", scale_profile("paper-tiny"), 0)
    organism_run = baseline("sft", scale_profile("smoke"), 0)
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with RayWorkers(None, tmp_path, gpus_per_run=1, strategy="ddp") as workers:
            for config in (recipe_run, organism_run):
                workers.submit(config).result(timeout=300)
    finally:
        ray.shutdown()
    result = json.loads((tmp_path / "runs" / recipe_run.digest() / "result.json").read_text())
    assert result["distributed"] == {"backend": "gloo", "strategy": "ddp", "world_size": 1}
    assert "distributed" not in json.loads((tmp_path / "runs" / organism_run.digest() / "result.json").read_text())


def test_gpus_per_run_is_for_ray_only(tmp_path, capsys):
    from opsft.cli import main

    assert main(["execute", "--scale", "smoke", "--gpus-per-run", "2"]) == 1
    assert "--gpus-per-run 2: only for --executor ray" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--gpus-per-run -1"):
        RayWorkers(None, tmp_path, gpus_per_run=-1)


@pytest.mark.slow
def test_a_failed_torchrun_job_is_a_retryable_error_that_names_its_log(tmp_path):
    needs_ray()  # train_with_torchrun is a Ray task: it imports ray before it starts torchrun
    from opsft.cluster import TorchrunFailed, train_with_torchrun
    from opsft.config import RunConfig

    config = RunConfig(init=str(tmp_path / "no-such-model"))
    with pytest.raises(TorchrunFailed, match="torchrun on 1 process\\(es\\) exited 1") as failed:
        train_with_torchrun(config, tmp_path, 1, "ddp")
    log = tmp_path / "runs" / config.digest() / "torchrun.log"
    assert str(log) in str(failed.value) and "no-such-model" in log.read_text()
