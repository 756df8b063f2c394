"""Under DDP the sign mask acts on the all-reduced gradient, identically on every rank (2 gloo processes)."""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from opsft.constraints import constrain
from opsft.directions import Direction

WORLD, STEPS, GLOBAL_BATCH = 2, 4, 8


def make_problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1)
    direction = Direction({n: torch.randint(-1, 2, p.shape, generator=g, dtype=torch.int8)
                           for n, p in model.named_parameters()})
    data = [(torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g))
            for _ in range(STEPS)]
    return model, direction, data


def train(model, direction, data, rank: int, world: int):
    """Sign-constrained AdamW (wd 0.1) on this rank's slice of each global batch; mean loss over the slice,
    which DDP averages into the global-batch mean gradient."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    constrain(opt, model, direction, mode="sign")
    per = GLOBAL_BATCH // world
    grads = []
    for x, y in data:
        opt.zero_grad()
        sl = slice(rank * per, (rank + 1) * per)
        ((model(x[sl]) - y[sl]) ** 2).mean().backward()
        opt.step()
        grads.append([p.grad.detach().clone() for p in model.parameters()])  # the masked gradient
    return [p.detach().clone() for p in model.parameters()], grads


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model, direction, data = make_problem()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        torch.save(train(ddp, direction, data, rank, WORLD), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_sign_constraint_matches_one_process_with_the_global_batch(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    (w0, g0), (w1, g1) = (torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD))
    torch.set_num_threads(1)
    model, direction, data = make_problem()
    w_ref, _ = train(model, direction, data, rank=0, world=1)
    for a, b in zip(g0, g1, strict=True):  # identical masked gradients on both ranks
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    for a, b, ref in zip(w0, w1, w_ref, strict=True):
        assert torch.equal(a, b)
        assert torch.allclose(a, ref, rtol=0, atol=1e-6)
