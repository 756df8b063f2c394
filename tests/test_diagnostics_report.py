"""`opsft diagnose` end to end on tiny saved snapshots: JSON, markdown, PNG figures, the perf benchmark."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from opsft import cli
from opsft import diagnostics as D
from opsft.checkpoints import save_state
from opsft.organism.models import build_model

torch.set_num_threads(1)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


def _run_dir(tmp_path: Path, steps: int = 3) -> list[Path]:
    """A trainer-style run: snapshots/step_000000/model.safetensors, step_000050, ... of a perturbed nano."""
    model = build_model("nano", 0)
    folders = []
    for i in range(steps):
        folder = tmp_path / "snapshots" / f"step_{50 * i:06d}"
        save_state(model, folder / "model.safetensors")
        folders.append(folder)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3 * torch.randn_like(p))
    return folders


@pytest.fixture
def _cli(monkeypatch):
    """Parse argv with the real top-level `opsft` parser, this module registered as a command module."""
    monkeypatch.setattr(cli, "COMMAND_MODULES", ("opsft.diagnostics",))
    return lambda argv: cli.build_parser().parse_args(argv)


def test_diagnose_cli_writes_json_markdown_and_figures(tmp_path, _cli):
    folders = _run_dir(tmp_path)
    out = tmp_path / "out"
    args = _cli(["diagnose", *map(str, folders), "-o", str(out), "--k", "16", "--rank", "8"])
    assert args.func(args) == 0
    result = json.loads((out / "diagnostics.json").read_text())
    assert result["trajectory"]["labels"] == ["step_000050", "step_000100"]
    assert result["endpoint"]["settings"] == {"k": 16, "rank": 8, "alpha": 0.5}
    assert len(result["cosines"]["interval"]["global"]) == 2
    assert result["provenance"]["snapshots"] == [str(f) for f in folders]
    md = (out / "diagnostics.md").read_text()
    for heading in ("Endpoint", "trajectory", "Update cosines", "Update locations", "| q |"):
        assert heading in md
    for png in ("cosines.png", "trajectory.png", "locations.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_diagnose_cli_on_a_pair_and_on_a_missing_folder(tmp_path, _cli):
    before, after = _run_dir(tmp_path, steps=2)
    args = _cli(["diagnose", str(before), str(after), "-o", str(tmp_path / "pair")])
    assert args.func(args) == 0
    cosines = json.loads((tmp_path / "pair" / "diagnostics.json").read_text())["cosines"]
    assert cosines["interval"]["global"][0][0] == pytest.approx(1.0)
    args = _cli(["diagnose", str(before), str(tmp_path / "nowhere"), "-o", str(tmp_path / "x")])
    with pytest.raises(FileNotFoundError, match="nowhere"):
        args.func(args)


def test_markdown_reports_nan_by_tensor_name(tmp_path):
    states = [{n: p.detach().clone() for n, p in build_model("nano", s).named_parameters()} for s in (0, 1)]
    bad = "model.layers.1.self_attn.v_proj.weight"
    states[1][bad][0, 0] = math.nan
    result = D.diagnose(states, tmp_path, k=8, rank=4, subspace_k=4)
    md = D.render_markdown(result)
    assert "NaN values (not averaged away)" in md and bad in md
    assert "| NSS | nan |" in md


def test_benchmark_script_writes_perf_section(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "bench_diagnostics", ROOT / "scripts" / "bench_diagnostics.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    timings = bench.run(48)
    assert {label for label, _ in timings} >= {
        "principal_angles k=512",
        "stable_rank",
        "spectral_shift (NSS)",
    }
    assert all(seconds >= 0 for _, seconds in timings)
    perf = tmp_path / "perf.md"
    perf.write_text("# Perf\n\n<!-- begin:other -->\nkept\n<!-- end:other -->\n")
    from opsft.io import update_markdown_section

    update_markdown_section(perf, "diagnostics", bench.render(48, timings))
    text = perf.read_text()
    assert "kept" in text and "<!-- begin:diagnostics -->" in text and "48x48" in text


def test_benchmark_projection_counts_qwen3_8b_matrices():
    spec = importlib.util.spec_from_file_location(
        "bench_diagnostics", ROOT / "scripts" / "bench_diagnostics.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert sum(bench.QWEN3_8B_SHAPES.values()) == 7 * 36  # q k v o gate up down in 36 layers
    per_shape = dict.fromkeys(bench.QWEN3_8B_SHAPES, 10.0)
    text = bench.render(48, [("stable_rank", 0.5)], per_shape=per_shape)
    assert "| total | 252 | | 2520 (0.70 h) |" in text and "| stable_rank | 3.4 | 0.500 |" in text
    assert "projection, not a measurement" in text
