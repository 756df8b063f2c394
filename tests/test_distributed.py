"""Multi-process training under torch.distributed: 2 gloo processes on CPU stand in for torchrun on GPUs.

The shared loop (opsft.train.train) trains the nano organism model with the OPSFT sign constraint under DDP
and under FSDP2. Each must reach the weights one process reaches on the same global batch, keep
sign(theta_t - theta_0) in {0, v} on every rank's own parameters or shards, and restore from a sharded
checkpoint; every other mask mode must run on FSDP2 shards; the torchrun entry point must write a run the
single-process cache serves; and a world size that does not divide the batch is refused before training.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file
from torch.distributed.tensor import DTensor

from opsft.config import ConstraintConfig, ObjectiveConfig, OptimConfig, RunConfig, SourceConfig
from opsft.constraints import build_masks, constrain, unwrap_model
from opsft.directions import Direction, extract
from opsft.distributed.__main__ import load_config
from opsft.distributed.checkpoint import load_checkpoint, save_checkpoint
from opsft.distributed.parallel import full_state, parallelize, replicate_like, shard_like
from opsft.distributed.run import run_distributed
from opsft.distributed.source import ShardedSource, loss_normalizer, rank_weight, weighted
from opsft.distributed.world import init_process_group, rows_per_rank, split_rows, world_from_env
from opsft.objectives import grpo_loss, sft_loss
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.runs import run
from opsft.sources import Example, StaticSource
from opsft.train import make_optimizer, train

WORLD, STEPS, GLOBAL_BATCH = 2, 4, 8
OPTIM = OptimConfig(lr=1e-3, weight_decay=0.1, grad_clip=1.0)
# Weights are float64 so that the comparison is tight: the distributed and one-process runs differ only in
# the order of floating-point sums (two half-batch gradients averaged vs one batch), which Adam amplifies
# where |g| is near eps. Measured max |difference| after STEPS steps: 7e-8 in float64 (the log-softmax runs
# in fp32, opsft.objectives.token_logprobs) and 3.7e-6 in fp32, against a total movement of up to
# STEPS * lr = 4e-3 per weight.
ATOL = 1e-6

# Runs for the torchrun entry point (fp32, as RunConfig trains): v from a short SFT run, then sign-constrained SFT.
DIRECTION_RUN = RunConfig(
    organism="nano", objective=ObjectiveConfig(name="sft"), optim=OptimConfig(lr=1e-3), steps=3,
    source=SourceConfig(kind="static", family="arith", n_problems=32, batch_size=8, trajectory_source="reference"),
)
SIGN_RUN = RunConfig(**{**DIRECTION_RUN.__dict__, "steps": 4, "snapshot_steps": (2,), "checkpoint_every": 2,
                        "constraint": ConstraintConfig(mode="sign", direction_run=DIRECTION_RUN, rule="fp32")})
PLAIN_RUN = RunConfig(**{**DIRECTION_RUN.__dict__, "steps": 4, "checkpoint_every": 2})
# (mode, reset_moments) pairs tried on FSDP2 shards besides the sign mode of the main tests.
MODES = (("location", False), ("flipped", False), ("random-sign", False), ("random-location", False),
         ("sign-update", False), ("sign", True), ("subspace", False))
# fp32 weights of these 4-step runs: the same sum-order differences as above, measured at 3e-7.
RUN_ATOL = 5e-6


def make_problem() -> tuple[torch.nn.Module, Direction, StaticSource]:
    """The nano Qwen3 model (float64), a seeded random direction v, and teacher-style arithmetic trajectories."""
    model = build_model("nano", seed=0).to(torch.float64)
    g = torch.Generator().manual_seed(1)
    direction = Direction({n: torch.randint(-1, 2, p.shape, generator=g, dtype=torch.int8)
                           for n, p in model.named_parameters()})
    examples = [Example(p.prompt, p.solution) for p in tasks.generate("arith", "train", 16, 0, style="teacher")]
    return model, direction, StaticSource(examples, build_tokenizer(), GLOBAL_BATCH, seed=0)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's own part of a (possibly sharded) tensor."""
    return (t.to_local() if isinstance(t, DTensor) else t).detach().clone()


def join_job(rank: int, port: int):
    """Set torchrun's variables for ``rank`` of WORLD and join the gloo process group."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    world = world_from_env("gloo")
    init_process_group(world)
    return world


def sharded_problem(strategy: str, world):
    """make_problem with the model wrapped or sharded by ``strategy`` and its AdamW optimizer."""
    model, direction, source = make_problem()
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    model = parallelize(model, strategy, world)
    return model, make_optimizer(model, OPTIM), direction, source, theta0


def _train_worker(rank: int, port: int, strategy: str, out_dir: str) -> None:
    world = join_job(rank, port)
    try:
        model, optimizer, direction, source, theta0 = sharded_problem(strategy, world)
        masks = shard_like(direction.signs, model)
        constrain(optimizer, model, direction, mode="sign", masks=masks)
        train(model, optimizer, ShardedSource(source, world), weighted(sft_loss), steps=STEPS,
              grad_clip=OPTIM.grad_clip)
        params = dict(unwrap_model(model).named_parameters())
        full = full_state(model)  # whole weights on rank 0: snapshots and directions read these
        ckpt = save_checkpoint(Path(out_dir) / "checkpoint", model, optimizer, {"step": STEPS})
        fresh, fresh_opt, *_ = sharded_problem(strategy, world)
        progress = load_checkpoint(ckpt, fresh, fresh_opt)
        fresh_params = dict(unwrap_model(fresh).named_parameters())
        result = {
            "theta": {n: local(p) for n, p in params.items()},
            "theta0": {n: local(t) for n, t in shard_like(theta0, model).items()},
            "v": {n: local(m) for n, m in masks.items()},
            "grad": {n: local(p.grad) for n, p in params.items()},  # the last masked gradient
            "full": full,
            "direction": extract(theta0, full, rule="fp32").signs if rank == 0 else None,
            "restored": {n: local(p) for n, p in fresh_params.items()},
            "moments": {n: (local(optimizer.state[p]["exp_avg"]), local(fresh_opt.state[fresh_params[n]]["exp_avg"]))
                        for n, p in params.items()},
            "progress": progress,
        }
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _modes_worker(rank: int, port: int, out_dir: str) -> None:
    """Two constrained steps of every mask mode and of subspace on FSDP2 shards."""
    world = join_job(rank, port)
    out = {}
    try:
        for mode, reset in MODES:
            model, optimizer, direction, source, theta0 = sharded_problem("fsdp2", world)
            if mode == "subspace":
                g = torch.Generator().manual_seed(2)
                bases = {n: torch.linalg.qr(torch.randn(p.shape[1], 4, generator=g, dtype=p.dtype))[0]
                         for n, p in model.named_parameters() if p.dim() == 2}
                constrain(optimizer, model, mode="subspace", rank=4, bases=replicate_like(bases, model))
            else:
                masks = shard_like(build_masks(mode, direction, None, seed=0), model)
                constrain(optimizer, model, direction, mode=mode, masks=masks, reset_moments=reset)
            train(model, optimizer, ShardedSource(source, world), weighted(sft_loss), steps=2, grad_clip=1.0)
            key = f"{mode} reset" if reset else mode
            if mode == "subspace":  # the last gradient, gathered, lies in each weight's basis: G = G V V^T
                out[key] = {n: (p.grad.full_tensor(), bases[n]) for n, p in model.named_parameters() if n in bases}
            else:
                out[key] = {n: (local(p), local(t), local(masks[n]))
                             for (n, p), t in zip(model.named_parameters(), shard_like(theta0, model).values(),
                                                  strict=True)}
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker, out: Path, *args) -> list[dict]:
    """Run ``worker(rank, port, *args, out)`` on WORLD gloo processes; return each rank's saved results."""
    mp.spawn(worker, args=(_free_port(), *args, str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.fixture(scope="module")
def one_process() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Initial and final weights of the same training in one process on the whole global batch (the plain
    objective, no loss weighting)."""
    torch.set_num_threads(1)
    model, direction, source = make_problem()
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = make_optimizer(model, OPTIM)
    constrain(optimizer, model, direction, mode="sign")
    train(model, optimizer, source, sft_loss, steps=STEPS, grad_clip=OPTIM.grad_clip)
    return theta0, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.fixture(scope="module", params=["ddp", "fsdp2"])
def ranks(request, tmp_path_factory) -> tuple[str, list[dict]]:
    """Per-rank results of 2 gloo processes training with the strategy (spawned once per module)."""
    return request.param, spawn(_train_worker, tmp_path_factory.mktemp(request.param), request.param)


@pytest.mark.slow
def test_distributed_sign_training_matches_one_process_with_the_global_batch(ranks, one_process):
    strategy, results = ranks
    theta0, final = one_process
    full = results[0]["full"]
    assert full.keys() == final.keys()
    moved = sum(int((final[n] != theta0[n]).sum()) for n in final) / sum(t.numel() for t in final.values())
    assert moved > 0.2  # the constrained run really trained (about half of v's support moves)
    worst = max(float((full[n] - final[n]).abs().max()) for n in full)
    assert worst <= ATOL, f"{strategy}: max |w_distributed - w_one_process| = {worst:.3g}"
    assert results[1]["full"] == {}  # only rank 0 gathers whole weights
    # v extracted from the gathered weights is the one-process v wherever a weight moved clearly (|dw| >
    # 10 ATOL; below that the sum-order differences may decide a sign)
    for n, v in results[0]["direction"].items():
        clear = (final[n] - theta0[n]).abs() > 10 * ATOL
        assert torch.equal(v[clear], torch.sign(final[n] - theta0[n]).to(torch.int8)[clear]), n
    if strategy == "ddp":  # every rank masks the same all-reduced gradient and holds the same whole weights
        for n, w in results[0]["theta"].items():
            assert torch.equal(w, results[1]["theta"][n]), n
            assert torch.equal(results[0]["grad"][n], results[1]["grad"][n]), n


@pytest.mark.slow
def test_sign_of_the_update_stays_in_zero_or_v_on_every_rank(ranks, one_process):
    strategy, results = ranks
    if strategy == "fsdp2":  # each rank holds only its own rows of every weight, and of its mask
        for n, whole in one_process[1].items():
            rows = [res["theta"][n].shape[0] for res in results]
            assert sum(rows) == whole.shape[0] and max(rows) < whole.shape[0], n
            assert all(res["v"][n].shape == res["theta"][n].shape for res in results), n
    for rank, res in enumerate(results):
        for n, theta in res["theta"].items():
            v, before = res["v"][n], res["theta0"][n]
            step = torch.sign(theta - before).to(torch.int8)
            assert torch.all((step == 0) | (step == v)), f"rank {rank}: {n} moved against v"
            assert torch.equal(theta[v == 0], before[v == 0]), f"rank {rank}: {n} moved where v = 0"


@pytest.mark.slow
def test_a_sharded_checkpoint_restores_weights_and_adam_moments(ranks):
    _, results = ranks
    for res in results:
        assert res["progress"] == {"step": STEPS}
        for n, theta in res["theta"].items():
            assert torch.equal(res["restored"][n], theta), n
            trained, restored = res["moments"][n]
            assert torch.equal(restored, trained), n


@pytest.mark.slow
def test_every_mask_mode_and_subspace_run_on_fsdp2_shards(tmp_path):
    results = spawn(_modes_worker, tmp_path)
    for res in results:
        assert len(res) == len(MODES)
        for mode, tensors in res.items():
            for n, entry in tensors.items():
                if mode == "subspace":
                    grad, basis = entry
                    torch.testing.assert_close(grad, grad @ basis @ basis.T, rtol=0, atol=1e-12, msg=n)
                    continue
                theta, before, mask = entry
                if mask.dtype == torch.bool:  # location masks: no move outside m
                    assert torch.equal(theta[~mask], before[~mask]), f"{mode}: {n}"
                else:
                    step = torch.sign(theta - before).to(torch.int8)
                    assert torch.all((step == 0) | (step == mask)), f"{mode}: {n}"
        assert any(not torch.equal(t, b) for t, b, _ in res["location"].values())


def torchrun(config: str, strategy: str, cache: Path) -> None:
    """``torchrun --nproc-per-node 2 -m opsft.distributed`` on gloo, with this module importable."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           "-m", "opsft.distributed", "--config", f"test_distributed:{config}", "--strategy", strategy,
           "--backend", "gloo", "--cache", str(cache)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(("config", "strategy"), [("SIGN_RUN", "ddp"), ("PLAIN_RUN", "fsdp2")])
def test_torchrun_entry_point_writes_a_run_the_one_process_cache_serves(config, strategy, tmp_path, cache_env):
    torchrun(config, strategy, tmp_path / "distributed")
    cfg = globals()[config]
    served = run(cfg, cache=tmp_path / "distributed")  # read from the cache, not trained again
    assert [m["step"] for m in served.metrics] == list(range(1, cfg.steps + 1))
    assert not (served.folder / "checkpoint_sharded").exists()
    reference = run(cfg, cache=tmp_path / "one-process")
    for step in (0, *cfg.snapshot_steps, cfg.steps):
        got = load_file(str(served.snapshot(step) / "model.safetensors"))
        want = load_file(str(reference.snapshot(step) / "model.safetensors"))
        assert got.keys() == want.keys()
        worst = max(float((got[n] - want[n]).abs().max()) for n in want)
        assert worst <= RUN_ATOL, f"step {step}: max |w_torchrun - w_one_process| = {worst:.3g}"
    losses = [m["loss"] for m in served.metrics]
    torch.testing.assert_close(losses, [m["loss"] for m in reference.metrics], rtol=1e-4, atol=0)


# --- fast checks: no processes -------------------------------------------------------------------------


@pytest.mark.parametrize("objective", [ObjectiveConfig(name="sft"), ObjectiveConfig(name="grpo"),
                                       ObjectiveConfig(name="grpo", aggregation="token_sum")],
                         ids=["sft", "grpo-seq_mean", "grpo-token_sum"])
def test_weighted_rank_losses_average_to_the_global_batch_loss(objective):
    """(1/W) sum_r w_r L_r = L(global batch) in float64, with unequal token counts per rank."""
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(8, 6, generator=g, dtype=torch.float64)
    logp[4:] -= 1  # rank 1's tokens cost more, and it has more of them
    mask = torch.zeros(8, 6, dtype=torch.float64)
    for i, n in enumerate([1, 2, 1, 3, 6, 5, 6, 4]):
        mask[i, :n] = 1
    batch = {"mask": mask, "advantages": torch.randn(8, generator=g, dtype=torch.float64),
             "rewards": torch.rand(8, generator=g, dtype=torch.float64)}
    loss = sft_loss if objective.name == "sft" else (lambda lp, b: grpo_loss(lp, b, objective))
    whole, _ = loss(logp, batch)
    shares = []
    for rows in (slice(0, 4), slice(4, 8)):
        part = {k: v[rows] for k, v in batch.items()}
        part["loss_weight"] = torch.tensor(rank_weight(mask, rows, 2, loss_normalizer(objective)), dtype=torch.float64)
        shares.append(weighted(loss)(logp[rows], part)[0])
    torch.testing.assert_close(sum(shares) / 2, whole, rtol=1e-12, atol=0)
    if loss_normalizer(objective) == "tokens":  # the weights matter: plain per-rank means average elsewhere
        plain = [loss(logp[rows], {k: v[rows] for k, v in batch.items()})[0] for rows in (slice(0, 4), slice(4, 8))]
        assert abs(float(sum(plain) / 2 - whole)) > 1e-2


def test_a_world_size_that_does_not_divide_the_batch_is_refused():
    assert split_rows(8, 2, "batch") == 4
    with pytest.raises(ValueError, match=r"world size 3 does not divide the batch \(8\)"):
        split_rows(8, 3, "batch")
    assert rows_per_rank(SourceConfig(kind="static", batch_size=8), 4) == 2
    with pytest.raises(ValueError, match="SourceConfig.batch_size"):
        rows_per_rank(SourceConfig(kind="static", batch_size=6), 4)
    assert rows_per_rank(SourceConfig(kind="rollout", prompts_per_step=4, group_size=8), 2) == 16
    with pytest.raises(ValueError, match="SourceConfig.prompts_per_step"):  # a GRPO group is never split
        rows_per_rank(SourceConfig(kind="rollout", prompts_per_step=3, group_size=8), 2)


def test_the_entry_point_refuses_a_bad_world_size_before_any_process_group_or_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    with pytest.raises(ValueError, match="world size 3 does not divide .*SourceConfig.batch_size"):
        run_distributed(SIGN_RUN, "ddp", "gloo", cache=tmp_path)
    assert not dist.is_initialized()
    assert not (tmp_path / "runs").exists()


def test_outside_torchrun_the_missing_variables_are_named(monkeypatch):
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match="RANK.*WORLD_SIZE.*torchrun"):
        world_from_env("gloo")


def test_a_config_reference_must_name_a_run_config():
    assert load_config("test_distributed:SIGN_RUN") is SIGN_RUN
    with pytest.raises(ValueError, match="package.module:NAME"):
        load_config("test_distributed")
    with pytest.raises(ValueError, match="no attribute 'MISSING'"):
        load_config("test_distributed:MISSING")
    with pytest.raises(TypeError, match="not a RunConfig"):
        load_config("test_distributed:WORLD")


def test_a_mask_of_the_wrong_shape_is_named_before_sharding():
    model = build_model("nano")
    masks = {n: torch.zeros(p.shape, dtype=torch.int8) for n, p in model.named_parameters()}
    masks["model.norm.weight"] = torch.zeros(3, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \[3\] but the model parameter has shape"):
        shard_like(masks, model)
