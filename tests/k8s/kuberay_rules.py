"""KubeRay's operator-side validation, the rules our manifests can break, in Python.

Pinned to ONE operator version, the one docs/cluster.md installs: KUBERAY_VERSION
below (tag v1.6.2, commit 598eb66; k8s/schemas/kuberay/ holds that tag's CRDs, and
tests/k8s/test_manifests.py checks the three name one version). The CRD schema
(validation.py) is what the API server checks; the operator refuses more in
`ray-operator/controllers/ray/utils/validation.go` at that tag: an object that breaks
one of these is accepted by `kubectl apply` and then never reconciled (the RayCluster
or RayJob is marked invalid in an event). Each function below names the Go function
it encodes (our own Python, written from reading it, not a translation of its code);
`cluster_errors` / `rayjob_errors` apply all of them and return one message per
violation. Rules about features we never use (deletion rules, RayService, RayCronJob)
are left out; the feature-gated ones are encoded with the gates off, as a stock
operator has them. Fields that v1.6.2's CRDs lack (TLS, NetworkPolicy, the history
server, the GCS FT storage backends of later versions) are refused by the schema.

`rayjob_deadline_errors` is not the operator's: it checks what the deadlines MEAN
(rayjob_controller.go at the same tag), which no validation of the operator does.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

# The KubeRay operator these rules (and k8s/schemas/kuberay/) are of; the runbook's
# `helm install kuberay-operator ... --version`.
KUBERAY_VERSION = "1.6.2"
# ray-operator/controllers/ray/utils/constant.go
RAY_CLUSTER_SELECTOR_KEY = "ray.io/cluster"  # RayJobClusterSelectorKey
UPGRADE_TYPES = ("Recreate", "None")  # raycluster_types.go RayClusterUpgradeType
MAX_RAYCLUSTER_NAME = 53  # MaxRayClusterNameLength (63 - len("-serve-svc"))
MAX_RAYJOB_NAME = MAX_RAYCLUSTER_NAME - 6  # MaxRayJobNameLength
RAY_ENABLE_AUTOSCALER_V2 = "RAY_enable_autoscaler_v2"
RAY_REDIS_ADDRESS = "RAY_REDIS_ADDRESS"
REDIS_PASSWORD = "REDIS_PASSWORD"
REDIS_USERNAME = "REDIS_USERNAME"
RAY_FT_ANNOTATION = "ray.io/ft-enabled"
RAY_EXTERNAL_STORAGE_NS_ANNOTATION = "ray.io/external-storage-namespace"
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _head(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["headGroupSpec"]["template"]["spec"]["containers"][0]  # RayContainerIndex


def name_errors(kind: str, name: str) -> list[str]:
    """ValidateRayClusterMetadata / ValidateRayJobMetadata: length and DNS-1035."""
    limit = MAX_RAYJOB_NAME if kind == "RayJob" else MAX_RAYCLUSTER_NAME
    errors = []
    if len(name) > limit:
        errors.append(f"{kind} name should be no more than {limit} characters: {name}")
    if not _DNS1035.match(name) or len(name) > 63:
        errors.append(f"{kind} name should be a valid DNS1035 label: {name}")
    return errors


def group_resource_errors(group: str, params: dict[str, str], resources: Any) -> list[str]:
    """validateRayGroupResources: resources in rayStartParams or the group's
    `resources` field, not both."""
    in_params = any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources"))
    if in_params and resources:
        return [f"resource fields set in both rayStartParams and Resources for {group} group"]
    return []


def group_label_errors(group: str, params: dict[str, str], labels: dict[str, str]) -> list[str]:
    """validateRayGroupLabels."""
    errors = []
    if "labels" in params:
        errors.append(f"rayStartParams['labels'] is not supported for {group} group")
    for key, value in (labels or {}).items():
        name = key.rsplit("/", 1)[-1]
        if not _QUALIFIED_NAME.match(name) or len(name) > 63:
            errors.append(f"invalid label key for {group} group: {key}")
        if not _LABEL_VALUE.match(value) or len(value) > 63:
            errors.append(f"invalid label value for key {key} in {group} group: {value}")
    return errors


def autoscaler_v2(spec: dict[str, Any]) -> bool:
    """IsAutoscalingV2Enabled (utils/util.go)."""
    return (spec.get("autoscalerOptions") or {}).get("version") == "v2"


def idle_timeout_errors(group: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """validateWorkerGroupIdleTimeout (KubeRay 1.6+; 1.5 ignores the field without
    v2): a group's idleTimeoutSeconds needs autoscalerOptions.version v2 (or the
    head's RAY_enable_autoscaler_v2, the pre-1.4 way)."""
    timeout = group.get("idleTimeoutSeconds")
    if timeout is None:
        return []
    if timeout < 0:
        return [f"worker group {group['groupName']}: idleTimeoutSeconds must be non-negative"]
    if autoscaler_v2(spec):
        return []
    flag = _env(_head(spec)).get(RAY_ENABLE_AUTOSCALER_V2, {}).get("value")
    if flag in ("1", "true"):
        return []
    return [
        f"worker group {group['groupName']}: idleTimeoutSeconds is set, but autoscaler v2 "
        "is not enabled (.spec.autoscalerOptions.version: v2)"
    ]


def gcs_ft_errors(spec: dict[str, Any], annotations: dict[str, str]) -> list[str]:
    """ValidateRayClusterSpec's GCS fault tolerance rules."""
    errors = []
    options = spec.get("gcsFaultToleranceOptions")
    head = _head(spec)
    env = _env(head)
    params = spec["headGroupSpec"].get("rayStartParams", {})
    if annotations.get(RAY_FT_ANNOTATION) and options is not None:
        errors.append(f"{RAY_FT_ANNOTATION} annotation and GcsFaultToleranceOptions both set")
    enabled = options is not None or annotations.get(RAY_FT_ANNOTATION, "").lower() == "true"
    if not enabled and RAY_REDIS_ADDRESS in env:
        errors.append(f"{RAY_REDIS_ADDRESS} is set but GcsFaultToleranceOptions is not")
    if options is not None:
        if params.get("redis-password"):
            errors.append("redis-password in rayStartParams with GcsFaultToleranceOptions")
        for name in (REDIS_PASSWORD, RAY_REDIS_ADDRESS):
            if name in env:
                errors.append(f"{name} env var in the head with GcsFaultToleranceOptions")
        if annotations.get(RAY_EXTERNAL_STORAGE_NS_ANNOTATION):
            errors.append(f"{RAY_EXTERNAL_STORAGE_NS_ANNOTATION} with GcsFaultToleranceOptions")
    if params.get("redis-username") or REDIS_USERNAME in env:
        errors.append("redis username in rayStartParams or env")
    return errors


def cluster_spec_errors(
    spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> list[str]:
    """ValidateRayClusterSpec, the rules that concern what k8s/ sets."""
    annotations = annotations or {}
    errors = []
    head_pod = spec["headGroupSpec"]["template"]["spec"]
    if not head_pod.get("containers"):
        return ["headGroupSpec should have at least one container"]
    head_params = spec["headGroupSpec"].get("rayStartParams", {})
    errors += group_resource_errors("Head", head_params, spec["headGroupSpec"].get("resources"))
    errors += group_label_errors("Head", head_params, spec["headGroupSpec"].get("labels"))
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    for group in spec.get("workerGroupSpecs", []):
        name = group["groupName"]
        if not group["template"]["spec"].get("containers"):
            errors.append(f"workerGroupSpec {name} should have at least one container")
            continue
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        if not autoscaling and (low is None or high is None):
            errors.append(f"worker group {name} must set minReplicas and maxReplicas")
        if (low is not None and low < 0) or (high is not None and high < 0):
            errors.append(f"worker group {name} has negative replicas bounds")
        if low is not None and high is not None and low > high:
            errors.append(f"worker group {name} has minReplicas greater than maxReplicas")
        params = group.get("rayStartParams", {})
        errors += group_resource_errors(name, params, group.get("resources"))
        errors += group_label_errors(name, params, group.get("labels"))
        errors += idle_timeout_errors(group, spec)
        if group.get("suspend"):
            errors.append(f"worker group {name} cannot be suspended")
    errors += gcs_ft_errors(spec, annotations)
    head_env = _env(head_pod["containers"][0])
    if not autoscaling and head_env.get(RAY_ENABLE_AUTOSCALER_V2, {}).get("value") in ("1", "true"):
        errors.append(f"{RAY_ENABLE_AUTOSCALER_V2} set while enableInTreeAutoscaling is false")
    if autoscaling:
        options = spec.get("autoscalerOptions") or {}
        if options.get("version") and RAY_ENABLE_AUTOSCALER_V2 in head_env:
            errors.append(f"both autoscalerOptions.version and {RAY_ENABLE_AUTOSCALER_V2}")
        if autoscaler_v2(spec):
            pods = [head_pod] + [g["template"]["spec"] for g in spec.get("workerGroupSpecs", [])]
            if any(p.get("restartPolicy") not in (None, "", "Never") for p in pods):
                errors.append("restartPolicy should be Never or unset with autoscaler v2")
    timeout = (spec.get("autoscalerOptions") or {}).get("idleTimeoutSeconds")
    if timeout is not None and timeout < 0:
        errors.append("autoscalerOptions.idleTimeoutSeconds must be non-negative")
    errors += auth_errors(spec)
    return errors


def auth_errors(spec: dict[str, Any]) -> list[str]:
    """ValidateRayClusterSpec's token authentication rules (IsAuthEnabled,
    IsK8sAuthEnabled): token mode needs Ray 2.52+; Kubernetes token auth needs token
    mode, Ray 2.55+ and no secretName."""
    errors = []
    auth = spec.get("authOptions") or {}
    k8s_auth = auth.get("enableK8sTokenAuth") is True
    version = spec.get("rayVersion", "")
    if auth.get("mode") == "token":
        if not version:
            errors.append("authOptions.mode is 'token' but rayVersion is not set")
        elif _version(version) < (2, 52, 0):
            errors.append(f"authOptions.mode is 'token' but Ray {version} < 2.52.0")
        elif k8s_auth and _version(version) < (2, 55, 0):
            errors.append(f"authOptions.enableK8sTokenAuth needs Ray 2.55.0, got {version}")
        if k8s_auth and auth.get("secretName"):
            errors.append("authOptions.enableK8sTokenAuth with authOptions.secretName")
    elif k8s_auth:
        errors.append("authOptions.enableK8sTokenAuth without authOptions.mode 'token'")
    return errors


def upgrade_strategy_errors(spec: dict[str, Any], created_by: str | None) -> list[str]:
    """ValidateRayClusterUpgradeOptions: the type is Recreate or None, and is set only on
    a RayCluster a user created (not one a RayJob or RayService makes: the operator
    labels those ray.io/originated-from-crd, so a RayJob's rayClusterSpec may not set it)."""
    kind = (spec.get("upgradeStrategy") or {}).get("type")
    if kind is None:
        return []
    errors = []
    if kind not in UPGRADE_TYPES:
        errors.append(f"upgradeStrategy.type {kind} is invalid: one of {', '.join(UPGRADE_TYPES)}")
    if created_by in ("RayJob", "RayService"):
        errors.append(
            f"upgradeStrategy cannot be set when the RayCluster is created by {created_by}"
        )
    return errors


def runtime_env_yaml_errors(text: str) -> list[str]:
    """ValidateRayJobSpec's runtimeEnvYAML check (dashboardclient.UnmarshalRuntimeEnvYAML:
    YAML that unmarshals into a map; empty is allowed). Its schema is not checked there."""
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError as exc:
        return [f"runtimeEnvYAML is not valid YAML: {exc}".splitlines()[0]]
    if value is not None and not isinstance(value, dict):
        return [f"runtimeEnvYAML is not a mapping (a {type(value).__name__})"]
    return []


def rayjob_spec_errors(job: dict[str, Any]) -> list[str]:
    """ValidateRayJobSpec and validateDeletionConfiguration (no deletionStrategy)."""
    spec = job["spec"]
    errors = []
    shutdown = spec.get("shutdownAfterJobFinishes", False)
    if spec.get("suspend") and not shutdown:
        errors.append("a RayJob with shutdownAfterJobFinishes false cannot be suspended")
    ttl = spec.get("ttlSecondsAfterFinished", 0)
    if ttl < 0:
        errors.append("TTLSecondsAfterFinished must be non-negative")
    if not shutdown and ttl > 0:
        errors.append("shutdownAfterJobFinishes false cannot have TTLSecondsAfterFinished")
    if spec.get("deletionStrategy") is not None:
        errors.append("deletionStrategy needs the RayJobDeletionPolicy feature gate")
    selector = spec.get("clusterSelector") or {}
    if spec.get("suspend") and selector:
        errors.append("the clusterSelector mode does not support suspend")
    if spec.get("rayClusterSpec") is None and not selector:
        errors.append("one of rayClusterSpec or clusterSelector must be set")
    mode = spec.get("submissionMode", "K8sJobMode")
    backoff = spec.get("backoffLimit")
    if selector:
        if not selector.get(RAY_CLUSTER_SELECTOR_KEY):
            errors.append(f"clusterSelector needs a non-empty {RAY_CLUSTER_SELECTOR_KEY}")
        if mode == "SidecarMode":
            errors.append("clusterSelector is not supported in SidecarMode")
        if backoff is not None and backoff > 0:
            errors.append("backoffLimit is incompatible with clusterSelector")
    if mode == "InteractiveMode" and backoff is not None and backoff > 0:
        errors.append("backoffLimit is incompatible with InteractiveMode")
    cluster = spec.get("rayClusterSpec")
    if mode == "SidecarMode":
        if spec.get("submitterPodTemplate") is not None:
            errors.append("SidecarMode does not support submitterPodTemplate")
        if spec.get("submitterConfig") is not None:
            errors.append("SidecarMode does not support submitterConfig")
        head_pod = (cluster or {}).get("headGroupSpec", {}).get("template", {}).get("spec", {})
        if head_pod.get("restartPolicy") not in (None, "", "Never"):
            errors.append("restartPolicy of the head should be Never or unset in SidecarMode")
    if cluster is not None:
        if (cluster.get("authOptions") or {}).get("enableK8sTokenAuth"):
            errors.append("K8s token auth is not supported for RayJob")
        errors += cluster_spec_errors(cluster, job.get("metadata", {}).get("annotations"))
        errors += upgrade_strategy_errors(cluster, "RayJob")
    errors += runtime_env_yaml_errors(spec.get("runtimeEnvYAML", ""))
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if spec.get(field) is not None and spec[field] <= 0:
            errors.append(f"{field} must be a positive integer")
    if backoff is not None and backoff < 0:
        errors.append("backoffLimit must be a positive integer")
    return errors


def rayjob_deadline_errors(job: dict[str, Any], cold_start_s: int) -> list[str]:
    """What the RayJob's deadlines mean (rayjob_controller.go at KUBERAY_VERSION), ours:

    * `Status.StartTime` is set when an attempt enters Initializing
      (initRayJobStatusIfNeed), and a retry resets the status to New, so each attempt
      gets a fresh StartTime: activeDeadlineSeconds bounds ONE attempt (cluster start,
      image pulls and the sweep), and the RayJob's worst case is
      (backoffLimit + 1) x activeDeadlineSeconds. An attempt failed by it
      (DeadlineExceeded) is never retried (checkBackoffLimitAndUpdateStatusIfNeeded).
    * preRunningDeadlineSeconds is checked only while Initializing or Waiting, against
      the same StartTime: it bounds the wait for the RayCluster to be Ready (the head
      pod scheduled, its image pulled) and the submitter Job created, and a RayJob
      failed by it (PreRunningDeadlineExceeded) IS retried. It must leave room for a
      cold start (`cold_start_s`) and be shorter than activeDeadlineSeconds, or it
      never fires.
    """
    spec = job["spec"]
    active, pre = spec.get("activeDeadlineSeconds"), spec.get("preRunningDeadlineSeconds")
    errors = []
    if pre is not None and pre < cold_start_s:
        errors.append(f"preRunningDeadlineSeconds {pre} < a cold start ({cold_start_s} s)")
    if pre is not None and active is not None and pre >= active:
        errors.append("preRunningDeadlineSeconds >= activeDeadlineSeconds: it never fires")
    if active is not None and pre is not None and active <= cold_start_s:
        errors.append(f"activeDeadlineSeconds {active} leaves no time after a cold start")
    return errors


def generated_names(generate_name: str) -> list[str]:
    """The names the API server may give an object with this generateName (5 random
    lower-case alphanumerics appended): the shortest and longest cases checked."""
    return [generate_name + "a1b2c", generate_name + "00000"]


def ray_start_flag(option: str, value: str) -> str:
    """How KubeRay writes one rayStartParam into the container's shell command
    (ray-operator/controllers/ray/common/pod.go, convertParamMap), as the shell reads it."""
    (word,) = shlex.split(f" --{option}={value} ")
    return word


def cluster_errors(cluster: dict[str, Any]) -> list[str]:
    meta = cluster.get("metadata", {})
    created_by = (meta.get("labels") or {}).get("ray.io/originated-from-crd")
    return (
        name_errors("RayCluster", meta["name"])
        + cluster_spec_errors(cluster["spec"], meta.get("annotations"))
        + upgrade_strategy_errors(cluster["spec"], created_by)
    )


def rayjob_errors(job: dict[str, Any]) -> list[str]:
    meta = job.get("metadata", {})
    names = [meta["name"]] if "name" in meta else generated_names(meta["generateName"])
    errors = [e for name in names for e in name_errors("RayJob", name)]
    return errors + rayjob_spec_errors(job)
