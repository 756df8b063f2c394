"""scripts/gpu_check.py: the GPU-path smoke check, its CPU run with the HF backend, and its failure modes."""

import importlib.util
import sys
from pathlib import Path

import pytest

from opsft.sampling.vllm import vllm_unavailable_reason

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_check"]


@pytest.mark.slow
def test_the_whole_pipeline_runs_on_cpu_with_the_hf_backend(gpu_check, cache_env, tmp_path, capsys):
    assert gpu_check.main(["--backend", "hf", "--organism", "nano", "--tiny", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for phase in ("| build organism |", "| GRPO |", "| extract v |", "| OPSFT |", "| evaluate |", "| all |"):
        assert phase in out
    for model in ("| base |", "| GRPO |", "| OPSFT |"):
        assert model in out
    assert "gpu_check passed" in out


@pytest.mark.slow
def test_an_opsft_step_against_v_fails_the_check(gpu_check, cache_env, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "constrain", lambda *args, **kwargs: type("NoHook", (), {"remove": lambda self: None})())
    with pytest.raises(gpu_check.CheckFailed, match="OPSFT moved .* against v"):
        gpu_check.main(["--backend", "hf", "--organism", "nano", "--tiny", "--workdir", str(tmp_path)])


def test_the_check_fails_over_its_time_budget(gpu_check, monkeypatch, capsys):
    report = {"seconds": {"GRPO": {"rollout": 1.0, "train": 2.0, "total": 3.0}}, "accuracy": {"base": 0.5},
              "v_nonzero": 0.25, "backend": "hf", "organism": "nano", "device": "cpu"}
    monkeypatch.setattr(gpu_check, "run_check", lambda *args: report)
    with pytest.raises(gpu_check.CheckFailed, match="over its budget of 0 s"):
        gpu_check.main(["--backend", "hf", "--budget-s", "0"])
    out = capsys.readouterr().out
    assert "| GRPO | 1.0 | 2.0 | - | 3.0 |" in out and "| all | 1.0 | 2.0 | 0.0 | 3.0 |" in out
    assert "v: 25.00% of weights nonzero" in out and "| base | 50.0 |" in out


def test_without_a_gpu_or_vllm_the_check_exits_2_and_says_what_is_missing(gpu_check, capsys):
    reason = vllm_unavailable_reason()
    if reason is None:
        pytest.skip("vllm and a GPU are present: the check would run")
    assert gpu_check.main([]) == 2
    assert reason in capsys.readouterr().err
