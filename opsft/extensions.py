"""The project's C++ kernels (``opsft/csrc``), built on first use with ``torch.utils.cpp_extension`` (a C++
compiler and ninja) under the cache folder (``extensions/``), once per CPU model, source and flags:
``-march=native`` code must not run on another CPU sharing the cache."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from types import ModuleType

from opsft.paths import cache_root

CSRC = Path(__file__).parent / "csrc"
# no FMA contraction (reproducible rounding); sqrt without errno, so the loop vectorizes; full-width AVX-512;
# OpenMP, without which ATen's parallel_for (a header template) runs the whole loop on one thread
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-march=native", "-mprefer-vector-width=512", "-fopenmp")


def cpu_identity() -> str:
    """The CPU model and its flags (Linux), else the machine name: what ``-march=native`` code depends on."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.machine() + platform.processor()


def build(stem: str) -> ModuleType:
    """The extension ``csrc/<stem>.cpp``, compiled into ``<cache>/extensions/<stem>-<digest>`` (digest: the
    first 12 hex digits of sha256(CPU identity + source + flags)) or loaded from there when already built."""
    from torch.utils.cpp_extension import load

    source = CSRC / f"{stem}.cpp"
    digest = hashlib.sha256((cpu_identity() + source.read_text() + " ".join(FLAGS)).encode()).hexdigest()[:12]
    folder = cache_root() / "extensions" / f"{stem}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    return load(name=f"opsft_{stem}_{digest}", sources=[str(source)], extra_cflags=list(FLAGS),
                build_directory=str(folder))
