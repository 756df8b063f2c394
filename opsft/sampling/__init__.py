"""Samplers turn prompts into completions with the current policy. ``hf`` (CPU default) ships here; a vLLM
backend lives behind the ``gpu`` extra."""

from opsft.sampling.base import Rollout, Sampler
from opsft.sampling.hf import HFSampler

__all__ = ["HFSampler", "Rollout", "Sampler"]
