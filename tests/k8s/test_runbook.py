"""docs/cluster.md's commands run as written: each `distillery submit --k8s ...` line
prints an object KubeRay and Kubernetes accept (CRD schema, the operator's rules, the
core API), the sweep sent through a long-lived cluster's dashboard validates, and the
`distillery report s3://...` line is the one the server test runs on moto's S3.
Keys: `--env` wires Secrets into every Ray pod and the driver checks them before any
work; a value on the command line is refused; a sweep an overlay cannot place is
refused before anything is printed."""

from __future__ import annotations

import shlex
import shutil

import pytest
import yaml

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.cluster import k8s
from distillery.orchestrator.cluster.submit import PreparedSweep
from distillery.orchestrator.cluster.submit import main as submit_main
from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.planning.preflight import PreflightError, check_required_env
from distillery.workers.llm.config import ModelConfig
from tests.k8s.kuberay_rules import rayjob_errors
from tests.k8s.validation import REPO_ROOT, core_errors, crd_errors
from tests.orchestrator.test_readme_commands import _code_blocks, _joined

RUNBOOK = REPO_ROOT / "docs" / "cluster.md"
K8S = REPO_ROOT / "k8s"


def runbook_commands() -> list[str]:
    lines = []
    for block in _code_blocks(RUNBOOK.read_text()):
        lines += [line for line in _joined(block.splitlines()) if line.startswith("distillery ")]
    return lines


def test_the_runbook_has_the_commands_a_sweep_needs():
    commands = runbook_commands()
    kinds = {" ".join(shlex.split(c)[:3]) for c in commands}
    assert {"distillery submit --k8s", "distillery report s3://distillery/runs"} <= kinds
    assert any("--weights" in c for c in commands)


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


@needs_kubectl
@pytest.mark.parametrize("line", [c for c in runbook_commands() if "--k8s" in c])
def test_each_submit_k8s_line_prints_what_the_cluster_accepts(line, tmp_path, capsys):
    argv = shlex.split(line)
    argv = argv[: argv.index("|")] if "|" in argv else argv
    out = tmp_path / "job.yaml"
    assert submit_main([*argv[2:], "--out", str(out)]) == 0, capsys.readouterr().err
    job = yaml.safe_load(out.read_text())
    if "--weights" in argv:
        assert job["kind"] == "Job" and core_errors(job) == []
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert {"Qwen/Qwen3-4B", "Qwen/Qwen3-8B"} <= set(container["args"])
    else:
        assert job["kind"] == "RayJob"
        assert crd_errors(job) == [] and rayjob_errors(job) == []
        # The gpu overlay was chosen: the sweep's students are served by vLLM.
        groups = {g["groupName"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
        assert "vllm-1gpu" in groups
        words = shlex.split(job["spec"]["entrypoint"])
        assert "cluster=kuberay" in words and "student.replicas=2" in words


def test_the_long_lived_cluster_line_validates(capsys):
    (line,) = [c for c in runbook_commands() if "--address" in c]
    argv, skip = [], False
    for word in shlex.split(line)[2:]:
        if skip:
            skip = False
        elif word in ("--address", "--env"):
            skip = True
        elif word != "--follow":
            argv.append(word)
    assert run_cli([*argv, "--cfg", "job"]) == 0, capsys.readouterr().err


def test_the_report_line_is_the_one_the_s3_server_test_runs():
    (line,) = [c for c in runbook_commands() if c.startswith("distillery report")]
    server_test = (REPO_ROOT / "tests" / "orchestrator" / "test_servers.py").read_text()
    assert "runbook_report_line()" in server_test and line.startswith("distillery report s3://")


def a_sweep() -> PreparedSweep:
    return PreparedSweep("bfcl-0123456789", ["cluster=kuberay"], False, "s3://d/r", "http://m")


@needs_kubectl
def test_env_wires_secret_keys_into_every_ray_pod_and_the_driver_checks_them():
    cluster = k8s.the_raycluster(k8s.render_overlay("gpu", K8S), "gpu")
    wired = k8s.parse_env(["OPENAI_API_KEY", "USER_KEY=toolsandbox-user:api-key"])
    job = k8s.build_rayjob(k8s.rayjob_template(K8S), cluster, a_sweep(), wired)
    assert crd_errors(job) == [] and rayjob_errors(job) == []
    spec = job["spec"]["rayClusterSpec"]
    containers = list(k8s.ray_containers(spec))
    assert len(containers) == 1 + len(spec["workerGroupSpecs"])
    for container in containers:
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e
        }
        assert refs["OPENAI_API_KEY"] == {
            "name": "distillery-keys",
            "key": "OPENAI_API_KEY",
            "optional": True,
        }
        assert refs["USER_KEY"] == {"name": "toolsandbox-user", "key": "api-key", "optional": True}
    head = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert head[k8s.REQUIRED_ENV] == "OPENAI_API_KEY,USER_KEY"


def test_a_value_or_a_bad_name_on_env_is_refused():
    for bad in ("OPENAI_API_KEY=sk-live-123", "OPENAI_API_KEY=Secret:key", "1X", "A=b:"):
        with pytest.raises(ConfigError, match="--env"):
            k8s.parse_env([bad])


def test_the_driver_stops_on_a_wired_key_that_is_unset(monkeypatch):
    monkeypatch.setenv(k8s.REQUIRED_ENV, "OPENAI_API_KEY,DEEPSEEK_API_KEY")
    monkeypatch.setenv("DISTILLERY_KEYS_FROM", "distillery-keys")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(PreflightError) as caught:
        check_required_env()
    message = str(caught.value)
    assert message.startswith("--env DEEPSEEK_API_KEY: the variable is not set in this pod")
    assert "create secret generic distillery-keys --from-literal=DEEPSEEK_API_KEY=" in message
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-y")
    check_required_env()


@needs_kubectl
def test_an_overlay_that_cannot_place_a_replica_is_refused():
    qwen32 = ModelConfig(
        name="qwen3-32b",
        backend="vllm",
        model="Qwen/Qwen3-32B",
        gpus_per_server=2,
        tensor_parallel_size=2,
    )
    assert k8s.choose_overlay(None, [qwen32]) == "gpu" and k8s.choose_overlay(None, []) == "cpu"
    cpu = k8s.the_raycluster(k8s.render_overlay("cpu", K8S), "cpu")
    with pytest.raises(
        ConfigError, match="needs a GPU worker group with 2 GPUs per pod, and overlay cpu"
    ):
        k8s.check_gpu_groups("cpu", cpu, [qwen32])
    gpu = k8s.the_raycluster(k8s.render_overlay("gpu", K8S), "gpu")
    k8s.check_gpu_groups("gpu", gpu, [qwen32])
    three = qwen32.model_copy(update={"gpus_per_server": 3})
    with pytest.raises(ConfigError, match=r"GPU groups: 1 \(vllm-1gpu\), 2 \(vllm-2gpu\)"):
        k8s.check_gpu_groups("gpu", gpu, [three])
