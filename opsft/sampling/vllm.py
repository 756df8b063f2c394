"""vLLM backend of the sampler interface: a colocated engine in the training process, fed the policy's
weights before every sampling call (so after every optimizer step, since a rollout source samples once a step).

vLLM is optional (the ``gpu`` extra) and needs a CUDA GPU: importing this module never imports vllm; building a
sampler does, and says what is missing. The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
executor ``external_launcher`` as TRL's colocate mode does), so the weights go from the policy's tensors to the
engine's model with ``load_weights`` and no copy through the host; under torchrun every rank holds its own engine.

Token in, token out: prompts are tokenized by the project's tokenizer and completions decoded by it, so the
engine never loads a tokenizer (``skip_tokenizer_init``) and a rollout is laid out exactly as the HF backend
lays it out (left-padded prompt, completion up to and including the first <eos>, padding after).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from opsft.config import EngineSettings
from opsft.constraints import unwrap_model
from opsft.sampling.base import Rollout

INSTALL_HINT = "install the GPU extra on a CUDA machine: pip install -e '.[gpu]'"


def vllm_unavailable_reason() -> str | None:
    """Why a vLLM engine cannot be built here (vllm not importable, or no CUDA GPU), or None when it can."""
    try:
        import vllm  # noqa: F401
    except ImportError as err:
        return f"vllm is not installed ({err}); {INSTALL_HINT}"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False); the vLLM backend needs one"
    return None


def _colocated_environment() -> None:
    """Environment of an in-process engine: no engine-core subprocess, and the torch.distributed rendezvous
    of a single process unless torchrun already set one."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # load_weights needs the engine's model in this process
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29513")):
        os.environ.setdefault(key, value)


def build_engine(folder: str | Path, settings: EngineSettings) -> Any:
    """A colocated ``vllm.LLM`` over a local Hugging Face model folder (never a hub name)."""
    reason = vllm_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot build the vLLM sampler: {reason}")
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"vLLM engine: {folder} is not a local model folder (no config.json)")
    _colocated_environment()
    from vllm import LLM

    return LLM(model=str(folder), skip_tokenizer_init=True, distributed_executor_backend="external_launcher",
               tensor_parallel_size=1, enable_prefix_caching=True, **asdict(settings))


def engine_model(llm: Any) -> torch.nn.Module:
    """The engine's own model (in this process), whose ``load_weights`` takes (name, tensor) pairs."""
    try:
        return llm.llm_engine.model_executor.driver_worker.model_runner.model
    except AttributeError as err:
        raise RuntimeError("the vLLM engine's model is not reachable in this process (was it built with "
                           "VLLM_ENABLE_V1_MULTIPROCESSING=0 and the external_launcher executor?)") from err


def policy_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, full tensor) of every weight of a policy, DDP-unwrapped; FSDP2 shards are gathered
    one tensor at a time (a collective: every rank must iterate in the same order)."""
    for name, tensor in unwrap_model(model).state_dict().items():
        yield name, tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def pad_rollout(tokenizer: PreTrainedTokenizerBase, prompt_ids: list[list[int]], completions: list[list[int]], n: int,
                device: torch.device | str = "cpu") -> Rollout:
    """A Rollout from token lists: prompt i (repeated ``n`` times, samples adjacent) left-padded to the longest
    prompt, each completion cut after its first <eos> and right-padded to the longest completion, the layout of
    ``HFSampler``. Shapes: input_ids/attention_mask (N, Lp + Lc), completion_mask (N, Lp + Lc - 1)."""
    if len(completions) != len(prompt_ids) * n:
        raise ValueError(f"{len(completions)} completions for {len(prompt_ids)} prompts x n={n}")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    cut = [c[: c.index(eos) + 1] if eos in c else list(c) for c in completions]
    lp = max(len(p) for p in prompt_ids)
    lc = max(1, max(len(c) for c in cut))
    input_ids = torch.full((len(cut), lp + lc), pad, dtype=torch.long)  # (N, L)
    attention = torch.zeros((len(cut), lp + lc), dtype=torch.long)  # (N, L)
    for row, completion in enumerate(cut):
        prompt = prompt_ids[row // n]
        input_ids[row, lp - len(prompt) : lp] = torch.tensor(prompt)
        input_ids[row, lp : lp + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention[row, lp - len(prompt) : lp + len(completion)] = 1
    target_is_completion = torch.zeros_like(attention)  # (N, L)
    target_is_completion[:, lp:] = attention[:, lp:]
    texts = tokenizer.batch_decode(cut, skip_special_tokens=True)
    return Rollout(input_ids.to(device), attention.to(device), target_is_completion[:, 1:].to(device), texts)


def completion_tokens(sample: Any, eos: int) -> list[int]:
    """A vLLM completion's token ids, ending in <eos> when the engine stopped on it (whether or not the engine
    kept the stop token in ``token_ids``)."""
    ids = list(sample.token_ids)
    if sample.finish_reason == "stop" and eos not in ids:
        ids.append(eos)
    return ids


class VLLMSampler:
    """Samples with a colocated vLLM engine. With ``sync_weights`` (a policy being trained) the weights of the
    ``model`` passed to ``sample`` are loaded into the engine first and its prefix cache is reset; without
    (a fixed teacher) the engine serves the weights it was built from and ``model`` may be None."""

    def __init__(self, llm: Any, tokenizer: PreTrainedTokenizerBase, *, sync_weights: bool = True):
        self.llm, self.tokenizer, self.sync_weights = llm, tokenizer, sync_weights
        self.syncs = 0

    @classmethod
    def from_folder(cls, folder: str | Path, tokenizer: PreTrainedTokenizerBase,
                    settings: EngineSettings | None = None, *, sync_weights: bool = True) -> VLLMSampler:
        """A sampler over an engine built from a local model folder (the policy's initial weights), with
        ``settings`` (default: ``EngineSettings()``)."""
        return cls(build_engine(folder, settings or EngineSettings()), tokenizer, sync_weights=sync_weights)

    @torch.no_grad()
    def load_policy(self, model: torch.nn.Module) -> None:
        """Copy the policy's current weights into the engine (cast to its dtype) and drop cached prefixes,
        whose keys and values the old weights computed."""
        engine_model(self.llm).load_weights(policy_weights(model))
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def sample(
        self, model: torch.nn.Module | None, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
        seed: int, top_p: float = 1.0,
    ) -> Rollout:
        """``n`` completions per prompt (greedy when ``temperature == 0``), stopped at <eos> or the budget; request
        i is seeded ``seed + i``. Tensors land on ``model``'s device (CPU without a model)."""
        from vllm import SamplingParams

        if self.sync_weights:
            if model is None:
                raise ValueError("VLLMSampler(sync_weights=True).sample needs the policy model to sync from")
            self.load_policy(model)
        prompt_ids = [self.tokenizer(p)["input_ids"] for p in prompts]
        params = [SamplingParams(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                                 max_tokens=max_new_tokens, seed=seed + i, stop_token_ids=[self.tokenizer.eos_token_id],
                                 detokenize=False)
                  for i in range(len(prompts))]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        completions = [completion_tokens(sample, self.tokenizer.eos_token_id) for out in outputs for sample in out.outputs]
        device = next(model.parameters()).device if model is not None else torch.device("cpu")
        return pad_rollout(self.tokenizer, prompt_ids, completions, n, device)
