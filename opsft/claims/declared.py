"""The runs a claim test declares before it trains anything, and the check that it loads exactly those.

Every claim test module defines ``arms(scale_name, scale, seed, **params) -> dict[str, RunConfig | Staged]``
(``params``: the test's other parametrize values, e.g. C19's ``method``), built with ``opsft.claims.arms``; its
test takes its configs from there. ``opsft plan`` lists the declared runs and their ancestors without training;
the ``claim`` fixture refuses a ``claim.run`` of anything undeclared and, after the test, fails it if a declared
arm was never loaded: the plan is the set of runs the claims load, checked on every claim test that runs.

A ``Staged`` arm is one whose config depends on a measurement of an earlier run (C19 sets K below the prefix
update's stable rank): it names that run (``after``), the function that builds the config from its result, and a
``shape``, a config of the same cost (objective, organism, steps) that the plan can price before ``after`` exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from opsft.config import RunConfig


@dataclass(frozen=True)
class Staged:
    """An arm whose config is ``build(result of after)``; ``shape`` prices it before ``after`` has run."""

    after: RunConfig
    build: Callable[[Any], RunConfig]
    shape: RunConfig


Declared = Mapping[str, RunConfig | Staged]


def parents(config: RunConfig) -> tuple[RunConfig, ...]:
    """The runs ``config`` needs finished first: the run it starts from and the run that supplies its v."""
    out = []
    if isinstance(config.init, RunConfig):
        out.append(config.init)
    direction = config.constraint.direction_run
    if isinstance(direction, RunConfig):
        out.append(direction)
    return tuple(out)


def with_ancestors(config: RunConfig) -> Iterator[RunConfig]:
    """``config`` and every run it depends on, transitively (repeats possible)."""
    yield config
    for parent in parents(config):
        yield from with_ancestors(parent)


def declared_arms(module: ModuleType, scale_name: str, scale: Mapping[str, Any], seed: int,
                  params: Mapping[str, Any]) -> Declared:
    """What the test module ``module`` declares for one test (a seed and its other parameters); a TypeError
    naming the module when it declares nothing or returns something else."""
    declare = getattr(module, "arms", None)
    if not callable(declare):
        raise TypeError(f"{module.__name__}: a claim test module must define arms(scale_name, scale, seed, "
                        "**params) returning its runs (opsft.claims.declared)")
    arms = declare(scale_name, scale, seed, **params)
    bad = [name for name, cfg in arms.items() if not isinstance(cfg, RunConfig | Staged)]
    if bad:
        raise TypeError(f"{module.__name__}.arms: arms {bad} are neither RunConfig nor Staged")
    return arms


class DeclaredRuns:
    """One test's declared arms as digests: which ``claim.run`` calls are allowed (a declared arm, an ancestor
    of one, or a staged arm once its ``after`` has run) and which declared arms were never loaded."""

    def __init__(self, arms: Declared):
        self.arms = dict(arms)
        self.allowed = {c.digest() for cfg in arms.values() if isinstance(cfg, RunConfig)
                        for c in with_ancestors(cfg)}
        self.allowed |= {c.digest() for cfg in arms.values() if isinstance(cfg, Staged) for c in with_ancestors(cfg.after)}
        self.resolved: dict[str, RunConfig] = {}  # staged arm name -> its built config
        self.loaded: set[str] = set()

    def admit(self, config: RunConfig, results: Mapping[str, Any]) -> bool:
        """Whether ``config`` is declared; ``results`` maps the digests of runs loaded so far to their results
        (staged arms are built from them). Marks it loaded."""
        for name, arm in self.arms.items():
            if isinstance(arm, Staged) and name not in self.resolved and arm.after.digest() in results:
                built = arm.build(results[arm.after.digest()])
                self.resolved[name] = built
                self.allowed |= {c.digest() for c in with_ancestors(built)}
        self.loaded.add(config.digest())
        return config.digest() in self.allowed

    def unloaded(self) -> list[str]:
        """Declared arms the test never loaded (a staged arm counts once built and loaded)."""
        out = []
        for name, arm in self.arms.items():
            cfg = self.resolved.get(name) if isinstance(arm, Staged) else arm
            if cfg is None or cfg.digest() not in self.loaded:
                out.append(name)
        return out
