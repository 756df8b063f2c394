"""Pinned CPU numerics: the settings under which a computation's bits depend on the commit and the seed, not on
which x86-64 CPU model (AVX2 or newer) ran it.

The same commit once pretrained a different ``micro`` organism on an Intel Xeon than on an AMD EPYC, because the
numeric libraries pick their kernels per CPU. ``PINNED_SETTINGS`` fixes each choice to the AVX2 kernels every
such CPU has:

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's vectorised kernels (softmax, attention, elementwise, reductions) run
  their AVX2 build; on an AVX-512 CPU the default AVX-512 build rounds differently (it changed every weight of
  the nano organism on an AMD EPYC);
- ``MKL_CBWR=AVX2,STRICT``: MKL's conditional numerical reproducibility, its AVX2 code path on any CPU that has
  AVX2 (fp32 matrix products; by default MKL takes its AVX-512 kernels on Intel CPUs and AVX2 on AMD ones);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN, which computes bf16 matrix products, stays on AVX2 (on a CPU with
  AVX512_BF16 it otherwise uses those instructions: other bits for every bf16-parameter run, 3x faster there).

The project's C++ kernels are compiled for ``x86-64-v3`` (AVX2, FMA) when pinned (``extension_march``).

``pin()`` applies them (``opsft/__init__.py`` calls it, so every process that imports the project, a worker
included, pins before it computes) unless ``OPSFT_NUMERICS=native`` asks for the CPU's own fastest kernels.
The mode is part of every cache digest (``opsft.digest``) and of every run's provenance (``record``), so
native results never mix with pinned ones. The libraries read these variables when torch first runs a kernel,
so pinning after ``import torch`` works until then; ``pin`` checks ATen's capability when torch is loaded.
This module imports nothing of the project and does not import torch.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ENV = "OPSFT_NUMERICS"
MODES = ("pinned", "native")
PINNED_SETTINGS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PINNED_MARCH = "x86-64-v3"


class NumericsError(RuntimeError):
    """The numerics asked for cannot be had in this process (unknown mode, no AVX2, a conflicting setting)."""


def mode() -> str:
    """The numerics mode asked for by ``$OPSFT_NUMERICS`` (default ``pinned``); a NumericsError listing the modes
    for any other value."""
    value = os.environ.get(ENV, "pinned").strip() or "pinned"
    if value not in MODES:
        raise NumericsError(f"{ENV}={value!r} is not a numerics mode; choose one of {', '.join(MODES)}")
    return value


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo, None where that cannot be read (not Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def check_avx2() -> None:
    """A NumericsError when this CPU is not an x86-64 CPU with AVX2 and FMA, which the pinned kernels need."""
    flags = cpu_flags()
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64") or flags is None or not {"avx2", "fma"} <= flags:
        have = "no /proc/cpuinfo" if flags is None else ("no AVX2/FMA" if flags else "no flags")
        raise NumericsError(f"pinned numerics need an x86-64 CPU with AVX2 and FMA; this is {machine} ({have}): "
                            f"set {ENV}=native to run on this CPU's own kernels (recorded, other cache digests)")


def pin() -> str:
    """Apply the numerics ``mode()`` asks for to this process's environment and return the mode. Pinned: checks
    the CPU (``check_avx2``), sets each of ``PINNED_SETTINGS`` (a NumericsError naming the variable when the
    environment already holds another value), and, when torch is already loaded, checks that ATen took the AVX2
    kernels (it fixes its choice at its first kernel: a NumericsError when that ran before pinning)."""
    chosen = mode()
    if chosen == "native":
        return chosen
    check_avx2()
    for name, value in PINNED_SETTINGS.items():
        current = os.environ.get(name)
        if current is not None and current != value:
            raise NumericsError(f"pinned numerics set {name}={value}, but the environment holds {name}={current}: "
                                f"unset it, or set {ENV}=native")
        os.environ[name] = value
    if "torch" in sys.modules:
        capability = sys.modules["torch"].backends.cpu.get_cpu_capability()
        if capability != "AVX2":
            raise NumericsError(f"torch ran a kernel before opsft pinned its numerics (ATen capability "
                                f"{capability}, pinned AVX2): import opsft before running torch code, or set "
                                f"{ENV}=native")
    return chosen


def digest_tag() -> str:
    """What every cache digest records of the numerics: the mode, versioned with the pinned settings."""
    return "pinned-1" if mode() == "pinned" else "native"


def extension_march() -> str:
    """The ``-march`` the project's C++ kernels are compiled for: ``PINNED_MARCH`` when pinned, else native."""
    return PINNED_MARCH if mode() == "pinned" else "native"


def record() -> dict:
    """The numerics a computation ran under, for its provenance: the mode and its digest tag, each setting's value
    in this process's environment, ATen's kernel capability (read from torch) and the C++ kernels' target."""
    import torch

    return {"mode": mode(), "tag": digest_tag(), "settings": {name: os.environ.get(name) for name in PINNED_SETTINGS},
            "aten_capability": torch.backends.cpu.get_cpu_capability(), "march": extension_march()}
