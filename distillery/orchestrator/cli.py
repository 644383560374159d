"""`distillery`: Hydra-composed config -> validated config -> experiment.

    distillery                                   # experiment=quickstart
    distillery benchmark.limit=20 student=qwen3_4b cluster=ray
    distillery student=external student.base_url=http://host:8000/v1 \\
        student.model=NAME student.api_key_env=MY_KEY_VAR
    distillery memory list|show|export ...       # inspect memory banks
"""

from __future__ import annotations

import os
import re
import sys

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

import distillery.conf  # noqa: E402,F401  (registers the model schema with Hydra)
from distillery.orchestrator.config import ConfigError, to_config  # noqa: E402

# Teacher and student are both drawn from the `model` config group; Hydra spells that
# `model@student=NAME`, users say `student=NAME`.
_ROLE_GROUP = re.compile(r"^(~|\+)?(teacher|student)=")


def rewrite_role_overrides(argv: list[str]) -> list[str]:
    return [_ROLE_GROUP.sub(lambda m: f"{m.group(1) or ''}model@{m.group(2)}=", a) for a in argv]


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    try:
        config = to_config(cfg)
    except ConfigError as exc:
        print(f"distillery: {exc}", file=sys.stderr)
        print("Fix the key on the command line or in conf/, then re-run.", file=sys.stderr)
        sys.exit(2)
    except ValueError as exc:
        print(f"distillery: {exc}", file=sys.stderr)
        sys.exit(2)

    from distillery.orchestrator.run import print_summary, run_experiment

    try:
        result = run_experiment(config)
    except ValueError as exc:  # a bad split or task id, found before Ray starts
        print(f"distillery: {exc}", file=sys.stderr)
        sys.exit(2)
    print_summary(result)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "memory":
        from distillery.orchestrator.memory_cli import main as memory_main

        sys.exit(memory_main(sys.argv[2:]))
    sys.argv = [sys.argv[0], *rewrite_role_overrides(sys.argv[1:])]
    _hydra_main()


if __name__ == "__main__":
    main()
