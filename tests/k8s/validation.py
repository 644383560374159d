"""Strict offline validation of rendered Kubernetes objects.

Core objects go through `kubernetes-validate` (the API server's OpenAPI schemas, with
unknown fields rejected). KubeRay objects go through the OpenAPI v3 schema in KubeRay's
own CRDs (k8s/schemas/kuberay/), made strict the way the API server prunes: an object
schema that lists `properties` allows no other field unless it says
`x-kubernetes-preserve-unknown-fields`. The CRDs leave `metadata` free-form (the API
server checks it as ObjectMeta), so it is checked here as ObjectMeta too.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "k8s" / "schemas" / "kuberay"
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}
# The Kubernetes version whose schemas core objects are validated against.
KUBERNETES_VERSION = "1.32.0"
_OBJECT_META_FIELDS = {"name", "generateName", "namespace", "labels", "annotations"}


def strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever the API server would prune."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_schema(kind: str, version: str = "v1") -> dict[str, Any]:
    crd = yaml.safe_load((CRD_DIR / CRD_FILES[kind]).read_text())
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return strict(found["schema"]["openAPIV3Schema"])


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Every violation of the KubeRay CRD schema by a RayCluster or RayJob."""
    group, _, version = obj["apiVersion"].partition("/")
    assert group == "ray.io", obj["apiVersion"]
    validator = jsonschema.Draft7Validator(crd_schema(obj["kind"], version))
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
    errors += [
        f"metadata.{key}: not an ObjectMeta field we allow"
        for key in set(obj.get("metadata", {})) - _OBJECT_META_FIELDS
    ]
    errors += core_errors(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    )
    return errors


def core_errors(obj: dict[str, Any]) -> list[str]:
    """Every violation of the Kubernetes API schema by a core object (strict)."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
    return []
