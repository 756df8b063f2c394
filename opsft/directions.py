"""Update directions: v = sign(theta_after - theta_before), extracted tensor by tensor, stored compactly.

A direction maps every parameter name to an int8 tensor with values in {-1, 0, +1} (OPSFT section 3:
"v is the element-wise sign of parameters after on-policy training minus parameters before it").
Which differences count as "no change" is the *rule*:

- ``fp32``: the exact difference, v = sign(a - b).
- ``bf16``: the geometry paper's "bf16-visible" rule, v = sign(bf16(a) - bf16(b)); a weight whose two
  values round to the same bf16 number is unchanged.
- ``rel``: a relative tolerance, v = 0 where |a - b| <= eta * max(|a|, |b|) (eta = 1e-3 by default).

Checkpoint folders are streamed one tensor at a time (see ``opsft.checkpoints.iter_tensors``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal

import torch
from safetensors.torch import save_file

from opsft.checkpoints import WeightSource, iter_tensors, open_safetensors, tensor_names
from opsft.extensions import build
from opsft.io import atomic_write

Rule = Literal["fp32", "bf16", "rel"]
RULES: tuple[str, ...] = ("fp32", "bf16", "rel")
Packing = Literal["int8", "2bit"]
FORMAT_VERSION = "1"
BF16_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BF16_KERNEL_MIN_NUMEL = 1 << 20  # smaller tensors (organisms, tests) take the torch ops: no build for them


@dataclass
class Direction:
    """Per-parameter signs ``signs[name]`` (int8 in {-1, 0, +1}) and string metadata (rule, step, digests)."""

    signs: dict[str, torch.Tensor]
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, t in self.signs.items():
            check_signs(name, t, where="Direction.signs")

    @property
    def num_params(self) -> int:
        """Number of entries over all tensors."""
        return sum(t.numel() for t in self.signs.values())

    @property
    def fraction_nonzero(self) -> float:
        """Share of entries with v != 0: |{i : v_i != 0}| / N."""
        nnz = sum(int(t.count_nonzero()) for t in self.signs.values())
        return nnz / max(self.num_params, 1)

    def save(self, path: str | Path, packing: Packing = "int8") -> Path:
        """Write the direction as safetensors (int8, 1 byte/param, or 2-bit packed, 0.25 byte/param), atomically.

        The metadata records the rule, step, source digests, parameter count and fraction nonzero.
        """
        if packing not in ("int8", "2bit"):
            raise ValueError(f"packing must be 'int8' or '2bit', got {packing!r}")
        meta = dict(self.meta)
        meta.update(
            format_version=FORMAT_VERSION,
            packing=packing,
            num_params=str(self.num_params),
            fraction_nonzero=repr(self.fraction_nonzero),
        )
        if packing == "int8":
            tensors = {n: t.contiguous() for n, t in self.signs.items()}
        else:
            tensors = {n: pack_2bit(t) for n, t in self.signs.items()}
            meta["shapes"] = json.dumps({n: list(t.shape) for n, t in self.signs.items()})
        return atomic_write(path, lambda p: save_file(tensors, str(p), metadata=meta))

    @classmethod
    def load(cls, path: str | Path) -> Direction:
        """Read a direction written by ``save`` and check its dtype and values."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"direction file {path} does not exist")
        with open_safetensors(path) as fh:
            meta = dict(fh.metadata() or {})
            raw = {name: fh.get_tensor(name) for name in fh.keys()}
        packing = meta.get("packing", "int8")
        if packing == "2bit":
            shapes = json.loads(meta.get("shapes", "{}"))
            signs = {}
            for name, t in raw.items():
                if name not in shapes:
                    raise ValueError(f"direction file {path}: packed tensor {name!r} has no shape in metadata")
                signs[name] = unpack_2bit(t, tuple(shapes[name]), name=f"{path}:{name}")
        elif packing == "int8":
            signs = raw
        else:
            raise ValueError(f"direction file {path}: unknown packing {packing!r} in metadata")
        for name, t in signs.items():
            check_signs(name, t, where=f"direction file {path}")
        meta = {k: v for k, v in meta.items() if k not in ("shapes", "packing", "format_version")}
        return cls(signs=signs, meta=meta)


def check_signs(name: str, t: torch.Tensor, where: str) -> None:
    """Raise a ValueError naming ``where`` and ``name`` unless ``t`` is int8 with values in {-1, 0, 1}."""
    if t.dtype != torch.int8:
        raise ValueError(f"{where}: tensor {name!r} has dtype {t.dtype}, expected torch.int8 signs")
    if t.numel() and (int(t.min()) < -1 or int(t.max()) > 1):
        raise ValueError(f"{where}: tensor {name!r} has values outside {{-1, 0, 1}}")


def pack_2bit(signs: torch.Tensor) -> torch.Tensor:
    """Pack int8 signs into uint8, four per byte: code c = v + 1 in {0, 1, 2}, byte = sum_j c_j * 4^j."""
    codes = (signs.reshape(-1).to(torch.uint8) + 1) & 3  # -1 -> 0, 0 -> 1, 1 -> 2 (uint8 wraps -1 to 255)
    pad = (-codes.numel()) % 4
    codes = torch.cat([codes, codes.new_ones(pad)]).view(-1, 4)
    return codes[:, 0] | (codes[:, 1] << 2) | (codes[:, 2] << 4) | (codes[:, 3] << 6)


def unpack_2bit(packed: torch.Tensor, shape: tuple[int, ...], name: str = "tensor") -> torch.Tensor:
    """Inverse of ``pack_2bit``: uint8 bytes -> int8 signs of ``shape``; code 3 is an error naming ``name``."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"{name}: packed direction has dtype {packed.dtype}, expected torch.uint8")
    n = 1
    for s in shape:
        n *= s
    if packed.numel() != (n + 3) // 4:
        raise ValueError(f"{name}: {packed.numel()} packed bytes cannot hold shape {list(shape)}")
    codes = torch.stack([(packed >> s) & 3 for s in (0, 2, 4, 6)], dim=1).reshape(-1)[:n]
    if n and int(codes.max()) > 2:
        raise ValueError(f"{name}: packed direction holds values outside {{-1, 0, 1}}")
    return (codes.to(torch.int8) - 1).reshape(shape)


@functools.cache
def bf16_kernel() -> ModuleType | None:
    """The compiled one-pass bf16 rule (``csrc/bf16_signs.cpp``), built on first use once per CPU identity and
    source digest under the cache folder, like ``opsft.fused_adamw.kernel`` (``opsft.extensions.build``); None, with a warning, where it
    cannot be built (no C++ compiler or ninja): the rule then runs as torch ops, with the same signs."""
    try:
        return build("bf16_signs")
    except Exception as err:  # whatever the toolchain raised: the torch ops below give the same result
        warnings.warn(f"the bf16 rule's kernel could not be built ({err}); it runs as torch ops (slower)",
                      stacklevel=2)
        return None


def kernel_signs(before: torch.Tensor, after: torch.Tensor) -> tuple[torch.Tensor, bool, bool] | None:
    """(v, whether BEFORE holds a NaN, whether AFTER does) of the bf16 rule, from ``bf16_kernel``'s single pass;
    None where the kernel does not take the pair (it takes CPU tensors of one dtype in BF16_KERNEL_DTYPES, of
    at least BF16_KERNEL_MIN_NUMEL elements) or cannot be built."""
    takes = (before.device.type == after.device.type == "cpu" and before.dtype == after.dtype
             and before.dtype in BF16_KERNEL_DTYPES and before.numel() >= BF16_KERNEL_MIN_NUMEL)
    if not takes or (kernel := bf16_kernel()) is None:
        return None
    return kernel.bf16_signs(before.contiguous(), after.contiguous())


def sign_of_change(before: torch.Tensor, after: torch.Tensor, rule: Rule = "bf16", eta: float = 1e-3) -> torch.Tensor:
    """v = sign(after - before) under ``rule`` (see the module docstring), as int8.

    Exact: with gradual underflow, the floating difference of two numbers of one format is zero only when
    they are equal, and its rounding keeps the sign; so sign(fl(a - b)) = sign(a - b). The bf16 rule of two large
    CPU tensors runs in ``bf16_kernel``'s single pass where it can (``kernel_signs``), with the same signs (NaN,
    and inf - inf, give 0, as torch.sign(NaN) does)."""
    if rule == "bf16" and (fused := kernel_signs(before, after)) is not None:
        return fused[0]
    if rule == "bf16":
        a, b = after.to(torch.bfloat16), before.to(torch.bfloat16)
    elif rule in ("fp32", "rel"):
        dtype = torch.promote_types(torch.promote_types(after.dtype, before.dtype), torch.float32)
        a, b = after.to(dtype), before.to(dtype)
    else:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    v = torch.sub(a, b).sign_().to(torch.int8)
    if rule == "rel":
        unchanged = (a - b).abs() <= eta * torch.maximum(a.abs(), b.abs())
        v.masked_fill_(unchanged, 0)
    return v


def holds_nan(t: torch.Tensor) -> bool:
    """Whether ``t`` holds a NaN: one reduction pass, the elementwise check only on alarm."""
    return bool(t.sum().isnan() and t.isnan().any())


def nan_error(name: str, side: str) -> ValueError:
    """The error for tensor ``name`` of the ``side`` (BEFORE or AFTER) checkpoint holding NaN."""
    return ValueError(f"tensor {name!r} of the {side} checkpoint contains NaN")


def paired_tensors(
    before: WeightSource, after: WeightSource, check_nan: bool = True
) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """Yield ``(name, before_tensor, after_tensor)`` for every floating tensor in name order, one pair at a time.

    Raises a ValueError naming the first tensors present on one side only, or with different shapes, and
    (unless ``check_nan`` is False, for a caller that checks in its own pass) naming any tensor holding NaN.
    """
    names_b, names_a = sorted(tensor_names(before)), tensor_names(after)  # sorted: folders and modules align
    only_b, only_a = sorted(set(names_b) - set(names_a)), sorted(set(names_a) - set(names_b))
    if only_b or only_a:
        raise ValueError(
            f"checkpoints hold different tensors: only in BEFORE {only_b[:5]}, only in AFTER {only_a[:5]}"
        )
    for (name, tb), (_, ta) in zip(iter_tensors(before, names_b), iter_tensors(after, names_b), strict=True):
        if tb.shape != ta.shape:
            raise ValueError(f"tensor {name!r} has shape {list(tb.shape)} in BEFORE but {list(ta.shape)} in AFTER")
        if not (tb.is_floating_point() and ta.is_floating_point()):
            continue
        if check_nan:
            for side, t in (("BEFORE", tb), ("AFTER", ta)):
                if holds_nan(t):
                    raise nan_error(name, side)
        yield name, tb, ta


def checked_sign_of_change(name: str, before: torch.Tensor, after: torch.Tensor, rule: Rule,
                           eta: float) -> torch.Tensor:
    """``sign_of_change`` of the pair ``name``, raising ``paired_tensors``' error if either side holds NaN: the
    bf16 kernel finds NaN in the pass that computes v, the other paths check each side first."""
    fused = kernel_signs(before, after) if rule == "bf16" else None
    nans = fused[1:] if fused is not None else (holds_nan(before), holds_nan(after))
    for side, nan in zip(("BEFORE", "AFTER"), nans, strict=True):
        if nan:
            raise nan_error(name, side)
    return fused[0] if fused is not None else sign_of_change(before, after, rule, eta)


def source_digest(source: WeightSource) -> str:
    """A short provenance digest: SHA-256 of the safetensors headers and sizes for a folder (cheap, no full
    read), of every tensor's name, dtype, shape and bytes for an in-memory model or state dict."""
    h = hashlib.sha256()
    if isinstance(source, (str, Path)):
        path = Path(source)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        for f in files:
            with open(f, "rb") as fh:
                header_len = int.from_bytes(fh.read(8), "little")
                h.update(f.name.encode() + fh.read(header_len) + str(f.stat().st_size).encode())
    else:
        for name, t in iter_tensors(source):
            t = t.detach().contiguous().cpu()
            h.update(f"{name}|{t.dtype}|{list(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def extract(
    before: WeightSource,
    after: WeightSource,
    rule: Rule = "bf16",
    eta: float = 1e-3,
    step: int | None = None,
) -> Direction:
    """v = sign(theta_after - theta_before) per parameter under ``rule``; folders are streamed so that peak
    memory is about one tensor of each side plus the int8 output. Tied parameters appear once."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    signs = {name: checked_sign_of_change(name, tb, ta, rule, eta)
             for name, tb, ta in paired_tensors(before, after, check_nan=False)}
    meta = {
        "rule": rule,
        "step": "" if step is None else str(step),
        "before_digest": source_digest(before),
        "after_digest": source_digest(after),
    }
    if rule == "rel":
        meta["eta"] = repr(eta)
    return Direction(signs, meta)


def cmd_direction(args: argparse.Namespace) -> int:
    """``opsft direction``: v of two checkpoints, saved as safetensors, with a one-line summary."""
    direction = extract(args.before, args.after, rule=args.rule, eta=args.eta, step=args.step)
    direction.save(args.output, packing=args.packing)
    print(
        f"wrote {args.output}: {direction.num_params} parameters, "
        f"{100 * direction.fraction_nonzero:.3f}% nonzero (rule {args.rule})"
    )
    return 0
