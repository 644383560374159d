"""The llama.cpp build of a venv: chosen from the machine's CPU, recorded, proven.

`scripts/setup.sh` builds llama-cpp-python with the instruction sets this CPU has (and
only those), records the choice in the venv (`<venv>/distillery-llama-cpp.json`),
rebuilds when the venv finds itself on a CPU that lacks one of them, and proves the
build by generating one token with the bundled SmolLM2. Why this and not llama.cpp's
runtime selection (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS): docs/backends/llama_cpp.md.

Stdlib only above `check()`: setup.sh runs this file by its path before distillery is
installed (`python -P workers/llm/llama_build.py cmake-args`).

    python -P workers/llm/llama_build.py cmake-args          # CMAKE_ARGS for this CPU
    python -P workers/llm/llama_build.py cmake-args --portable  # any x86-64 with AVX2
    python -P workers/llm/llama_build.py key VERSION         # the wheel cache's key
    python -P workers/llm/llama_build.py current VENV VERSION  # exit 0: built as chosen
    python -P workers/llm/llama_build.py record VENV VERSION
    python -m distillery.workers.llm.llama_build check [VENV]  # one token, or one line

Test hooks (faking another machine): DISTILLERY_CPUINFO (a cpuinfo file),
DISTILLERY_MACHINE (`uname -m`), DISTILLERY_SYSTEM (`uname -s`);
DISTILLERY_LLAMA_CHECK_PREFIX: a command the check runs the model under (an emulator,
e.g. `qemu-x86_64 -cpu Haswell`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RECORD = "distillery-llama-cpp.json"
REBUILD = "bash scripts/setup.sh"  # re-chooses the flags for this CPU and rebuilds

# Every build: no AMX (its kernel segfaults on some CPUs), no OpenMP (it slows
# concurrent streams 3x), never `-march=native` (GGML_NATIVE: the flags are ours, below).
COMMON = ("-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF")
X86_OFF = (
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DGGML_AVX_VNNI=OFF",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_VNNI=OFF",
    "-DGGML_AVX512_BF16=OFF",
)
# ggml's x86 options and the /proc/cpuinfo flags each compiles in (ggml-cpu's
# CMakeLists: GGML_AVX512 adds -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw).
# With GGML_NATIVE=OFF ggml turns the first six ON by default: each is set explicitly.
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
)
X86 = ("x86_64", "amd64")
ARM64 = ("aarch64", "arm64")


class Unsupported(Exception):
    """This machine gets no llama.cpp build from set-up (one line: why, what instead)."""


@dataclass(frozen=True)
class Build:
    """What set-up builds for a machine: CMake's arguments and the CPU flags they need."""

    machine: str
    cmake_args: tuple[str, ...]
    needs: tuple[str, ...]  # /proc/cpuinfo flags the built code executes

    @property
    def cmake_line(self) -> str:
        return " ".join(self.cmake_args)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo's text (x86: `flags`,
    arm64 Linux: `Features`)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_name(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "CPU part"):
            return value.strip()
    return "unknown CPU"


def choose(machine: str, system: str, cpuinfo: str) -> Build:
    """The build for this machine: on x86-64 each instruction set ggml can use is ON
    exactly when the CPU has it; on arm64 the compiler's baseline (it runs on every
    arm64 CPU; Apple silicon: Metal as llama.cpp builds it by default)."""
    arch = machine.lower()
    if arch in X86:
        flags = cpu_flags(cpuinfo)
        if not flags and system == "Linux":
            raise Unsupported(
                "llama.cpp set-up: cannot read this CPU's flags from /proc/cpuinfo; give the "
                "build's flags yourself: CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON ...' "
                f"{REBUILD}"
            )
        args, needs = [], []
        for option, wanted in X86_OPTIONS:
            on = all(f in flags for f in wanted)
            args.append(f"-D{option}={'ON' if on else 'OFF'}")
            if on:
                needs += wanted
        return Build("x86_64", (*COMMON, *args, *X86_OFF), tuple(needs))
    if arch in ARM64:
        return Build("arm64", COMMON, ())
    raise Unsupported(
        f"llama.cpp set-up: no build for {machine} ({system}); distillery's CPU model "
        "server runs on x86-64 and arm64: serve the model elsewhere "
        "(student=external student.base_url=http://HOST:PORT/v1)"
    )


def needs_of(cmake_line: str) -> tuple[str, ...]:
    """The CPU flags a CMAKE_ARGS line compiles in (a line the user gave too)."""
    on = {
        a.removeprefix("-D").split("=", 1)[0]
        for a in shlex.split(cmake_line)
        if a.startswith("-DGGML_") and a.upper().endswith(("=ON", "=1", "=TRUE"))
    }
    return tuple(f for option, wanted in X86_OPTIONS if option in on for f in wanted)


# x86-64's AVX2 baseline (Haswell, AMD Zen 1 and later): what an image built once for
# every node gets (docs/backends/llama_cpp.md, "The Kubernetes images"; k8s/Dockerfile builds it).
PORTABLE_X86_FLAGS = ("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c")


def portable() -> Build:
    return choose("x86_64", "Linux", f"flags\t: {' '.join(PORTABLE_X86_FLAGS)}\n")


def this_machine() -> Build:
    return choose(_machine(), _system(), _cpuinfo())


def _machine() -> str:
    return os.environ.get("DISTILLERY_MACHINE") or platform.machine()


def _system() -> str:
    return os.environ.get("DISTILLERY_SYSTEM") or platform.system()


def _cpuinfo() -> str:
    path = os.environ.get("DISTILLERY_CPUINFO") or "/proc/cpuinfo"
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def cache_key(version: str, cmake_line: str, machine: str) -> str:
    """The wheel cache's key: pip's own cache keys a built wheel on the source only, so
    a machine that once built other flags would get that wheel back."""
    digest = hashlib.sha256(f"{version}\n{machine}\n{cmake_line}".encode()).hexdigest()[:16]
    return f"llama-cpp-python-{version}-{machine}-{digest}"


# -- the record in the venv ------------------------------------------------------------


def read_record(venv: str | Path) -> dict | None:
    try:
        return json.loads((Path(venv) / RECORD).read_text())
    except (OSError, ValueError):
        return None


def write_record(venv: str | Path, version: str, cmake_line: str, machine: str) -> None:
    record = {
        "llama_cpp_python": version,
        "cmake_args": cmake_line,
        "needs": list(needs_of(cmake_line)),
        "machine": machine,
        "built_on": cpu_name(_cpuinfo()),
    }
    (Path(venv) / RECORD).write_text(json.dumps(record, indent=1) + "\n")


def is_current(venv: str | Path, version: str, cmake_line: str) -> bool:
    """The venv holds llama-cpp-python `version` built with exactly `cmake_line`."""
    record = read_record(venv)
    if record is None or record.get("cmake_args") != cmake_line:
        return False
    if record.get("llama_cpp_python") != version:
        return False
    try:
        from importlib.metadata import version as installed

        return installed("llama-cpp-python") == version
    except Exception:  # noqa: BLE001 - not installed (or a broken install): rebuild
        return False


def missing_flags(record: dict | None, cpuinfo: str | None = None) -> list[str]:
    """Flags the recorded build needs that this CPU lacks (x86 Linux only)."""
    if not record or not record.get("needs"):
        return []
    flags = cpu_flags(_cpuinfo() if cpuinfo is None else cpuinfo)
    if not flags:
        return []
    return [f for f in record["needs"] if f not in flags]


def illegal_instruction_cause(record: dict | None, cpuinfo: str | None = None) -> str:
    """Why llama.cpp died of SIGILL, in words: the flags its recorded build needs and
    this CPU lacks (or the build's flags, when this CPU reports them all: an emulator)."""
    missing = missing_flags(record, cpuinfo)
    if missing:
        options = sorted({o for o, wanted in X86_OPTIONS if any(f in missing for f in wanted)})
        return (
            f"the llama.cpp build uses {', '.join(missing)} (built with "
            f"{', '.join(f'-D{o}=ON' for o in options)}), which this CPU lacks"
        )
    if record:
        return (
            "the llama.cpp build uses an instruction this CPU lacks (built with "
            f"{record.get('cmake_args', '?')} on {record.get('built_on', '?')})"
        )
    return (
        "the llama.cpp build uses an instruction this CPU lacks (its flags were not recorded: "
        "set up before builds were recorded, or built by hand)"
    )


# -- proving the build --------------------------------------------------------------------

_ONE_TOKEN = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False)
out = llm.create_completion("The capital of France is", max_tokens=1, temperature=0)
print("token:", repr(out["choices"][0]["text"]))
"""


def check(venv: str | Path | None = None, gguf: str | Path | None = None) -> str | None:
    """Load the bundled model and generate one token in a child process; None when it
    did, else one line: what killed it, why in words, and the command that fixes it."""
    venv = Path(venv or sys.prefix)
    record = read_record(venv)
    if gguf is None:
        from distillery.workers.llm.servers import find_smollm2_gguf

        gguf = find_smollm2_gguf()
    prefix = shlex.split(os.environ.get("DISTILLERY_LLAMA_CHECK_PREFIX", ""))
    command = [*prefix, sys.executable, "-c", _ONE_TOKEN, str(gguf)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return "llama.cpp check: the bundled model gave no token in 30 min (a hung build?)"
    if done.returncode == 0:
        return None
    code = done.returncode
    if code == -signal.SIGILL:  # qemu-user dies of the guest's signal too
        return (
            "llama.cpp check: the bundled model died of an illegal instruction (SIGILL): "
            f"{illegal_instruction_cause(record)}; rebuild it for this CPU: {REBUILD}"
        )
    if code < 0:
        name = signal.Signals(-code).name
        return (
            f"llama.cpp check: the bundled model was killed by {name} while generating one "
            f"token; rebuild it ({REBUILD}) and report the build's flags "
            f"({(record or {}).get('cmake_args', 'not recorded')})"
        )
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no output")
    return f"llama.cpp check: the bundled model failed (exit {code}): {last[-300:]}"


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "cmake-args" and rest == ["--portable"]:
            print(portable().cmake_line)
        elif command == "cmake-args":
            print(this_machine().cmake_line)
        elif command == "key":
            line = os.environ.get("CMAKE_ARGS") or this_machine().cmake_line
            print(cache_key(rest[0], line, _machine().lower()))
        elif command == "current":
            line = os.environ.get("CMAKE_ARGS") or this_machine().cmake_line
            return 0 if is_current(rest[0], rest[1], line) else 1
        elif command == "record":
            line = os.environ.get("CMAKE_ARGS") or this_machine().cmake_line
            write_record(rest[0], rest[1], line, _machine().lower())
        elif command == "check":
            problem = check(rest[0] if rest else None)
            if problem:
                print(f"distillery setup: {problem}", file=sys.stderr)
                return 1
            print("distillery setup: llama.cpp generates on this CPU")
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except Unsupported as exc:
        print(f"distillery setup: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
