"""A plan's runs on a Ray cluster (``opsft execute --executor ray [--address HOST:PORT]``): each run one Ray task.

Ray does the scheduling, the transport and the retries; this module only names the task and its resources. A
task trains through ``opsft.runs.run`` in the driver's cache (``OPSFT_CACHE``, made absolute), which on a cluster
must be a path on a filesystem every node mounts at the same place; every node needs the same install of this
project and its pinned dependencies (bit-identical runs across executors rest on it). Two executors on one plan
share the cache's digest-keyed file locks, so a run is never trained twice (the filesystem must honour
``flock``, as local disks, NFSv4 and Lustre mounted with ``flock`` do).

Faults: a task whose worker process dies (killed, out of memory, node lost) is retried up to ``retries`` times by
Ray and resumes from the run's last checkpoint, so its final weights are an uninterrupted run's; a run that
raises is not retried (the same config would raise again): a diverged run (``opsft.runs.DivergedRunError``) is
cached as such and the execution goes on without it and its children, any other error stops the execution. Without
``--address`` a new local Ray instance is started with ``cpus`` CPUs; with one (``HOST:PORT`` from a Ray node,
``ray://HOST:10001`` from elsewhere), the address is checked to answer before Ray is imported and asked to
connect, so a dead address is one error within ``CONNECT_TIMEOUT`` seconds.

Resources: an organism run is a task of one CPU. With ``gpus_per_run`` G >= 1, a recipe run (from a Hugging Face
model folder) is a task of G GPUs that trains through ``torchrun --standalone --nproc-per-node G -m
opsft.distributed`` (``strategy``: DDP or FSDP2) into the same cache; Ray places it on a node with G free GPUs and
sets ``CUDA_VISIBLE_DEVICES`` for it. A torchrun job that fails (``TorchrunFailed``) is retried like a dead
worker, resuming from the run's checkpoint; its ranks stop when the task's worker dies. The driver's numerics
mode (``opsft.numerics``) travels to every worker in the job's environment, so a task computes, and files under,
the digest the driver asked for.
"""

from __future__ import annotations

import ctypes
import pickle
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from urllib.parse import urlsplit

from opsft.config import RunConfig
from opsft.io import atomic_write
from opsft.numerics import ENV, mode
from opsft.workers import train_in_worker

CONNECT_TIMEOUT = 10.0
PR_SET_PDEATHSIG = 1  # prctl option: the signal a child gets when its parent dies (linux/prctl.h)
RAY_CLIENT_PORT = 10001


def host_and_port(address: str) -> tuple[str, int]:
    """``(host, port)`` of a Ray address: ``HOST:PORT`` (the head's GCS port, from a machine that is itself a
    Ray node) or ``ray://HOST[:PORT]`` (Ray Client, port 10001 by default); IPv6 hosts in brackets."""
    client = address.startswith("ray://")
    parts = urlsplit("//" + address.removeprefix("ray://"))
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    port = port if port is not None or not client else RAY_CLIENT_PORT
    if not host or port is None:
        raise ValueError(f"--address {address}: expected HOST:PORT (a Ray head's GCS address) or ray://HOST[:PORT]")
    return host, port


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raise ``ConnectionError`` naming ``address`` unless something accepts a TCP connection there within
    ``timeout`` seconds, name lookup included (``auto``, Ray's own lookup of a local head, is left to Ray)."""
    if address == "auto":
        return
    host, port = host_and_port(address)
    outcome: dict[str, str] = {}

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome["answer"] = "yes"
        except OSError as err:
            outcome["error"] = err.strerror or type(err).__name__

    thread = threading.Thread(target=connect, daemon=True)  # a hung name lookup must not hold the error back
    thread.start()
    thread.join(timeout)
    if "answer" not in outcome:
        raise ConnectionError(f"--address {address}: no Ray cluster answers at {host}:{port} within {timeout:.0f} s "
                              f"({outcome.get('error', 'no answer')}); start one there with `ray start --head`, "
                              "or leave --address out to run on a local Ray instance")


def ray_module():
    """``ray``, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError("--executor ray needs Ray: pip install -c constraints-cpu.txt -e '.[cluster]'") from None
    return ray


def train_on_node(config: RunConfig, cache: Path) -> tuple[float, str]:
    """The Ray task: train (or read from the shared ``cache``) ``config``; its wall time and the node it ran on."""
    import ray

    return train_in_worker(config, cache), ray.get_runtime_context().get_node_id()


class TorchrunFailed(RuntimeError):
    """A recipe run's torchrun job exited with an error (a rank killed, out of memory, a collective timed out):
    Ray retries the task, which resumes from the run's last checkpoint."""


def torchrun_command(config_file: Path, cache: Path, nproc: int, strategy: str) -> list[str]:
    """The torchrun job that trains the pickled RunConfig ``config_file`` on ``nproc`` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "opsft.distributed", "--config", str(config_file), "--strategy", strategy, "--cache", str(cache)]


def _die_with_parent() -> None:
    """In the torchrun child, before exec: ask Linux for SIGTERM when the Ray worker that started it dies (torchrun
    then stops its ranks), so a killed or cancelled task leaves no rank holding GPUs or the run's lock."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the ranks outlive a killed worker, as any child process would
        pass


def train_with_torchrun(config: RunConfig, cache: Path, nproc: int, strategy: str) -> tuple[float, str]:
    """The Ray task of a recipe run: its torchrun job on this node's ``nproc`` GPUs, logging to the run folder's
    ``torchrun.log`` (the job resumes from the run's last checkpoint and returns at once when the run is cached);
    its wall time and the node it ran on. A failed job, or one that leaves no verified result, raises
    ``TorchrunFailed``; a run cached as diverged, ``opsft.runs.DivergedRunError``."""
    import ray

    from opsft.io import read_verified_manifest
    from opsft.runs import run

    folder = cache / "runs" / config.digest()
    folder.mkdir(parents=True, exist_ok=True)
    config_file = folder / "config.pkl"
    atomic_write(config_file, lambda p: p.write_bytes(pickle.dumps(config)))
    with open(folder / "torchrun.log", "a", encoding="utf-8") as log:
        job = subprocess.run(torchrun_command(config_file, cache, nproc, strategy), stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
    if job.returncode != 0:
        tail = (folder / "torchrun.log").read_text(encoding="utf-8", errors="replace")[-3000:]
        raise TorchrunFailed(f"run {config.digest()}: torchrun on {nproc} process(es) exited {job.returncode} "
                             f"(log: {folder / 'torchrun.log'}):\n{tail}")
    if read_verified_manifest(folder / "result.json", "run cache") is None:
        raise TorchrunFailed(f"run {config.digest()}: torchrun exited 0 but left no verified result.json in {folder}")
    return run(config, cache).completed().wall_time, ray.get_runtime_context().get_node_id()


class RayWorkers:
    """Runs as Ray tasks of one CPU each, on the cluster at ``address`` or on a local instance of ``cpus`` CPUs
    (default: this machine's). ``slots`` is the cluster's CPU count; ``nodes`` maps each finished run's digest
    to the node that trained it."""

    def __init__(self, address: str | None, cache: Path, cpus: int | None = None, retries: int = 3,
                 gpus_per_run: int = 0, strategy: str = "fsdp2") -> None:
        if gpus_per_run < 0:
            raise ValueError(f"--gpus-per-run {gpus_per_run}: must be at least 0")
        if retries < 0:
            raise ValueError(f"--retries {retries}: must be at least 0")
        if cpus is not None and cpus < 1:
            raise ValueError(f"--jobs {cpus}: must be at least 1")
        if address is not None and cpus is not None:
            raise ValueError("--jobs: a Ray cluster at --address has its own CPUs; give one or the other")
        self.address, self.cache, self.cpus, self.retries = address, cache.resolve(), cpus, retries
        self.gpus_per_run, self.strategy = gpus_per_run, strategy
        self.nodes: dict[str, str] = {}
        self._refs: list = []
        self._started = False

    @property
    def slots(self) -> int:
        """The cluster's CPUs now (nodes that join later count once they have joined)."""
        return max(1, int(ray_module().cluster_resources().get("CPU", 1)))

    def __enter__(self) -> RayWorkers:
        if self.address is not None:
            check_reachable(self.address)
        ray = ray_module()
        if not ray.is_initialized():  # "local": a new instance, never one RAY_ADDRESS or `ray start` left behind
            ray.init(address=self.address or "local", num_cpus=self.cpus, include_dashboard=False,
                     log_to_driver=False, runtime_env={"env_vars": {ENV: mode()}})
            self._started = True
        self._task = ray.remote(train_on_node).options(num_cpus=1, max_retries=self.retries, retry_exceptions=False)
        self._gpu_task = ray.remote(train_with_torchrun).options(num_cpus=1, num_gpus=self.gpus_per_run,
                                                                 max_retries=self.retries,
                                                                 retry_exceptions=[TorchrunFailed])
        return self

    def __exit__(self, *exc) -> None:
        if self._started:
            ray_module().shutdown()

    def submit(self, config: RunConfig) -> Future:
        """Submit ``config`` as a task (a recipe run with ``gpus_per_run``: a torchrun job on that many GPUs); the
        future's result is its wall time."""
        if self.gpus_per_run and not config.uses_organism():
            ref = self._gpu_task.remote(config, self.cache, self.gpus_per_run, self.strategy)
        else:
            ref = self._task.remote(config, self.cache)
        self._refs.append(ref)
        trained: Future = Future()

        def settle(done: Future) -> None:
            if done.exception() is not None:
                trained.set_exception(done.exception())
                return
            wall_time, node = done.result()
            self.nodes[config.digest()] = node
            trained.set_result(wall_time)

        ref.future().add_done_callback(settle)
        return trained

    def cancel(self) -> None:
        """Force-stop every task still running (its run keeps its last checkpoint and has no result)."""
        ray = ray_module()
        for ref in self._refs:
            ray.cancel(ref, force=True)
