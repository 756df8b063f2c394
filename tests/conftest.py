"""Shared fixtures: one thread per xdist worker, and an isolated cache shared by the session's workers."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One torch thread per test process: 2 xdist workers x 2 threads oversubscribe a 2-core machine, and
    OpenMP threads that wait on a busy core make every small op pay a scheduler slice."""
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Every test writes its run and score caches into its own folder unless it asks for the shared one
    (``cache_env``): a unit test never touches the user's $OPSFT_CACHE, and two tests that score the same
    weights with different stand-in scorers never read each other's cached scores (opsft.evals.score_cache)."""
    monkeypatch.setenv("OPSFT_CACHE", str(tmp_path / "opsft-cache"))


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """A cache folder shared by all workers of this pytest session (runs are built once, under file locks)."""
    root = tmp_path_factory.getbasetemp().parent / "opsft-cache"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def cache_env(shared_cache, monkeypatch):
    """Point OPSFT_CACHE at the shared test cache."""
    monkeypatch.setenv("OPSFT_CACHE", str(shared_cache))
    return shared_cache


@pytest.fixture
def native_numerics(monkeypatch):
    """Digests as native numerics compute them (``OPSFT_NUMERICS=native``): those from before the numerics were
    pinned, which tests of digest stability pin down."""
    monkeypatch.setenv("OPSFT_NUMERICS", "native")
