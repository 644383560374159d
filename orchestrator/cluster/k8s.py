"""`distillery submit --k8s`: a sweep as a KubeRay RayJob, and the Job that fills the
model cache with its weights, rendered from the manifests in k8s/.

    distillery submit --k8s [--overlay gpu] [--env NAME[=SECRET:KEY]] <overrides>
    distillery submit --k8s --weights <overrides>

The RayJob runs on a Ray cluster of its own shaped like the overlay's RayCluster
(`kubectl kustomize k8s/overlays/<overlay>`, whose spec it copies): the overlay's
images, the Secrets every Ray pod reads, the GPU worker groups. What the sweep needs
from the cluster is checked here, before anything is created: an overlay with a GPU
group of every vLLM replica size the sweep uses, keys wired from Secrets (never a
value in a manifest), a name KubeRay accepts.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distillery.orchestrator.core.config import ConfigError, DistilleryConfig
from distillery.workers.llm.config import ModelConfig

SWEEP_ID_KEY = "distillery.sweep_id"  # the RayJob's annotation (and the Jobs API metadata)
OUTPUT_DIR_KEY = "distillery.output_dir"
SWEEP_LABEL = "distillery.io/sweep"  # the RayJob's label (a label-safe sweep id)
KEYS_SECRET = "distillery-keys"  # every key of it reaches every Ray pod (envFrom)
# Names the driver checks before any work (preflight): the variables `--env` wired.
REQUIRED_ENV = "DISTILLERY_REQUIRED_ENV"
# KubeRay's own limits (ray-operator/controllers/ray/utils/constant.go): a RayJob name
# of at most MaxRayJobNameLength = 47 characters and a DNS-1035 label (validation.go,
# ValidateRayJobMetadata); generateName adds 5 random characters.
MAX_RAYJOB_NAME = 47
_GENERATED_SUFFIX = 5
GPU_GROUP_RESOURCE = "distillery_gpus"  # conf/cluster/kuberay.yaml's gpu_node_resource
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def checkout_root() -> Path | None:
    """The distillery checkout this module runs from, if it runs from one."""
    root = Path(__file__).resolve().parents[2]  # orchestrator/cluster/k8s.py
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "distillery"' in pyproject.read_text():
        return root
    return None


def k8s_dir() -> Path:
    root = checkout_root()
    if root is None or not (root / "k8s").is_dir():
        raise ConfigError("--k8s needs the k8s/ folder of a distillery checkout")
    return root / "k8s"


def overlays(k8s: Path | None = None) -> list[str]:
    return sorted(p.name for p in ((k8s or k8s_dir()) / "overlays").iterdir() if p.is_dir())


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <folder>`, parsed."""
    import yaml

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise ConfigError("--k8s renders the overlay with `kubectl kustomize`: install kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise ConfigError(f"kubectl kustomize {folder}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_overlay(overlay: str, k8s: Path | None = None) -> list[dict[str, Any]]:
    base = k8s or k8s_dir()
    folder = base / "overlays" / overlay
    if not folder.is_dir():
        raise ConfigError(
            f"--overlay {overlay}: no such overlay; known: {', '.join(overlays(base))}"
        )
    return kustomize(folder)


def the_raycluster(docs: list[dict[str, Any]], overlay: str) -> dict[str, Any]:
    clusters = [d for d in docs if d.get("kind") == "RayCluster"]
    if len(clusters) != 1:
        raise ConfigError(f"overlay {overlay} has {len(clusters)} RayClusters; expected one")
    return clusters[0]


def rayjob_template(k8s: Path | None = None) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(((k8s or k8s_dir()) / "rayjob" / "rayjob.yaml").read_text())


def weights_template(k8s: Path | None = None) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(((k8s or k8s_dir()) / "jobs" / "weights.yaml").read_text())


def template_defaults(template: dict[str, Any]) -> list[str]:
    """The overrides written in the template's entrypoint (after the command)."""
    words = shlex.split(template["spec"]["entrypoint"])
    return [w for w in words if "=" in w]


def dns_name(text: str, limit: int) -> str:
    """A DNS-1035 label of at most `limit` characters: lower case, digits and '-',
    starting with a letter (KubeRay refuses a RayJob named otherwise)."""
    name = _DNS_LABEL.sub("-", text.lower()).strip("-")
    if not name[:1].isalpha():
        name = "sweep-" + name
    return name[:limit].rstrip("-") or "sweep"


def label_value(text: str) -> str:
    return _LABEL_VALUE.sub("_", text)[:63].strip("_.-") or "sweep"


# -- what the sweep needs of the cluster ----------------------------------------------


def vllm_models(graph: Any) -> list[ModelConfig]:
    """The vLLM models a planned sweep serves: its stages' models and its banks'
    builder models (as the run starts them), each once."""
    found: dict[str, ModelConfig] = {}
    models: list[ModelConfig | None] = [s.model for s in graph.stages.values()]
    models += [source.cfg.builder_model() for source in graph.bank_sources.values()]
    for model in models:
        if model is not None and model.backend == "vllm":
            found.setdefault(f"{model.model}/{model.gpus_per_server}", model)
    return list(found.values())


def plan_of(configs: list[DistilleryConfig]) -> Any:
    from distillery.orchestrator.planning.plan import plan_sweep

    return plan_sweep(configs)


def gpu_groups(cluster: dict[str, Any]) -> dict[int, str]:
    """GPUs per pod -> worker group name, for the groups that advertise the
    `distillery_gpus_<N>` resource."""
    groups = {}
    for group in cluster["spec"].get("workerGroupSpecs", []):
        resources = group.get("rayStartParams", {}).get("resources", "")
        for n in re.findall(rf'"{GPU_GROUP_RESOURCE}_(\d+)"', resources):
            groups[int(n)] = group["groupName"]
    return groups


def choose_overlay(given: str | None, models: list[ModelConfig]) -> str:
    """The overlay asked for, or gpu when the sweep serves a model with vLLM, else cpu."""
    if given:
        return given
    return "gpu" if models else "cpu"


def check_gpu_groups(overlay: str, cluster: dict[str, Any], models: list[ModelConfig]) -> None:
    groups = gpu_groups(cluster)
    for model in models:
        if model.gpus_per_server not in groups:
            offered = ", ".join(f"{n} ({g})" for n, g in sorted(groups.items())) or "none"
            raise ConfigError(
                f"{model.name} (vLLM, gpus_per_server={model.gpus_per_server}) needs a GPU "
                f"worker group with {model.gpus_per_server} GPUs per pod, and overlay "
                f"{overlay} has none (GPU groups: {offered}); use --overlay gpu, or add a "
                "group to k8s/components/vllm-workers/vllm-workers.yaml"
            )


# -- keys from Secrets ------------------------------------------------------------------


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable every Ray pod gets from a Kubernetes Secret's key."""

    name: str
    secret: str = KEYS_SECRET
    key: str = ""

    def entry(self) -> dict[str, Any]:
        # optional: a missing key must not keep the pods from starting (the RayJob would
        # wait for ever); the driver's preflight stops the sweep naming it instead.
        ref = {"name": self.secret, "key": self.key or self.name, "optional": True}
        return {"name": self.name, "valueFrom": {"secretKeyRef": ref}}


def parse_env(specs: Sequence[str]) -> list[SecretEnv]:
    """`--env NAME` (from the distillery-keys Secret's key NAME) or `--env
    NAME=SECRET:KEY`; a value is refused: it would be written into the manifest."""
    out = []
    for spec in specs:
        name, eq, source = spec.partition("=")
        if not _ENV_NAME.match(name):
            raise ConfigError(f"--env {spec}: {name!r} is not an environment variable name")
        if not eq:
            out.append(SecretEnv(name))
            continue
        secret, colon, key = source.partition(":")
        if not colon or not _SECRET_NAME.match(secret) or not _SECRET_KEY.match(key):
            raise ConfigError(
                f"--env {name}=...: with --k8s a variable comes from a Kubernetes Secret, "
                f"never a value in the manifest: --env {name} (key {name} of the Secret "
                f"{KEYS_SECRET}) or --env {name}=SECRET:KEY"
            )
        out.append(SecretEnv(name, secret, key))
    return out


def ray_containers(spec: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """The Ray container of the head and of every worker group."""
    yield spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    for group in spec.get("workerGroupSpecs", []):
        yield group["template"]["spec"]["containers"][0]


def wire_env(cluster_spec: dict[str, Any], wired: list[SecretEnv]) -> None:
    """Give every Ray container the variables, and the head the list its preflight
    checks (the sweep stops there, before any work, when one is unset)."""
    if not wired:
        return
    for container in ray_containers(cluster_spec):
        env = [e for e in container.get("env", []) if e["name"] not in {w.name for w in wired}]
        container["env"] = env + [w.entry() for w in wired]
    head = next(iter(ray_containers(cluster_spec)))
    head["env"].append({"name": REQUIRED_ENV, "value": ",".join(w.name for w in wired)})


# -- the RayJob and the weights Job -------------------------------------------------


def build_rayjob(
    template: dict[str, Any],
    cluster: dict[str, Any],
    sweep: Any,
    wired: Sequence[SecretEnv] = (),
) -> dict[str, Any]:
    """The template with the overlay's RayCluster spec, this sweep's entrypoint, names
    and keys. A fresh name per submission (generateName: `kubectl create`); the sweep
    label finds every attempt of one sweep."""
    job = copy.deepcopy(template)
    meta = job.setdefault("metadata", {})
    # KubeRay derives the cluster's and its pods' names from the job's: keep it short.
    meta.pop("name", None)
    meta["generateName"] = dns_name(sweep.sweep_id, MAX_RAYJOB_NAME - _GENERATED_SUFFIX - 1) + "-"
    namespace = cluster.get("metadata", {}).get("namespace")
    if namespace:
        meta["namespace"] = namespace
    meta.setdefault("labels", {})[SWEEP_LABEL] = label_value(sweep.sweep_id)
    meta.setdefault("annotations", {}).update(
        {SWEEP_ID_KEY: sweep.sweep_id, OUTPUT_DIR_KEY: sweep.output_dir}
    )
    spec = job["spec"]
    spec["entrypoint"] = sweep.entrypoint
    spec["rayClusterSpec"] = copy.deepcopy(cluster["spec"])
    wire_env(spec["rayClusterSpec"], list(wired))
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for container in spec.get("submitterPodTemplate", {}).get("spec", {}).get("containers", []):
        container["image"] = head["image"]  # the overlay's image, registry included
    return job


def build_weights_job(
    template: dict[str, Any], cluster: dict[str, Any], models: Sequence[ModelConfig]
) -> dict[str, Any]:
    """The weights Job for these models, in the overlay's namespace with its image."""
    job = copy.deepcopy(template)
    namespace = cluster.get("metadata", {}).get("namespace")
    if namespace:
        job["metadata"]["namespace"] = namespace
    (container,) = job["spec"]["template"]["spec"]["containers"]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["image"] = head["image"]
    container["args"] = sorted({m.model for m in models})
    return job


def images_without_registry(cluster: dict[str, Any]) -> list[str]:
    images = {c["image"] for c in ray_containers(cluster["spec"])}
    return sorted(i for i in images if "/" not in i.split(":")[0])
