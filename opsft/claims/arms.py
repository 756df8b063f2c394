"""The training arms claim tests compare, built from the calibration's run settings so that arms shared
between claims (the GRPO run that supplies v, the SFT baseline) are trained once."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ablations.claims import ROW, organism
from opsft.calibrate import method_config
from opsft.config import ConstraintConfig, RunConfig


def baseline(method: str, scale: Mapping[str, Any], seed: int, row: Mapping[str, Any] = ROW) -> RunConfig:
    """The calibration's GRPO / OPD / SFT run of this scale and seed."""
    return method_config(method, dict(row), dict(scale), seed, organism(scale))


def constrained(sft: RunConfig, source: RunConfig, mode: str, **options: Any) -> RunConfig:
    """``sft`` under constraint ``mode`` with v from ``source`` at half its steps: the OPSFT efficiency
    recipe fixes v after 50 of 100 GRPO steps (OPSFT Table 2)."""
    return dataclasses.replace(sft, constraint=ConstraintConfig(mode=mode, direction_run=source,
                                                                direction_step=source.steps // 2, **options))
