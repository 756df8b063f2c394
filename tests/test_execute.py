"""Executing a plan (``opsft.execute``): parents before children, the longest remaining chain first, everything
cached afterwards, and a second executor on the same cache trains nothing again."""

import os
import signal
import subprocess
import sys

import pytest

from ablations.claims import scale_profile
from opsft.claims.arms import baseline, opsft_recipe
from opsft.execute import execute
from opsft.plan import Plan, build_plan
from opsft.workers import LocalWorkers

SCALE = scale_profile("smoke")


def test_the_longest_remaining_chain_goes_first():
    grpo, sft = baseline("grpo", SCALE, 0), baseline("sft", SCALE, 0)
    opsft = opsft_recipe(sft, grpo, "sign")
    plan = Plan()
    plan.add("a", opsft)
    plan.add("b", sft)
    for key, seconds in ((grpo.digest(), 10.0), (opsft.digest(), 5.0), (sft.digest(), 12.0)):
        plan.runs[key].estimate = seconds
    tails = plan.chain_seconds("children")
    assert tails[grpo.digest()] == 15.0 and tails[sft.digest()] == 12.0 and tails[opsft.digest()] == 5.0
    heads = plan.chain_seconds("parents")
    assert heads[opsft.digest()] == 15.0 and plan.critical_path() == 15.0


@pytest.mark.slow
def test_a_smoke_plan_executes_into_the_cache_and_a_second_executor_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OPSFT_CACHE", str(tmp_path))
    plan = build_plan("smoke", expr="c02 or c19", calibration=False, regime_map=False)
    plan.price(tmp_path)
    lines: list[str] = []
    with LocalWorkers(2) as workers:
        assert execute(plan, workers, log=lines.append) == len(plan.runs)
    assert lines[-1].startswith(f"execute: {len(plan.runs)}/{len(plan.runs)} runs done")
    declared = [r for r in plan.runs.values() if r.staged is None]
    assert all((tmp_path / "runs" / r.key / "result.json").is_file() for r in declared)
    again = build_plan("smoke", expr="c02 or c19", calibration=False, regime_map=False)
    again.price(tmp_path)
    assert all(r.cached for r in again.runs.values() if r.staged is None)
    staged = [r for r in again.runs.values() if r.staged is not None]  # priced by shape: never "cached"
    with LocalWorkers(1) as workers:  # built again, read from the cache
        assert len(staged) == 2 and execute(again, workers, log=lines.append) == 2


@pytest.mark.slow
def test_ctrl_c_on_opsft_execute_leaves_finished_runs_cached_and_no_torn_entry(tmp_path):
    from opsft.io import read_verified_manifest

    command = [sys.executable, "-m", "opsft.cli", "execute", "--scale", "smoke", "-k", "c02", "--no-calibration",
               "--no-map", "--jobs", "2"]
    env = {**os.environ, "OPSFT_CACHE": str(tmp_path)}
    with open(tmp_path / "stderr.txt", "w") as stderr:  # a file: a full pipe nobody reads would block the child
        # SIGINT restored to its default in the child: a job started in the background of a non-interactive
        # shell (nohup CMD &, as a CI runner may) inherits it ignored, and Python then installs no handler
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        first_done = next((line for line in proc.stdout if "runs done" in line), None)
        assert first_done is not None and proc.poll() is None, "the executor ended before a run finished"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the executor and its workers
        out = proc.communicate(timeout=120)[0]
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 130 and "opsft: interrupted" in err and "execute: interrupted after" in out
    folders = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    finished = [f for f in folders if (f / "result.json").exists()]
    assert all(read_verified_manifest(f / "result.json", "run cache") is not None for f in finished)
    plan = build_plan("smoke", expr="c02", calibration=False, regime_map=False)
    plan.price(tmp_path)
    assert 1 <= sum(r.cached for r in plan.runs.values()) == len(finished) < len(plan.runs)
    assert subprocess.run(command, env=env, capture_output=True, timeout=600).returncode == 0
    plan.price(tmp_path)
    assert all(r.cached for r in plan.runs.values())


class FakeWorkers:
    """Workers that train nothing: each submitted run finishes at once, except those of ``diverging`` (digest ->
    step), which raise ``DivergedRunError`` as a worker's diverged run does."""

    slots = 2

    def __init__(self, cache, diverging):
        self.cache, self.diverging, self.submitted = cache, diverging, []

    def submit(self, config):
        from concurrent.futures import Future

        from opsft.runs import DivergedRunError

        self.submitted.append(config.digest())
        future = Future()
        step = self.diverging.get(config.digest())
        if step is None:
            future.set_result(1.0)
        else:
            future.set_exception(DivergedRunError(config.digest(), step, f"run {config.digest()} diverged"))
        return future

    def cancel(self):
        pass


def diverging_plan():
    """GRPO, OPSFT taking v from that GRPO (on SFT's data), and the unrelated SFT and OPD runs."""
    grpo, sft, opd = (baseline(m, SCALE, 0) for m in ("grpo", "sft", "opd"))
    opsft = opsft_recipe(sft, grpo, "sign")
    plan = Plan()
    for label, config in (("a", opsft), ("b", sft), ("c", opd)):
        plan.add(label, config)
    return plan, grpo, sft, opd, opsft


def test_a_diverged_run_blocks_the_runs_that_depend_on_it_and_execute_carries_on_with_the_others(tmp_path):
    plan, grpo, sft, opd, opsft = diverging_plan()
    workers, lines = FakeWorkers(tmp_path, {grpo.digest(): 7}), []
    assert execute(plan, workers, log=lines.append) == 3  # GRPO (diverged), SFT, OPD
    assert sorted(workers.submitted) == sorted([grpo.digest(), sft.digest(), opd.digest()])
    assert any(line.endswith("diverged at step 7)") and grpo.digest()[:16] in line for line in lines)
    assert (f"execute: blocked {opsft.digest()[:16]} (sft): it depends on run {grpo.digest()[:16]}, which diverged "
            "at step 7; not trained") in lines
    assert lines[-1] == ("execute: 1 run(s) diverged (cached as diverged), 1 run(s) blocked by a diverged run and "
                         f"not trained; diverged: {grpo.digest()[:16]} at step 7")


def test_a_run_cached_as_diverged_blocks_its_children_without_submitting_them(tmp_path):
    plan, grpo, sft, opd, opsft = diverging_plan()
    (tmp_path / "runs" / grpo.digest()).mkdir(parents=True)
    (tmp_path / "runs" / grpo.digest() / "result.json").write_text('{"diverged_at_step": 3}')
    plan.runs[grpo.digest()].cached = True
    workers, lines = FakeWorkers(tmp_path, {}), []
    assert execute(plan, workers, log=lines.append) == 2
    assert sorted(workers.submitted) == sorted([sft.digest(), opd.digest()])
    assert lines[-1].endswith(f"0 run(s) diverged (cached as diverged), 1 run(s) blocked by a diverged run and not "
                              f"trained; diverged: {grpo.digest()[:16]} at step 3")


@pytest.mark.slow
def test_a_run_that_really_diverges_leaves_the_other_runs_trained(tmp_path, cache_env):
    """Real runs in a thread (``train_in_worker``) into ``tmp_path``: an SFT run at an absurd learning rate, one
    continuing it, and a sane one."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from opsft.config import ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
    from opsft.runs import run
    from opsft.workers import train_in_worker

    sane = RunConfig(organism="nano", objective=ObjectiveConfig(name="sft"), steps=4,
                     source=SourceConfig(kind="static", family="arith", n_problems=32, batch_size=8,
                                         trajectory_source="reference"), optim=OptimConfig(lr=1e-3))
    diverging = dataclasses.replace(sane, steps=6, optim=OptimConfig(lr=1e6, grad_clip=0.0))
    child = dataclasses.replace(sane, init=diverging)
    plan = Plan()
    for label, config in (("a", child), ("b", sane)):
        plan.add(label, config)

    class ThreadWorkers:
        slots, cache = 1, tmp_path

        def __init__(self):
            self.pool = ThreadPoolExecutor(1)

        def submit(self, config):
            return self.pool.submit(train_in_worker, config, tmp_path)

        def cancel(self):
            self.pool.shutdown(cancel_futures=True)

    lines: list[str] = []
    assert execute(plan, ThreadWorkers(), log=lines.append) == 2
    assert run(sane, tmp_path).diverged is None and run(diverging, tmp_path).diverged is not None
    assert not (tmp_path / "runs" / child.digest() / "result.json").exists()
    assert lines[-1].startswith("execute: 1 run(s) diverged (cached as diverged), 1 run(s) blocked")


def test_the_eta_comes_from_the_plans_estimates_corrected_by_the_measured_pace():
    from opsft.execute import pace
    from opsft.progress import planned_eta_text

    assert pace([(10.0, 10.0)] * 4) is None  # too few runs to know the pace
    assert pace([(12.0, 10.0)] * 5) == pytest.approx(1.2)
    assert pace([(0.01, 10.0)] * 5) == 0.5 and pace([(100.0, 10.0)] * 5) == 2.0  # cached reads, a slowed start
    assert planned_eta_text(1, 10, 3600.0, 2, None) == ("1/10 runs done, about 30 min of training left (the plan's "
                                                        "estimates, 2 workers)")
    assert "about 36 min of training left (the plan's estimates x 1.20" in planned_eta_text(5, 10, 3600.0, 2, 1.2)
