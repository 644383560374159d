"""The same sweep on a cluster: `distillery submit` through the Ray Jobs API, and the KubeRay
RayJob (and the model-cache Job) rendered from k8s/ for `distillery submit --k8s`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.cluster.k8s import (
        build_rayjob,
        build_weights_job,
        gpu_groups,
        kustomize,
        rayjob_template,
        render_overlay,
        template_defaults,
        the_raycluster,
        weights_template,
    )
    from distillery.orchestrator.cluster.submit import (
        SWEEP_ID_KEY,
        SWEEP_LABEL,
        AlreadyRunning,
        PreparedSweep,
        main,
        merge_overrides,
        override_key,
        prepare,
        runtime_env,
        submit_job,
    )

__all__ = [
    "AlreadyRunning",
    "PreparedSweep",
    "SWEEP_ID_KEY",
    "SWEEP_LABEL",
    "build_rayjob",
    "build_weights_job",
    "gpu_groups",
    "kustomize",
    "main",
    "merge_overrides",
    "override_key",
    "prepare",
    "rayjob_template",
    "render_overlay",
    "runtime_env",
    "submit_job",
    "template_defaults",
    "the_raycluster",
    "weights_template",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (k8s reads the templates with PyYAML); pyright sees the
# imports above (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "k8s": (
                "build_rayjob",
                "build_weights_job",
                "gpu_groups",
                "kustomize",
                "rayjob_template",
                "render_overlay",
                "template_defaults",
                "the_raycluster",
                "weights_template",
            ),
            "submit": (
                "AlreadyRunning",
                "PreparedSweep",
                "SWEEP_ID_KEY",
                "SWEEP_LABEL",
                "main",
                "merge_overrides",
                "override_key",
                "prepare",
                "runtime_env",
                "submit_job",
            ),
        },
    )
