"""A twin of the Kubernetes cluster that k8s/ creates, on this machine: the overlay
rendered with `kubectl kustomize` (as tests/k8s does), each Ray group's shape read
from its RayCluster (rayStartParams num-cpus and resources, the pod's
`nvidia.com/gpu` limit as Ray GPUs, replicas) and a loopback Ray cluster started with
exactly those nodes (tests/support/ray_cluster.py: token auth, free ports, a node per
pod). Sweeps then run on it through the RayJob's own entrypoint (k8s/rayjob: the
command and defaults `distillery submit --k8s` sends), with scripted servers standing in
for vLLM, started by the pool code in the placement groups a vLLM replica of that size
reserves on the GPU group.

What the twin cannot be: the autoscaler (a group has the pods the test asks for, never
more) and Kubernetes itself (admission, volumes, images): those are tests/k8s's.
"""

from __future__ import annotations

import json
import os
import sys
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

K8S = REPO_ROOT / "k8s"
# Where each stand-in server counts the chat requests it answered (one file per server
# process): the scripted server inherits the Ray node's environment.
CALLS_DIR_ENV = "DISTILLERY_TWIN_CALLS_DIR"


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


@dataclass
class ClusterTwin:
    overlay: str
    groups: dict[str, GroupShape]
    pods: dict[str, int]  # group -> pods started
    ray: LocalRayCluster
    env: dict[str, str]  # every pod's environment (its Secrets and ConfigMaps)

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
    ray = LocalRayCluster()
    previous = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})  # the nodes inherit this process's environment
    try:
        head = groups["head"]
        ray.start_head(head.num_cpus, head.resources, head.num_gpus)
        for name, count in wanted.items():
            shape = groups[name]
            for i in range(count):
                ray.add_node(f"{name}-{i}", shape.num_cpus, shape.resources, shape.num_gpus)
    except BaseException:
        ray.stop()
        raise
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ClusterTwin(overlay, groups, dict(wanted), ray, dict(env or {}))


@contextmanager
def cluster_twin(
    overlay: str, pods: Mapping[str, int] | None = None, env: Mapping[str, str] | None = None
) -> Iterator[ClusterTwin]:
    twin = start_twin(overlay, pods, env)
    try:
        yield twin
    finally:
        twin.ray.stop()


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


def stand_in_vllm(role: str, gpus: int, script: str, delay_s: float = 0.0) -> list[str]:
    """Overrides making `role`'s model a scripted server that the pool starts as it
    would a vLLM replica of `gpus` GPUs on cluster=kuberay: one replica in a placement
    group of the bundle {CPU 1, GPU `gpus`, distillery_gpus_<gpus> 1} (pool.placement_bundles
    and ClusterConfig.replica_resources), which only a pod of group vllm-<gpus>gpu has.
    `delay_s`: the server waits that long before each reply (a model's decoding time)."""
    command = [
        sys.executable,
        "-m",
        "distillery.testing.scripted_server",
        "--script",
        script,
        "--delay",
        f"'{delay_s}'",  # quoted: a string in the command list, as Hydra reads it
        "--port",
        "'{port}'",
    ]
    return [
        f"{role}.backend=command",
        f"{role}.base_url=null",
        f"{role}.command=[{','.join(command)}]",
        f"{role}.command_cwd={REPO_ROOT}",
        f"{role}.server_host=127.0.0.1",  # every twin node is this machine's loopback
        f"{role}.replicas=1",
        f"{role}.server_num_cpus=1",
        f"+{role}.server_resources={{GPU:{gpus},distillery_gpus_{gpus}:1}}",
        f"{role}.startup_timeout_s=120",
        # vLLM's own launch flags (the stand-in is no vLLM)
        f"{role}.reasoning_parser=null",
        f"{role}.tool_call_parser=null",
    ]


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
