"""Pinned numerics (``opsft.numerics``): the mode's validation, its place in every digest and provenance, the
settings a pinned process holds, and the errors that name what is at fault."""

import os
import subprocess
import sys

import pytest

from opsft import numerics
from opsft.config import RunConfig
from opsft.extensions import flags
from opsft.provenance import provenance


def test_this_test_process_runs_pinned():
    assert numerics.mode() == "pinned"
    assert {k: os.environ.get(k) for k in numerics.PINNED_SETTINGS} == numerics.PINNED_SETTINGS
    recorded = provenance()["numerics"]
    assert recorded["mode"] == "pinned" and recorded["tag"] == "pinned-1" and recorded["aten_capability"] == "AVX2"
    assert recorded["settings"] == numerics.PINNED_SETTINGS and recorded["march"] == "x86-64-v3"


def test_the_mode_is_part_of_every_digest_and_native_keeps_the_old_ones(monkeypatch):
    pinned = RunConfig(organism="nano").digest()
    monkeypatch.setenv(numerics.ENV, "native")
    assert RunConfig(organism="nano").digest() == "2211475f82ba02e9" != pinned  # the digest from before pinning
    assert "-march=native" in flags()
    monkeypatch.setenv(numerics.ENV, "pinned")
    assert RunConfig(organism="nano").digest() == pinned and "-march=x86-64-v3" in flags()


@pytest.mark.parametrize("value", ["fast", "PINNED"])
def test_an_unknown_mode_is_one_line_naming_the_choices(monkeypatch, value):
    monkeypatch.setenv(numerics.ENV, value)
    with pytest.raises(numerics.NumericsError, match=f"OPSFT_NUMERICS='{value}' .* choose one of pinned, native"):
        numerics.mode()


def run_import(env: dict, code: str = "import opsft") -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose environment holds none of the pinned settings, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_SETTINGS}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)


def test_importing_the_package_ends_bad_numerics_in_one_line():
    done = run_import({numerics.ENV: "turbo"})
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "opsft: OPSFT_NUMERICS='turbo' is not a numerics mode; choose one of pinned, native"]
    done = run_import({"ATEN_CPU_CAPABILITY": "avx512"})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "ATEN_CPU_CAPABILITY=avx512" in done.stderr
    done = run_import({}, "import torch; torch.ones(2) + 1; import opsft")
    assert done.returncode == 1 and "torch ran a kernel before opsft pinned its numerics" in done.stderr


def test_torch_imported_first_is_still_pinned_until_it_runs_a_kernel():
    done = run_import({}, "import torch; import opsft; print(torch.backends.cpu.get_cpu_capability())")
    assert done.returncode == 0 and done.stdout.strip() == "AVX2"


def test_native_leaves_the_cpu_its_own_kernels():
    done = run_import({numerics.ENV: "native"}, "import opsft, os; print(os.environ.get('MKL_CBWR'))")
    assert done.returncode == 0 and done.stdout.strip() == "None"


def test_a_cpu_without_avx2_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(numerics, "cpu_flags", lambda: {"sse2", "avx"})
    with pytest.raises(numerics.NumericsError, match="need an x86-64 CPU with AVX2 and FMA.*no AVX2/FMA.*"
                                                     "OPSFT_NUMERICS=native"):
        numerics.check_avx2()
    monkeypatch.setattr(numerics, "cpu_flags", lambda: None)
    with pytest.raises(numerics.NumericsError, match="no /proc/cpuinfo"):
        numerics.check_avx2()
