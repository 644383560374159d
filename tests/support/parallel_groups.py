"""Which tests share a worker when the suite runs in parallel (tests/conftest.py says
why; tests/test_parallel_groups.py checks this table against the code). Kept out of
conftest.py so that a test can import it: importing a conftest as a module confuses
pytest's fixture scoping (fixtures of other conftests were not found)."""

from __future__ import annotations

# Fixture -> group: a test that uses the fixture (directly or through another) is in it.
FIXTURE_GROUPS: dict[str, str] = {
    "sandbox": "sandbox",
    "leaves_nothing": "sandbox",
    "evalplus_packages": "sandbox",
    "appworld_envs": "appworld",
    "toolsandbox_envs": "toolsandbox",
    "envs_dir": "isolated-counter",
    "qwen_reference_libs": "qwen-math",
}

# Module (path from the repository root, as pytest names it) -> group.
MODULE_GROUPS: dict[str, str] = {
    # grades MBPP/HumanEval code in jails (the benchmarks' own tests and their sweeps)
    "tests/workers/envs/answers/test_code.py": "sandbox",
    "tests/orchestrator/test_answer_sweeps.py": "sandbox",
    # multi-node Ray clusters: tests/support/ray_cluster.py, ray_head.py, cluster_twin.py
    "tests/k8s/test_cluster_twin.py": "ray-cluster",
    "tests/orchestrator/test_multinode.py": "ray-cluster",
    "tests/orchestrator/test_lost_workers.py": "ray-cluster",
    "tests/orchestrator/test_submit.py": "ray-cluster",
}
