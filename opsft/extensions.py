"""The project's C++ kernels (``opsft/csrc``), built on first use with ``torch.utils.cpp_extension`` (a C++
compiler and ninja) under the cache folder (``extensions/``), once per CPU model, source and flags: under native
numerics ``-march=native`` code must not run on another CPU sharing the cache; pinned numerics compile for
``x86-64-v3`` (``opsft.numerics.extension_march``)."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from types import ModuleType

from opsft.numerics import extension_march
from opsft.paths import cache_root

CSRC = Path(__file__).parent / "csrc"
# no FMA contraction (reproducible rounding); sqrt without errno, so the loop vectorizes; OpenMP, without which
# ATen's parallel_for (a header template) runs the whole loop on one thread
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fopenmp")
# native numerics: this CPU's instructions, full-width AVX-512 where it has them
NATIVE_FLAGS = ("-march=native", "-mprefer-vector-width=512")


def flags() -> tuple[str, ...]:
    """The compiler flags of the numerics mode: ``FLAGS`` and the target (``extension_march``)."""
    march = extension_march()
    return FLAGS + (NATIVE_FLAGS if march == "native" else (f"-march={march}",))


def cpu_identity() -> str:
    """The CPU model and its flags (Linux), else the machine name: what ``-march=native`` code depends on."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.machine() + platform.processor()


def build(stem: str) -> ModuleType:
    """The extension ``csrc/<stem>.cpp``, compiled into ``<cache>/extensions/<stem>-<digest>`` (digest: the
    first 12 hex digits of sha256(CPU identity + source + ``flags()``)) or loaded from there when already built."""
    from torch.utils.cpp_extension import load

    source = CSRC / f"{stem}.cpp"
    cflags = flags()
    digest = hashlib.sha256((cpu_identity() + source.read_text() + " ".join(cflags)).encode()).hexdigest()[:12]
    folder = cache_root() / "extensions" / f"{stem}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    return load(name=f"opsft_{stem}_{digest}", sources=[str(source)], extra_cflags=list(cflags),
                build_directory=str(folder))
