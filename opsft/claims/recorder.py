"""What the ``claim`` fixture hands a test: the claim, the scale, cached runs, and ``record``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opsft.claims.declared import DeclaredRuns, Staged, with_ancestors
from opsft.claims.evaluate import divergence_reason
from opsft.claims.registry import Claim
from opsft.claims.scored import Accuracy, encode
from opsft.claims.session import PROPERTY
from opsft.config import RunConfig

if TYPE_CHECKING:
    from opsft.runs import DivergedRunError, RunResult


def _cached_run(config: RunConfig) -> RunResult:
    """``opsft.runs.run``, imported on first use so that loading the plugin does not load torch."""
    from opsft.runs import run

    return run(config)


class UndeclaredRunError(RuntimeError):
    """A claim test asked for a run its module's ``arms`` does not declare (``opsft.claims.declared``)."""


class ClaimRecorder:
    """Trains through the cached run graph and records per-seed rows for one claim test.

    ``record`` and ``run`` append to the test item's ``user_properties`` (which reach the controller under
    pytest-xdist); the session turns them into verdicts at the end. With ``declared`` (the test's declared
    arms) ``run`` refuses an undeclared config before training it. Each recorded row carries ``weights``, the
    SHA-256 of the weights it measured (``arm_weights``), so that rules v3 count seeds whose weights are
    bit-identical as one seed. A run that diverged has no final weights: ``run`` raises its
    ``opsft.runs.DivergedRunError``, which the plugin turns into a divergence row (``diverged``).
    """

    def __init__(self, claim: Claim, scale_name: str, scale: Mapping[str, Any],
                 properties: list[tuple[str, Any]], runner: Callable[[RunConfig], RunResult] = _cached_run,
                 declared: DeclaredRuns | None = None):
        self.claim, self.scale_name, self.scale = claim, scale_name, scale
        self._properties, self._runner, self.declared = properties, runner, declared
        self._results: dict[str, RunResult] = {}
        self._weights: dict[str, str] = {}  # run digest -> SHA-256 of its final weights

    def _add(self, kind: str, data: dict) -> None:
        self._properties.append((PROPERTY, {"claim": self.claim.id, "kind": kind, "data": data}))

    def run(self, config: RunConfig) -> RunResult:
        """The cached result of ``config`` (trained once per digest), noted with its digest and wall time; an
        ``UndeclaredRunError`` for a config the test's ``arms`` does not declare."""
        if self.declared is not None and not self.declared.admit(config, self._results):
            raise UndeclaredRunError(
                f"claim {self.claim.id}: run {config.digest()} ({config.objective.name}, constraint "
                f"{config.constraint.mode}, {config.steps} steps, seed {config.seed}) is not among the runs its "
                "test module's arms() declares, nor their ancestors: declare it there")
        result = self._runner(config)
        self._weights[config.digest()] = result.weights_sha256()  # a DivergedRunError for a diverged run
        self._results[config.digest()] = result
        self._add("run", {"digest": config.digest(), "objective": config.objective.name,
                          "constraint": config.constraint.mode, "organism": config.model_label(), "seed": config.seed,
                          "steps": config.steps, "wall_time": result.wall_time, "folder": str(result.folder)})
        return result

    def arm_weights(self, arm: str) -> str:
        """The weights ``arm`` was measured on: its declared run's final-weights SHA-256 once that run was loaded;
        for an arm that is no declared run (a quantity over several runs, as C13's ``length``), one SHA-256 over
        every run this test loaded so far; "" when it loaded none (its values vary by the test's own seeded draws,
        as X01's simulation replicates)."""
        config = None if self.declared is None else self.declared.arms.get(arm)
        digest = getattr(config, "digest", lambda: None)()
        if digest in self._weights:
            return self._weights[digest]
        if not self._weights:
            return ""
        return hashlib.sha256("".join(sorted(self._weights.values())).encode()).hexdigest()

    def record(self, arm: str, seed: int, **values: float) -> dict[str, float]:
        """Record what ``arm`` (e.g. ``"sft"``) measured for ``seed``: metric name -> number; an ``Accuracy``
        also records its per-problem scores. Returns the values as plain floats, so the test can go on to
        assert on them."""
        if not arm or "." in arm:
            raise ValueError(f"claim {self.claim.id}: arm name {arm!r} must be non-empty and hold no '.'")
        bad = [m for m in values if "." in m]
        if bad or not values:
            raise ValueError(f"claim {self.claim.id}, arm {arm!r}: need metric names without '.', got {list(values)}")
        floats = {m: float(v) for m, v in values.items()}
        row: dict[str, Any] = {"arm": arm, "seed": int(seed), "values": floats}
        row["weights"] = self.arm_weights(arm)
        problems = {m: encode(v.per_problem) for m, v in values.items() if isinstance(v, Accuracy)}
        if problems:
            row["problems"] = problems
        self._add("row", row)
        return floats

    def diverged(self, err: DivergedRunError, seed: int) -> str:
        """Record that the test of ``seed`` stopped because the run ``err`` names diverged (a run it loaded, or a
        parent of one): a row of that run's arm (``arm_of``) with no values and ``diverged`` (step, digest, error),
        which makes every rule missing a measurement at ``seed`` UNDEFINED (``opsft.claims.evaluate``). Returns
        the reason, e.g. ``sft seed 2 diverged at step 37``."""
        row = {"arm": self.arm_of(err.digest), "seed": int(seed), "values": {},
               "diverged": {"step": err.step, "digest": err.digest, "error": str(err)}}
        self._add("row", row)
        return divergence_reason(row)

    def arm_of(self, digest: str) -> str:
        """The name of the declared arm whose run is ``digest`` (several joined by "+"); for a run that is only an
        ancestor of declared arms, its objective and those arms (``grpo (parent of opsft)``); else ``run
        <digest>``."""
        own, parent_of, objective = [], [], ""
        for name, arm in (self.declared.arms if self.declared is not None else {}).items():
            config = self.declared.resolved.get(name, arm)
            if isinstance(config, RunConfig) and config.digest() == digest:
                own.append(name)
                continue
            found = next((c for c in with_ancestors(config.after if isinstance(config, Staged) else config)
                          if c.digest() == digest), None)
            if found is not None:
                parent_of.append(name)
                objective = found.objective.name
        if own:
            return "+".join(own)
        return f"{objective} (parent of {', '.join(parent_of)})" if parent_of else f"run {digest[:16]}"
