"""Directions: extraction rules, streaming from sharded folders, storage, comparisons, masks, CLI, bad input."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest
import torch
import torch.utils.cpp_extension
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from opsft import directions
from opsft.cli import build_parser
from opsft.compare import compare, compare_checkpoints, compare_directions, to_markdown
from opsft.directions import Direction, extract, pack_2bit, sign_of_change, unpack_2bit
from opsft.masks import fisher_diagonal, subspace_bases, top_fraction
from opsft.organism.models import build_model

pytestmark = pytest.mark.usefixtures("cache_env")  # the bf16 rule's kernel builds into the session's cache


def write_sharded(state: dict[str, torch.Tensor], folder, shards: int = 2):
    """A Hugging Face style checkpoint folder: model-0000k-of-0000n.safetensors + index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(state)
    weight_map = {}
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n].contiguous() for n in names[k::shards]}
        save_file(part, str(folder / fname))
        weight_map.update(dict.fromkeys(part, fname))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def perturbed(model: torch.nn.Module, seed: int, scale: float = 1e-3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n, p in model.named_parameters():
        keep = torch.rand(p.shape, generator=g) < 0.5  # half the weights unchanged
        out[n] = torch.where(keep, p.detach(), p.detach() + scale * torch.randn(p.shape, generator=g))
    return out


def test_rules_against_closed_forms():
    before = torch.tensor([1.0, 1.0, 1.0, -2.0, 0.5, 3.0])
    after = torch.tensor([1.0 + 2**-20, 1.0 + 2**-6, 1.0 - 2**-6, -2.0, 0.5 + 1e-4, 3.0 - 1e-2])
    assert sign_of_change(before, after, "fp32").tolist() == [1, 1, -1, 0, 1, -1]
    # bf16 keeps 8 significant bits: near 1 the spacing is 2^-7, so 2^-20 rounds away; near 0.5, 2^-8.
    assert sign_of_change(before, after, "bf16").tolist() == [0, 1, -1, 0, 0, -1]
    # rel: unchanged when |a - b| <= eta max(|a|, |b|), eta = 1e-3
    assert sign_of_change(before, after, "rel").tolist() == [0, 1, -1, 0, 0, 1 * -1]
    assert sign_of_change(before, after, "rel", eta=0.01).tolist() == [0, 1, -1, 0, 0, 0]
    with pytest.raises(ValueError, match="rule must be one of"):
        sign_of_change(before, after, "fp16")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**16), rule=st.sampled_from(["fp32", "bf16"]))
def test_rules_agree_with_a_float64_reference(n, seed, rule):
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(n, generator=g)
    a = b + torch.randn(n, generator=g) * 10.0 ** torch.randint(-9, 0, (n,), generator=g)
    cast = (lambda t: t.to(torch.bfloat16).double()) if rule == "bf16" else (lambda t: t.double())
    expected = np.sign(cast(a).numpy() - cast(b).numpy()).astype(np.int8)
    assert np.array_equal(sign_of_change(b, a, rule).numpy(), expected)


def bf16_reference(x: np.ndarray) -> np.ndarray:
    """float64 values rounded to bf16, in float64: 8 significant bits (exponent floored at bf16's -126, below
    which the spacing is 2^-133), to nearest with ties to even, inf beyond the largest bf16; inf and NaN kept."""
    _, e = np.frexp(x)  # x = m 2^e with 1/2 <= |m| < 1
    ulp = np.exp2(np.maximum(e - 1, -126) - 7)
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = np.rint(x / ulp) * ulp
        rounded = np.where(np.abs(rounded) >= 2.0**128, np.copysign(np.inf, x), rounded)
    return np.where(np.isfinite(x), rounded, x)


def bf16_rule_reference(before: torch.Tensor, after: torch.Tensor) -> np.ndarray:
    """sign(bf16(after) - bf16(before)) in float64 as int8, 0 where the difference is NaN (a NaN, or inf - inf)."""
    with np.errstate(invalid="ignore"):
        d = bf16_reference(after.double().numpy()) - bf16_reference(before.double().numpy())
    return np.nan_to_num(np.sign(d), nan=0.0).astype(np.int8)


BIG, BF16_MAX, TIE = torch.finfo(torch.float32).max, torch.finfo(torch.bfloat16).max, 2.0**-8
BF16_EDGES = [  # (before, after, v under the bf16 rule); TIE is half of bf16's spacing at 1
    (1.0, 1.0, 0), (1.0, 1.0 + 2**-10, 0), (1.0, 1.0 + TIE, 0), (1.0, 1.0 + 3 * TIE, 1),  # ties go to even
    (1.0 + 2**-7, 1.0 + TIE, -1), (-1.0, -1.0 - TIE, 0), (-1.0, -1.0 - 3 * TIE, -1), (0.0, -0.0, 0),
    (-0.0, 0.0, 0), (0.0, 2.0**-149, 0), (-(2.0**-149), 2.0**-149, 0), (0.0, 2.0**-133, 1), (-(2.0**-133), 0.0, 1),
    (2.0**-126, 2.0**-126 * (1 + 2**-9), 0), (math.nan, 1.0, 0), (1.0, math.nan, 0), (math.nan, math.nan, 0),
    (-math.nan, 0.0, 0), (math.inf, math.inf, 0), (-math.inf, math.inf, 1), (math.inf, -math.inf, -1),
    (math.inf, 1.0, -1), (-math.inf, -BIG, 0), (BIG, math.inf, 0), (BF16_MAX, BIG, 1), (BIG, -BIG, -1),
    (BF16_MAX, (2 - TIE) * 2.0**127, 1), (65504.0, 65520.0, 0), (1e-8, 2e-8, 1),  # fp16: 65520 -> inf
]


def bf16_rule_cases(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(before, after) of ``dtype``: BF16_EDGES, random bit patterns (NaN payloads, infinities, subnormals),
    pairs a few bf16 steps apart or inside one step, small random updates, and for bf16 and fp16 random bit
    patterns of that format."""
    g = torch.Generator().manual_seed(0)
    before, after = (torch.tensor(side, dtype=torch.float32) for side in list(zip(*BF16_EDGES, strict=True))[:2])
    bits = torch.randint(-(2**31), 2**31, (2, 4096), generator=g, dtype=torch.int64).to(torch.int32)
    near = bits[0] ^ torch.randint(0, 2**17, (4096,), generator=g, dtype=torch.int32)
    small = torch.randn(4096, generator=g)
    step = small * 10.0 ** torch.randint(-9, 0, (4096,), generator=g) * (torch.rand(4096, generator=g) < 0.5)
    before = torch.cat([before, bits[0].view(torch.float32), bits[0].view(torch.float32), small]).to(dtype)
    after = torch.cat([after, bits[1].view(torch.float32), near.view(torch.float32), small + step]).to(dtype)
    if dtype == torch.float32:
        return before, after
    halves = torch.randint(-(2**15), 2**15, (2, 4096), generator=g, dtype=torch.int16).view(dtype)
    return torch.cat([before, halves[0]]), torch.cat([after, halves[1]])


def test_the_float64_reference_gives_the_edge_cases_by_hand():
    before, after = bf16_rule_cases(torch.float32)
    assert bf16_rule_reference(before, after)[: len(BF16_EDGES)].tolist() == [v for _, _, v in BF16_EDGES]


@pytest.fixture(params=["kernel", "torch"])
def rule_path(request, monkeypatch):
    """The bf16 rule's path: "kernel" (compiled once per session) or "torch" (the torch ops that run where
    the kernel cannot be built)."""
    if request.param == "kernel":
        monkeypatch.setattr(directions, "BF16_KERNEL_MIN_NUMEL", 0)
        assert directions.bf16_kernel() is not None
    else:
        monkeypatch.setattr(directions, "bf16_kernel", lambda: None)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bf16_rule_equals_a_float64_reference_on_edge_cases(rule_path, dtype):
    before, after = bf16_rule_cases(dtype)
    v = sign_of_change(before, after, "bf16")
    assert v.dtype == torch.int8 and np.array_equal(v.numpy(), bf16_rule_reference(before, after))
    square_b, square_a = before[: 64 * 64].view(64, 64).t(), after[: 64 * 64].view(64, 64).t()  # not contiguous
    v = sign_of_change(square_b, square_a, "bf16")
    assert v.shape == (64, 64) and np.array_equal(v.numpy(), bf16_rule_reference(square_b, square_a))


def test_bf16_rule_runs_as_torch_ops_where_the_kernel_cannot_be_built(monkeypatch):
    def no_compiler(**kwargs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    monkeypatch.setattr(directions, "BF16_KERNEL_MIN_NUMEL", 0)
    before, after = bf16_rule_cases(torch.float32)
    directions.bf16_kernel.cache_clear()
    try:
        with pytest.warns(UserWarning, match="kernel could not be built .no C.. compiler found"):
            v = sign_of_change(before, after, "bf16")
    finally:
        directions.bf16_kernel.cache_clear()  # later tests build (or load) the kernel again
    assert np.array_equal(v.numpy(), bf16_rule_reference(before, after))


def test_extract_streams_sharded_folders_like_in_memory_sources(tmp_path):
    model = build_model("nano", seed=0)
    after = perturbed(model, 1)
    v_mem = extract(model, after, rule="fp32", step=50)
    assert "lm_head.weight" not in v_mem.signs  # tied embeddings appear once
    before_dir = write_sharded({n: p.detach() for n, p in model.named_parameters()}, tmp_path / "before")
    after_dir = write_sharded(after, tmp_path / "after", shards=3)
    v_dir = extract(before_dir, after_dir, rule="fp32", step=50)
    assert v_dir.signs.keys() == v_mem.signs.keys()
    assert all(torch.equal(v_dir.signs[n], v_mem.signs[n]) for n in v_mem.signs)
    assert 0.4 < v_dir.fraction_nonzero < 0.6 and v_dir.meta["step"] == "50" and v_dir.meta["rule"] == "fp32"
    assert len(v_dir.meta["before_digest"]) == 16 and v_dir.meta["before_digest"] != v_dir.meta["after_digest"]


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_pack_2bit_round_trips(shape, seed):
    v = torch.randint(-1, 2, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int8)
    packed = pack_2bit(v)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(v.numel() / 4)
    assert torch.equal(unpack_2bit(packed, tuple(shape)), v)


@pytest.mark.parametrize("packing,bytes_per_param", [("int8", 1.0), ("2bit", 0.25)])
def test_save_load_round_trip_and_size(tmp_path, packing, bytes_per_param):
    g = torch.Generator().manual_seed(0)
    v = Direction({"a.weight": torch.randint(-1, 2, (64, 128), generator=g, dtype=torch.int8),
                   "b.bias": torch.randint(-1, 2, (7,), generator=g, dtype=torch.int8)}, {"rule": "bf16", "step": "5"})
    path = v.save(tmp_path / "v.safetensors", packing=packing)
    w = Direction.load(path)
    assert all(torch.equal(w.signs[n], v.signs[n]) for n in v.signs)
    assert w.meta["rule"] == "bf16" and w.meta["step"] == "5" and w.meta["num_params"] == str(v.num_params)
    assert float(w.meta["fraction_nonzero"]) == pytest.approx(v.fraction_nonzero)
    tensor_bytes = path.stat().st_size - 8 - int.from_bytes(path.read_bytes()[:8], "little")
    assert tensor_bytes / v.num_params == pytest.approx(bytes_per_param, abs=0.01)
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_bad_direction_files_give_clear_errors(tmp_path):
    save_file({"w": torch.zeros(3, dtype=torch.float32)}, str(tmp_path / "float.safetensors"))
    with pytest.raises(ValueError, match=r"'w' has dtype torch.float32, expected torch.int8"):
        Direction.load(tmp_path / "float.safetensors")
    save_file({"w": torch.tensor([0, 2, -1], dtype=torch.int8)}, str(tmp_path / "range.safetensors"))
    with pytest.raises(ValueError, match=r"range.safetensors: tensor 'w' has values outside"):
        Direction.load(tmp_path / "range.safetensors")
    save_file({"w": torch.tensor([255], dtype=torch.uint8)}, str(tmp_path / "code3.safetensors"),
              metadata={"packing": "2bit", "shapes": json.dumps({"w": [4]})})
    with pytest.raises(ValueError, match="code3.safetensors:w: packed direction holds values outside"):
        Direction.load(tmp_path / "code3.safetensors")
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        Direction.load(tmp_path / "missing.safetensors")


def test_failed_save_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(directions, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        Direction({"w": torch.zeros(3, dtype=torch.int8)}).save(tmp_path / "v.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_bad_checkpoints_are_named(rule_path):
    before = {"a": torch.zeros(2, 3), "b": torch.zeros(4)}
    with pytest.raises(ValueError, match=r"tensor 'b' of the AFTER checkpoint contains NaN"):
        extract(before, {"a": torch.ones(2, 3), "b": torch.tensor([0.0, math.nan, 0.0, 0.0])})
    with pytest.raises(ValueError, match=r"tensor 'a' of the BEFORE checkpoint contains NaN"):
        extract({"a": torch.full((2, 3), math.nan), "b": torch.zeros(4)}, before)
    with pytest.raises(ValueError, match=r"'a' has shape \[2, 3\] in BEFORE but \[3, 2\] in AFTER"):
        extract(before, {"a": torch.ones(3, 2), "b": torch.zeros(4)})
    with pytest.raises(ValueError, match=r"only in BEFORE \['b'\], only in AFTER \['c'\]"):
        extract(before, {"a": torch.ones(2, 3), "c": torch.zeros(4)})


def numpy_metrics(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    sa, sb = a != 0, b != 0
    both = sa & sb
    return {
        "jaccard": both.sum() / (sa | sb).sum(),
        "sign_agreement": (a[both] == b[both]).mean(),
        "sign_cosine": float(a.astype(float) @ b.astype(float)) / np.sqrt(sa.sum() * sb.sum()),
    }


def test_compare_against_numpy_overall_and_per_module():
    g = torch.Generator().manual_seed(0)
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
             "model.embed_tokens.weight", "model.norm.weight"]
    a = Direction({n: torch.randint(-1, 2, (20, 10), generator=g, dtype=torch.int8) for n in names})
    b = Direction({n: torch.where(torch.rand(20, 10, generator=g) < 0.7, a.signs[n],
                                  torch.randint(-1, 2, (20, 10), generator=g, dtype=torch.int8)) for n in names})
    rows = compare_directions(a, b)
    assert list(rows) == ["overall", "q", "down", "embed", "norm"]
    flat = [np.concatenate([d.signs[n].numpy().ravel() for n in names]) for d in (a, b)]
    for key, value in numpy_metrics(*flat).items():
        assert rows["overall"][key] == pytest.approx(value)
    for key, value in numpy_metrics(a.signs[names[1]].numpy().ravel(), b.signs[names[1]].numpy().ravel()).items():
        assert rows["down"][key] == pytest.approx(value)
    assert math.isnan(rows["overall"]["delta_cosine"])
    table = to_markdown(rows)
    assert table.splitlines()[0].startswith("| module | params") and "| norm | 200 |" in table


def test_compare_checkpoints_adds_the_raw_delta_cosine():
    g = torch.Generator().manual_seed(0)
    base = {"x.k_proj.weight": torch.randn(30, 4, generator=g)}
    da, db = torch.randn(30, 4, generator=g), torch.randn(30, 4, generator=g)
    rows = compare_checkpoints(base, {k: t + da for k, t in base.items()}, base,
                               {k: t + db for k, t in base.items()}, rule="fp32")
    a64 = ((base["x.k_proj.weight"] + da).double() - base["x.k_proj.weight"].double()).numpy().ravel()
    b64 = ((base["x.k_proj.weight"] + db).double() - base["x.k_proj.weight"].double()).numpy().ravel()
    assert rows["k"]["delta_cosine"] == pytest.approx(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64))
    with pytest.raises(ValueError, match=r"'v' is missing from A"):
        compare(Direction({"w": torch.zeros(2, dtype=torch.int8)}), Direction({"v": torch.zeros(2, dtype=torch.int8)}))


def test_cli_direction_and_compare(tmp_path, capsys):
    parser = build_parser()
    model = build_model("nano", seed=0)
    before = write_sharded({n: p.detach() for n, p in model.named_parameters()}, tmp_path / "base")
    runs = [write_sharded(perturbed(model, s, scale=0.1), tmp_path / f"run{s}") for s in (1, 2)]
    for i, run in enumerate(runs):
        args = parser.parse_args(["direction", str(before), str(run), "-o", str(tmp_path / f"v{i}.safetensors"),
                                  "--rule", "bf16", "--packing", "2bit"])
        assert args.func(args) == 0
    assert Direction.load(tmp_path / "v0.safetensors").meta["rule"] == "bf16"
    args = parser.parse_args(["compare", str(tmp_path / "v0.safetensors"), str(tmp_path / "v1.safetensors")])
    capsys.readouterr()
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("| module |") and "| overall |" in out and "| q |" in out
    args = parser.parse_args(["compare", str(runs[0]), str(runs[1]), "--base", str(before)])
    args.func(args)
    assert "| embed |" in capsys.readouterr().out


class BiasOnlyLM(torch.nn.Module):
    """logits_t = b for every position: log p(y) = sum_t (b_{y_t} - logsumexp(b)), gradient = counts - n softmax(b)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(vocab, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None):
        return argparse.Namespace(logits=self.bias.expand(*input_ids.shape, -1))


def test_fisher_diagonal_matches_closed_form():
    torch.manual_seed(0)
    model, vocab = BiasOnlyLM(5), 5
    ids = torch.randint(0, vocab, (6, 4))
    labels = ids.clone()
    labels[:, :2] = -100  # prompt tokens carry no likelihood
    batches = [{"input_ids": ids[:3], "attention_mask": torch.ones_like(ids[:3]), "labels": labels[:3]},
               {"input_ids": ids[3:], "attention_mask": torch.ones_like(ids[3:]), "labels": labels[3:]}]
    fisher = fisher_diagonal(model, batches)["bias"]
    p = torch.softmax(model.bias.detach(), 0).numpy()
    expected = np.zeros(vocab)
    for row in labels.numpy():
        targets = row[1:][row[1:] >= 0]
        grad = np.bincount(targets, minlength=vocab) - len(targets) * p
        expected += grad**2 / len(labels)
    assert np.allclose(fisher.numpy(), expected, rtol=1e-5)
    mask = top_fraction({"bias": fisher}, 0.4)["bias"]
    assert mask.sum() == 2 and set(np.flatnonzero(mask.numpy())) == set(np.argsort(expected)[-2:])


def test_subspace_bases_are_the_top_right_singular_vectors():
    g = torch.Generator().manual_seed(0)
    before = {"w": torch.randn(12, 8, generator=g), "b": torch.randn(8, generator=g)}
    after = {"w": before["w"] + torch.randn(12, 8, generator=g), "b": before["b"]}
    bases = subspace_bases(before, after, rank=3)
    assert list(bases) == ["w"] and bases["w"].shape == (8, 3)
    _, _, vt = np.linalg.svd((after["w"].double() - before["w"].double()).numpy())
    proj = bases["w"].double().numpy() @ bases["w"].double().numpy().T
    assert np.allclose(proj, vt[:3].T @ vt[:3], atol=1e-6)
