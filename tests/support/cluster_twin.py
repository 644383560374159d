"""A twin of the Kubernetes cluster that k8s/ creates, on this machine: the overlay
rendered with `kubectl kustomize` (as tests/k8s does), each Ray group's shape read
from its RayCluster (rayStartParams num-cpus and resources, the pod's
`nvidia.com/gpu` limit as Ray GPUs, replicas) and a loopback Ray cluster started with
exactly those nodes (tests/support/ray_cluster.py: token auth, free ports, a node per
pod). Sweeps then run on it through the RayJob's own entrypoint (k8s/rayjob: the
command and defaults `distillery submit --k8s` sends).

vLLM replicas take the real path: the model stays `backend: vllm`, and the pool places
each replica as on the cluster (its STRICT_PACK bundles, one per GPU, the first with the
GPU group's `distillery_gpus_<N>` from cluster=kuberay, GPU-lease actors in the others)
and launches `vllm serve ...` from the replica's actor with the GPUs Ray gave it. The
`vllm` it finds first on every node's PATH is the twin's stand-in (twin_vllm.py): it
checks that launch as vLLM would and serves scripted replies. The nodes' model cache
(HF_HUB_CACHE, offline, as the pods' ConfigMap sets it) holds a snapshot of every
shipped vLLM model, as the weights Job leaves it, so `require_cached` passes as it does
on a filled cluster.

What the twin cannot be: the autoscaler (a group has the pods the test asks for, never
more) and Kubernetes itself (admission, volumes, images): those are tests/k8s's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distillery.orchestrator.cluster.k8s import rayjob_template, render_overlay, template_defaults
from distillery.orchestrator.cluster.k8s import the_raycluster as raycluster_of
from distillery.orchestrator.cluster.submit import merge_overrides
from tests.support import REPO_ROOT
from tests.support.ray_cluster import LocalRayCluster
from tests.support.twin_vllm import CALLS_DIR_ENV, TWIN_REPLIES_ENV

K8S = REPO_ROOT / "k8s"
# CALLS_DIR_ENV: where each stand-in server counts the chat requests it answered (one
# file per server process) and each stand-in vllm writes what it was launched with; the
# servers inherit the Ray node's environment.


@dataclass(frozen=True)
class GroupShape:
    """One Ray group of the rendered RayCluster, as `ray start` sees a pod of it."""

    name: str  # "head" or the worker group's name
    num_cpus: int  # `ray start --num-cpus` takes a whole number
    num_gpus: int
    resources: dict[str, float] = field(default_factory=dict)
    replicas: int = 1
    max_replicas: int = 1


def _ray_start_resources(params: Mapping[str, Any]) -> dict[str, float]:
    """rayStartParams.resources as `ray start` receives it (KubeRay writes it into a
    shell command: pod.go, convertParamMap; tests/k8s/kuberay_rules.ray_start_flag)."""
    from tests.k8s.kuberay_rules import ray_start_flag

    if "resources" not in params:
        return {}
    flag = ray_start_flag("resources", str(params["resources"]))
    return {k: float(v) for k, v in json.loads(flag.split("=", 1)[1]).items()}


def _pod_cpus_and_gpus(template: Mapping[str, Any]) -> tuple[float, int]:
    (container, *_) = template["spec"]["containers"]
    limits = container.get("resources", {}).get("limits", {})
    cpu = str(limits.get("cpu", "1"))
    cpus = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    return cpus, int(limits.get("nvidia.com/gpu", 0))


def _shape(name: str, group: Mapping[str, Any], replicas: int, max_replicas: int) -> GroupShape:
    params = group.get("rayStartParams", {})
    pod_cpus, gpus = _pod_cpus_and_gpus(group["template"])
    # Ray reads the container's CPU limit when num-cpus is not given (as in a pod).
    num_cpus = int(float(params.get("num-cpus", pod_cpus)))
    gpus = int(params.get("num-gpus", gpus))
    return GroupShape(name, num_cpus, gpus, _ray_start_resources(params), replicas, max_replicas)


def ray_groups(overlay: str) -> dict[str, GroupShape]:
    """The head and every worker group of the overlay's RayCluster, by name."""
    spec = raycluster_of(render_overlay(overlay, K8S), overlay)["spec"]
    groups = {"head": _shape("head", spec["headGroupSpec"], 1, 1)}
    for group in spec["workerGroupSpecs"]:
        name = group["groupName"]
        groups[name] = _shape(
            name, group, int(group.get("replicas", 0)), int(group.get("maxReplicas", 1))
        )
    return groups


def shipped_vllm_models() -> list[str]:
    """The model ids of conf/model's vLLM models (what the weights Job would fetch)."""
    import yaml

    models = []
    for path in sorted((REPO_ROOT / "conf" / "model").glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if data.get("backend") == "vllm" and data.get("model"):
            models.append(str(data["model"]))
    return models


def cache_snapshot(cache: Path, model: str) -> None:
    """`model` in the Hugging Face cache layout `snapshot_download` leaves (refs/main ->
    snapshots/<revision> with a config and a weights file): what `require_cached` and
    vLLM offline look for. The weights are a stand-in's: one zero byte."""
    folder = cache / ("models--" + model.replace("/", "--"))
    snapshot = folder / "snapshots" / "twin"
    snapshot.mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text("twin")
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"\0")


def stand_in_vllm_env(folder: Path) -> dict[str, str]:
    """The twin's vLLM side in `folder`: a `vllm` script (running twin_vllm.py) first on
    PATH, and the pods' offline model cache (k8s/base's ConfigMap: HF_HUB_OFFLINE=1,
    HF_HUB_CACHE=/models/hub; here a folder of the twin) with every shipped vLLM model."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    vllm = bin_dir / "vllm"
    vllm.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec "{sys.executable}" -m tests.support.twin_vllm "$@"\n'
    )
    vllm.chmod(0o755)
    cache = folder / "models" / "hub"
    for model in shipped_vllm_models():
        cache_snapshot(cache, model)
    return {
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(cache),
        TWIN_REPLIES_ENV: str(folder / "replies.json"),
    }


@dataclass
class ClusterTwin:
    overlay: str
    groups: dict[str, GroupShape]
    pods: dict[str, int]  # group -> pods started
    ray: LocalRayCluster
    env: dict[str, str]  # every pod's environment (its Secrets and ConfigMaps)
    folder: Path  # the stand-in vllm, the model cache, the replies it serves

    def serve_replies(
        self,
        script: str,
        delay_s: float = 0.0,
        gates: dict[str, dict[str, str]] | None = None,
    ) -> None:
        """What every stand-in vLLM replica started from now on answers: `script`
        (module:function, distillery.testing.scripted_server's) after `delay_s`;
        `gates`: per served model, the file its replies wait for (`gate`) and the one
        its first request creates (`arrived`)."""
        (self.folder / "replies.json").write_text(
            json.dumps({"script": script, "delay_s": delay_s, "gates": gates or {}})
        )

    def node_names(self, group: str) -> list[str]:
        return [f"{group}-{i}" for i in range(self.pods.get(group, 0))]

    def driver_env(self) -> dict[str, str]:
        """What the RayJob's driver gets on the head pod: the pods' environment, the
        cluster's address (Ray's job supervisor sets RAY_ADDRESS) and its token."""
        return {
            **os.environ,
            **self.env,
            **self.ray.env,
            "RAY_ADDRESS": self.ray.address,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
            "HF_HUB_OFFLINE": "1",
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }


def start_twin(
    overlay: str, pods: Mapping[str, int] | None = None, env: Mapping[str, str] | None = None
) -> ClusterTwin:
    """The overlay's Ray cluster on loopback: the head, and `pods[group]` pods of each
    worker group (default: its `replicas`, the pods KubeRay starts before any demand).
    `env`: set in every node's environment (what the pods' Secrets and ConfigMaps
    would give them)."""
    groups = ray_groups(overlay)
    wanted = {g.name: g.replicas for g in groups.values() if g.name != "head"}
    wanted.update(pods or {})
    unknown = set(wanted) - set(groups)
    if unknown:
        raise ValueError(f"overlay {overlay} has no Ray group {sorted(unknown)}")
    for name, count in wanted.items():
        if count > groups[name].max_replicas:
            raise ValueError(f"group {name}: {count} pods, maxReplicas {groups[name].max_replicas}")
    folder = Path(tempfile.mkdtemp(prefix="twin-vllm-"))
    env = {**stand_in_vllm_env(folder), **(env or {})}
    ray = LocalRayCluster()
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the nodes inherit this process's environment
    try:
        head = groups["head"]
        ray.start_head(head.num_cpus, head.resources, head.num_gpus)
        for name, count in wanted.items():
            shape = groups[name]
            for i in range(count):
                ray.add_node(f"{name}-{i}", shape.num_cpus, shape.resources, shape.num_gpus)
    except BaseException:
        ray.stop()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ClusterTwin(overlay, groups, dict(wanted), ray, env, folder)


@contextmanager
def cluster_twin(
    overlay: str, pods: Mapping[str, int] | None = None, env: Mapping[str, str] | None = None
) -> Iterator[ClusterTwin]:
    twin = start_twin(overlay, pods, env)
    try:
        yield twin
    finally:
        twin.ray.stop()
        shutil.rmtree(twin.folder, ignore_errors=True)


def entrypoint(overrides: list[str]) -> list[str]:
    """The RayJob's entrypoint (k8s/rayjob/rayjob.yaml, as `distillery submit --k8s`
    writes it: its defaults under the user's overrides), run by this Python."""
    defaults = template_defaults(rayjob_template(K8S))
    return [
        sys.executable,
        "-m",
        "distillery.orchestrator.cli.app",
        *merge_overrides(defaults, overrides),
    ]


def stand_in_vllm(
    twin: ClusterTwin, role: str, gpus: int, script: str, delay_s: float = 0.0
) -> list[str]:
    """Overrides serving `role`'s model (a vLLM model of conf/model, `backend: vllm`
    kept) by one replica of `gpus` GPUs, tensor parallel over all of them, which the
    pool places and launches as on the cluster (module docstring): on cluster=kuberay
    only a pod of group vllm-<gpus>gpu has its bundles. The twin's stand-in vllm serves
    `script` after `delay_s` per reply (a model's decoding time)."""
    twin.serve_replies(script, delay_s)
    return [
        f"{role}.replicas=1",
        f"{role}.gpus_per_server={gpus}",
        f"{role}.tensor_parallel_size={gpus}",
        f"{role}.startup_timeout_s=120",
        f"{role}.server_host=127.0.0.1",  # every twin node is this machine's loopback
    ]


def launches(calls_dir: Path) -> list[dict[str, Any]]:
    """What each stand-in vllm was launched with (twin_vllm.launch_record), by pid."""
    records = [json.loads(p.read_text()) for p in calls_dir.glob("*.launch.json")]
    return sorted(records, key=lambda r: r["pid"])


# Run against the twin as a driver of its own (a subprocess: the test process stays out
# of the twin's Ray): every placement group (removed ones too: the table keeps them, with
# the node of each bundle) and the replica pool's actors, their nodes named by the pod
# (a twin node advertises node_<pod>: tests/support/ray_cluster.py).
_PLACEMENTS = """
import json, ray
from ray._private import state  # the GCS actor table: the state API needs a dashboard
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
pods = {
    n["NodeID"]: next((k[5:] for k in n["Resources"] if k.startswith("node_")), "?")
    for n in ray.nodes()
}
groups = [
    {"strategy": g["strategy"], "state": g["state"],
     "bundles": [g["bundles"][i] for i in sorted(g["bundles"])],
     "pods": [pods.get(g["bundles_to_node_id"].get(i), "?") for i in sorted(g["bundles"])]}
    for g in ray.util.placement_group_table().values()
]
actors = [
    {"class": a["ActorClassName"], "pod": pods.get(a["Address"]["NodeID"], "?"),
     "pid": a["Pid"], "state": a["State"]}
    for a in state.actors().values()
    if a["ActorClassName"] in ("LlmServerImpl", "GpuLeaseImpl")
]
print(json.dumps({"groups": groups, "actors": actors}))
"""


def replica_placements(twin: ClusterTwin) -> dict[str, list[dict[str, Any]]]:
    """The twin's placement groups (strategy, bundles, the pod of each bundle) and its
    model-server and GPU-lease actors (pod, pid, state), live or gone."""
    done = subprocess.run(
        [sys.executable, "-c", _PLACEMENTS],
        env={**twin.driver_env(), "RAY_ADDRESS": twin.ray.address},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def counted_calls(calls_dir: Path) -> dict[str, int]:
    """Requests answered per stand-in server process (its pid)."""
    return {p.stem: len(p.read_text().splitlines()) for p in sorted(calls_dir.glob("*.calls"))}


def calls_by_task(calls_dir: Path) -> Counter[str]:
    """Requests answered per BFCL task, by every stand-in server (counted_replay_native)."""
    found: Counter[str] = Counter()
    for path in calls_dir.glob("*.calls"):
        for line in path.read_text().splitlines():
            _, _, task = line.partition("\t")
            found[task] += 1
    return found


def _count(request: dict[str, Any], task: str = "") -> None:
    """One line per chat request but a preflight in this server's file (CALLS_DIR_ENV):
    the model asked and the task the request belongs to, where the script knows it.
    Written after the server's delay, as the reply leaves: a line is a call answered."""
    from distillery.workers.llm.compat import PREFLIGHT_PROMPT

    messages = request.get("messages") or []
    preflight = len(messages) == 1 and messages[0].get("content") == PREFLIGHT_PROMPT
    folder = os.environ.get(CALLS_DIR_ENV)
    if folder and not preflight:
        with (Path(folder) / f"{os.getpid()}.calls").open("a") as out:
            out.write(f"{request.get('model')}\t{task}\n")


def counted_replay_native(request: dict[str, Any]) -> dict[str, Any]:
    """bfcl_scripts.replay_native, counted per task."""
    from distillery.testing.bfcl_scripts import _position, replay_native

    try:
        task = _position(request.get("messages") or [])[0].task_id
    except (KeyError, ValueError, IndexError):  # the pool's preflight: no task's message
        task = ""
    _count(request, task)
    return replay_native(request)


def counted_brew_student(request: dict[str, Any]) -> dict[str, Any]:
    """agentbrew_scripts.student (solves a hard task only with its group's note), counted."""
    from distillery.testing.agentbrew_scripts import student

    _count(request)
    return student(request)
