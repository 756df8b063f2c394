"""The vLLM sampler backend: rollout layout and weight sync on CPU (a stand-in engine), and equivalence with the
HF backend on the organism where vLLM and a GPU exist."""

import sys
import types
from dataclasses import dataclass

import pytest
import torch

from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.sampling.hf import HFSampler
from opsft.sampling.vllm import (
    EngineSettings,
    VLLMSampler,
    completion_tokens,
    pad_rollout,
    vllm_unavailable_reason,
)

PROMPTS = [p.prompt for p in tasks.generate("arith", "test", 6, 1)]


def token_lists(rollout, tokenizer, prompts, n):
    """Unpadded prompt ids and completion ids (up to the first <eos>) of an HF rollout."""
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    lp = max(len(p) for p in prompt_ids)
    completions = [row[lp:][mask[lp:].bool()].tolist() for row, mask in zip(rollout.input_ids, rollout.attention_mask,
                                                                            strict=True)]
    assert len(completions) == len(prompts) * n
    return prompt_ids, completions


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_token_lists_are_laid_out_exactly_as_the_hf_backend_lays_them_out(temperature):
    tok = build_tokenizer()
    model = build_model("nano", seed=3)  # untrained: completions of every length, some ending in <eos>
    n = 1 if temperature == 0 else 4
    hf = HFSampler(tok).sample(model, PROMPTS, n, temperature, max_new_tokens=24, seed=0)
    prompt_ids, completions = token_lists(hf, tok, PROMPTS, n)
    if temperature > 0:
        assert any(c[-1] == tok.eos_token_id for c in completions) and any(len(c) == 24 for c in completions)
    ours = pad_rollout(tok, prompt_ids, completions, n)
    assert torch.equal(ours.input_ids, hf.input_ids)
    assert torch.equal(ours.attention_mask, hf.attention_mask)
    assert torch.equal(ours.completion_mask.long(), hf.completion_mask.long())
    assert ours.texts == hf.texts


def test_a_completion_is_cut_after_its_first_eos_and_a_stop_without_the_token_gets_it_back():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    roll = pad_rollout(tok, [[tok.bos_token_id, 5]], [[7, eos, 9, 9]], n=1)
    assert roll.input_ids[0].tolist() == [tok.bos_token_id, 5, 7, eos]
    assert roll.completion_mask[0].tolist() == [0, 1, 1]
    sample = types.SimpleNamespace(token_ids=(7, 8), finish_reason="stop")
    assert completion_tokens(sample, eos) == [7, 8, eos]
    assert completion_tokens(types.SimpleNamespace(token_ids=(7, 8), finish_reason="length"), eos) == [7, 8]
    with pytest.raises(ValueError, match="3 completions for 1 prompts x n=2"):
        pad_rollout(tok, [[1]], [[2], [3], [4]], n=2)


# --- a stand-in engine: the vllm calls the sampler makes, answered by an HF model the engine owns ---------


@dataclass
class FakeSamplingParams:
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    stop_token_ids: list
    detokenize: bool


class FakeEngine:
    """``LLM``'s surface the sampler uses: generate on token prompts, reset_prefix_cache, and the in-process
    model with ``load_weights``; greedy decoding by its own HF model (initialised differently from the policy)."""

    def __init__(self, tokenizer):
        self.model = build_model("nano", seed=99)
        self.model.load_weights = self._load_weights
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(
            driver_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=self.model))))
        self.tokenizer, self.loaded, self.resets, self.params = tokenizer, [], 0, []

    def _load_weights(self, weights):
        pairs = list(weights)
        self.loaded.append([name for name, _ in pairs])
        self.model.load_state_dict(dict(pairs))

    def reset_prefix_cache(self):
        self.resets += 1

    def generate(self, prompts, params, use_tqdm):
        self.params = params
        outputs = []
        for prompt, p in zip(prompts, params, strict=True):
            assert p.temperature == 0 and p.detokenize is False and p.stop_token_ids == [self.tokenizer.eos_token_id]
            ids = torch.tensor([prompt["prompt_token_ids"]])
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=p.max_tokens, eos_token_id=self.tokenizer.eos_token_id,
                                      pad_token_id=self.tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
            stopped = self.tokenizer.eos_token_id in out
            sample = types.SimpleNamespace(token_ids=out, finish_reason="stop" if stopped else "length")
            outputs.append(types.SimpleNamespace(outputs=[sample] * p.n))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=FakeSamplingParams))


def test_the_policy_is_synced_into_the_engine_before_each_sampling_call(fake_vllm):
    tok = build_tokenizer()
    policy = build_model("nano", seed=3)
    engine = FakeEngine(tok)
    sampler = VLLMSampler(engine, tok)
    hf = HFSampler(tok).sample(policy, PROMPTS, 1, 0.0, max_new_tokens=16, seed=0)
    ours = sampler.sample(policy, PROMPTS, 1, 0.0, max_new_tokens=16, seed=7)
    assert ours.texts == hf.texts and torch.equal(ours.input_ids, hf.input_ids)  # the engine decoded the policy
    assert engine.loaded[0] == list(policy.state_dict()) and engine.resets == 1 and sampler.syncs == 1
    assert [p.seed for p in engine.params] == [7 + i for i in range(len(PROMPTS))]
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)  # an optimizer step
    sampler.sample(policy, PROMPTS[:1], 1, 0.0, max_new_tokens=4, seed=0)
    assert sampler.syncs == 2 and torch.equal(next(engine.model.parameters()), next(policy.parameters()))


def test_a_fixed_teacher_engine_is_not_synced_and_needs_no_model(fake_vllm):
    tok = build_tokenizer()
    engine = FakeEngine(tok)
    roll = VLLMSampler(engine, tok, sync_weights=False).sample(None, PROMPTS[:2], 3, 0.0, max_new_tokens=8, seed=0)
    assert engine.loaded == [] and roll.input_ids.shape[0] == 6 and roll.input_ids.device.type == "cpu"
    with pytest.raises(ValueError, match="needs the policy model"):
        VLLMSampler(engine, tok).sample(None, PROMPTS[:1], 1, 0.0, max_new_tokens=4, seed=0)


def test_building_an_engine_without_vllm_or_a_gpu_says_what_is_missing(tmp_path):
    reason = vllm_unavailable_reason()
    if reason is None:
        pytest.skip("vllm and a GPU are present: nothing is missing")
    with pytest.raises(RuntimeError, match="cannot build the vLLM sampler"):
        VLLMSampler.from_folder(tmp_path, build_tokenizer())
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        EngineSettings(gpu_memory_utilization=1.5)


def test_importing_opsft_does_not_import_vllm():
    import subprocess

    code = "import sys, opsft, opsft.sampling, opsft.sampling.vllm, opsft.recipes; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the real engine (GPU machines with the gpu extra) ------------------------------------------------------


@pytest.mark.slow
def test_vllm_greedy_equals_hf_greedy_on_the_organism_after_a_weight_sync(tmp_path, cache_env):
    reason = vllm_unavailable_reason()
    if reason is not None:
        pytest.skip(f"vLLM equivalence needs vllm and a CUDA GPU: {reason}")
    from opsft.pretraining import build_organism

    org = build_organism("nano")
    folder = tmp_path / "base"
    org.base.save_pretrained(folder)
    org.tokenizer.save_pretrained(folder)
    prompts = [p.prompt for p in tasks.generate("arith", "test", 32, 1)]
    # The engine starts from the base; sampling the teacher through it must first load the teacher's weights.
    sampler = VLLMSampler.from_folder(folder, org.tokenizer, EngineSettings(dtype="float32", enforce_eager=True,
                                                                            gpu_memory_utilization=0.2))
    theirs = HFSampler(org.tokenizer).sample(org.teacher, prompts, 1, 0.0, max_new_tokens=48, seed=0)
    ours = sampler.sample(org.teacher, prompts, 1, 0.0, max_new_tokens=48, seed=0)
    assert ours.texts == theirs.texts
    assert torch.equal(ours.input_ids, theirs.input_ids) and torch.equal(ours.attention_mask, theirs.attention_mask)
