"""The installed llama.cpp is the portable x86-64 build that ./setup.sh makes.

A wheel compiled for the build machine's CPU (AVX-512, AMX...) dies with SIGILL on a CPU that
lacks them, and pip's cache hands such a wheel back on every reinstall. This reads llama.cpp's
own account of what it was compiled with (``llama_print_system_info``, in a child process so
that a bad build cannot take pytest down) and compares it with the portable set: AVX, AVX2,
FMA, F16C and BMI2 on, nothing newer. A build from the user's own ``CMAKE_ARGS`` (recorded by
setup.sh in ``<venv>/superdialog-llama-build.json``) is reported instead of failed.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

REQUIRED = ("AVX", "AVX2", "FMA", "F16C", "BMI2")
# x86 extensions a portable build must not assume (their prefixes in llama.cpp's feature list).
NEWER = ("AVX512", "AVX_VNNI", "AVX10", "AMX")
MARKER = Path(sys.prefix) / "superdialog-llama-build.json"


def cpu_features(system_info: str) -> dict[str, str]:
    """The ``NAME = value`` pairs of the CPU backend in llama.cpp's system info line."""
    match = re.search(r"\bCPU : (.*?)(?:\|\s*[A-Za-z0-9_-]+ : |$)", system_info, re.S)
    if match is None:
        raise ValueError(f"no 'CPU :' section in llama.cpp's system info: {system_info!r}")
    return dict(re.findall(r"([A-Z][A-Z0-9_]*) = (\S+)", match.group(1)))


def portable_problems(features: dict[str, str]) -> list[str]:
    """What makes a build non-portable (newer extensions) or not the tested set (missing ones)."""
    problems = [f"{name} = {value}" for name, value in sorted(features.items())
                if name.startswith(NEWER) and value != "0"]
    problems += [f"{name} missing" for name in REQUIRED if features.get(name) != "1"]
    return problems


def _installed_system_info() -> str:
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, (
        f"importing llama_cpp failed (exit {done.returncode}; -4 is SIGILL, a build for "
        f"another CPU): {done.stderr[-2000:]}\nRebuild it with ./setup.sh")
    return done.stdout


NATIVE_SAMPLE = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | "
                 "FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | "
                 "AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
PORTABLE_SAMPLE = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | "
                   "BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")


def test_the_check_rejects_a_native_build_and_accepts_the_portable_set() -> None:
    assert portable_problems(cpu_features(NATIVE_SAMPLE)) == [
        "AMX_INT8 = 1", "AVX512 = 1", "AVX512_BF16 = 1", "AVX512_VBMI = 1", "AVX512_VNNI = 1",
        "AVX_VNNI = 1"]
    assert portable_problems(cpu_features(PORTABLE_SAMPLE)) == []
    assert portable_problems(cpu_features("CPU : SSE3 = 1 | AVX = 1 | ")) == [
        "AVX2 missing", "FMA missing", "F16C missing", "BMI2 missing"]
    with pytest.raises(ValueError, match="no 'CPU :' section"):
        cpu_features("Metal : EMBED_LIBRARY = 1 |")


def test_the_installed_llama_cpp_is_the_portable_build() -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (./setup.sh installs it)")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the portable feature set is defined for x86-64, not {platform.machine()}")
    info = _installed_system_info()
    problems = portable_problems(cpu_features(info))
    record = json.loads(MARKER.read_text()) if MARKER.is_file() else {}
    if record.get("flags") == "user":
        if problems:
            pytest.skip(f"llama.cpp was built with your CMAKE_ARGS={record['cmake_args']!r} "
                        f"(setup.sh kept them): {', '.join(problems)}; that build runs only on "
                        "CPUs with these extensions. Unset CMAKE_ARGS and run ./setup.sh for "
                        "the portable build")
        return  # the user's own flags gave the portable set anyway
    assert not problems, (
        f"llama.cpp is not the portable x86-64 build ({', '.join(problems)}); system info: "
        f"{info.strip()}\nIt fails with SIGILL on CPUs without these extensions. Run ./setup.sh "
        "(without CMAKE_ARGS): it builds and installs the portable wheel")
