"""The llama.cpp build set-up makes (workers/llm/llama_build.py, scripts/setup.sh): the
flags come from the CPU (an AVX2-only CPU gets no AVX-512: the build setup.sh made
before issue 31 died of SIGILL on AMD EPYC Zen 2), arm64 gets no x86 flag, the record
names what a rebuild is needed for, and the build's proof (one token of the bundled
model) turns an illegal instruction into one line naming the flag and the command.

The emulated-CPU test runs the venv's real build under `qemu-x86_64 -cpu Haswell`
(Debian's qemu-user; an AVX2 CPU without AVX-512), on this machine whatever its CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.workers.llm import llama_build
from distillery.workers.llm.llama_build import Unsupported, choose

ROOT = Path(__file__).resolve().parents[3]
CPUINFO = Path(__file__).parent / "cpuinfo"
HASWELL = ("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c")


def _info(name: str) -> str:
    return (CPUINFO / f"{name}.txt").read_text()


def test_an_avx2_cpu_without_avx512_gets_no_avx512():
    build = choose("x86_64", "Linux", _info("epyc_zen2"))
    assert "-DGGML_AVX512=OFF" in build.cmake_args
    for option in ("AVX", "AVX2", "FMA", "F16C", "BMI2", "SSE42"):
        assert f"-DGGML_{option}=ON" in build.cmake_args, option
    assert not [f for f in build.needs if f.startswith("avx512")]
    assert set(build.needs) <= set(HASWELL)
    # never the native build, AMX or OpenMP
    for off in ("-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_OPENMP=OFF"):
        assert off in build.cmake_args


def test_the_portable_build_runs_on_any_avx2_cpu():
    """What an image built once for every node gets: Zen 2's build, no AVX-512."""
    build = llama_build.portable()
    assert build.cmake_args == choose("x86_64", "Linux", _info("epyc_zen2")).cmake_args
    assert set(build.needs) == set(HASWELL)


def test_a_cpu_with_avx512_uses_it():
    build = choose("x86_64", "Linux", _info("xeon_skylakex"))
    assert "-DGGML_AVX512=ON" in build.cmake_args
    assert "avx512f" in build.needs and "avx512bw" in build.needs
    # the extensions Skylake-X lacks stay off
    assert "-DGGML_AVX512_VNNI=OFF" in build.cmake_args


def test_an_older_cpu_gets_each_missing_set_turned_off_explicitly():
    """ggml turns SSE4.2..F16C ON by default once GGML_NATIVE is OFF: each is explicit."""
    build = choose("x86_64", "Linux", _info("sandybridge"))
    for option in ("AVX2", "FMA", "F16C", "BMI2", "AVX512"):
        assert f"-DGGML_{option}=OFF" in build.cmake_args, option
    assert "-DGGML_AVX=ON" in build.cmake_args


@pytest.mark.parametrize(("machine", "system"), [("aarch64", "Linux"), ("arm64", "Darwin")])
def test_arm64_gets_no_x86_flag(machine, system):
    info = _info("graviton2") if system == "Linux" else ""
    build = choose(machine, system, info)
    assert build.machine == "arm64"
    assert not [a for a in build.cmake_args if any(x in a for x in ("AVX", "AMX", "SSE", "F16C"))]
    assert "-DGGML_NATIVE=OFF" in build.cmake_args and build.needs == ()


def test_another_architecture_is_refused_in_one_line():
    with pytest.raises(Unsupported) as refused:
        choose("riscv64", "Linux", "")
    assert "\n" not in str(refused.value) and "riscv64" in str(refused.value)
    assert "student=external" in str(refused.value)


def _setup_choice(cpuinfo: str, machine: str = "x86_64") -> subprocess.CompletedProcess[str]:
    # as a new user runs it: no PYTHONPATH (the script's folder must not shadow the
    # standard library: workers/llm/types.py)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["DISTILLERY_CPUINFO"] = str(CPUINFO / f"{cpuinfo}.txt")
    env["DISTILLERY_MACHINE"] = machine
    env["PYTHON"] = sys.executable
    return subprocess.run(
        ["bash", "scripts/setup.sh", "--print-cmake-args"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_setup_builds_for_the_cpu_it_runs_on():
    """What scripts/setup.sh itself would build (before issue 31: AVX-512 on every CPU)."""
    zen2 = _setup_choice("epyc_zen2")
    assert zen2.returncode == 0, zen2.stderr
    assert "-DGGML_AVX2=ON" in zen2.stdout and "-DGGML_AVX512=OFF" in zen2.stdout
    skx = _setup_choice("xeon_skylakex")
    assert "-DGGML_AVX512=ON" in skx.stdout
    arm = _setup_choice("graviton2", machine="aarch64")
    assert arm.returncode == 0 and "AVX" not in arm.stdout
    other = _setup_choice("graviton2", machine="riscv64")
    assert other.returncode == 2
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distillery setup: ") and "riscv64" in lines[0]


def test_the_wheel_cache_is_keyed_on_the_flags():
    zen2 = choose("x86_64", "Linux", _info("epyc_zen2")).cmake_line
    skx = choose("x86_64", "Linux", _info("xeon_skylakex")).cmake_line
    assert llama_build.cache_key("0.3.36", zen2, "x86_64") != llama_build.cache_key(
        "0.3.36", skx, "x86_64"
    )
    assert llama_build.cache_key("0.3.36", zen2, "x86_64") != llama_build.cache_key(
        "0.3.37", zen2, "x86_64"
    )


def test_the_record_says_which_flag_a_moved_venv_lacks(tmp_path, monkeypatch):
    skx = choose("x86_64", "Linux", _info("xeon_skylakex")).cmake_line
    monkeypatch.setenv("DISTILLERY_CPUINFO", str(CPUINFO / "xeon_skylakex.txt"))
    llama_build.write_record(tmp_path, "0.3.36", skx, "x86_64")
    record = json.loads((tmp_path / llama_build.RECORD).read_text())
    assert "avx512f" in record["needs"] and record["cmake_args"] == skx
    assert llama_build.missing_flags(record, _info("xeon_skylakex")) == []
    missing = llama_build.missing_flags(record, _info("epyc_zen2"))
    assert "avx512f" in missing and "avx2" not in missing
    cause = llama_build.illegal_instruction_cause(record, _info("epyc_zen2"))
    assert "avx512f" in cause and "-DGGML_AVX512=ON" in cause
    # the venv is current only for the same flags (a move to Zen 2 rebuilds)
    zen2 = choose("x86_64", "Linux", _info("epyc_zen2")).cmake_line
    assert not llama_build.is_current(tmp_path, "0.3.36", zen2)


def test_flags_given_by_hand_are_recorded_with_what_they_need():
    assert "avx512f" in llama_build.needs_of("-DGGML_NATIVE=OFF -DGGML_AVX512=ON")
    assert llama_build.needs_of("-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX2=ON") == ("avx2",)


def _llama_installed() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.llama
@pytest.mark.skipif(not _llama_installed(), reason="llama-cpp-python not installed")
def test_the_build_generates_a_token_on_this_cpu():
    """What setup.sh runs last: the venv's build proves itself here."""
    assert llama_build.check() is None


@pytest.mark.llama
@pytest.mark.skipif(not _llama_installed(), reason="llama-cpp-python not installed")
@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="apt-get install qemu-user")
def test_the_build_on_an_avx2_only_cpu(monkeypatch, tmp_path):
    """The venv's real build, run on an emulated Haswell (AVX2, FMA, F16C; no AVX-512):
    a build that needs only what Haswell has generates a token there; one that needs
    more (set up on an AVX-512 machine, then moved: what the issue saw, since set-up
    built AVX-512 for every CPU) is one line naming the flag and the rebuild command,
    never a crash without a cause."""
    monkeypatch.setenv("DISTILLERY_LLAMA_CHECK_PREFIX", "qemu-x86_64 -cpu Haswell")
    # the emulated CPU's flags (qemu-user shows the host's /proc/cpuinfo)
    haswell = tmp_path / "cpuinfo"
    haswell.write_text(f"model name\t: Haswell (emulated)\nflags\t\t: {' '.join(HASWELL)}\n")
    monkeypatch.setenv("DISTILLERY_CPUINFO", str(haswell))
    record = llama_build.read_record(sys.prefix)
    problem = llama_build.check()
    if record is not None and set(record["needs"]) <= set(HASWELL):
        assert problem is None, problem
        return
    assert problem is not None, "an AVX-512 build ran on an emulated AVX2-only CPU"
    assert "\n" not in problem and "illegal instruction (SIGILL)" in problem
    assert llama_build.REBUILD in problem
    if record is not None:
        assert "avx512f" in problem and "-DGGML_AVX512=ON" in problem
