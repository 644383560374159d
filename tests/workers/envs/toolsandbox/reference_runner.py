"""ToolSandbox's own runner, run by the ToolSandbox venv's interpreter:
``python reference_runner.py SPEC.json``.

As its CLI plays a scenario (`tool_sandbox.cli`: `random.seed(42)`, `named_scenarios`,
`Scenario.play_and_evaluate` with the three roles), with ToolSandbox's own OpenAI agent
role (`OpenAIAPIAgent`) and its own OpenAI user role (`OpenAIAPIUser`), each given a
client of the spec's scripted server instead of api.openai.com (their `__init__` only
builds that client). Writes one JSON line per run: the scenario's evaluation.

Spec: {"url": ..., "out": ..., "output_dir": ...,
       "runs": [{"scenario": ..., "agent_model": ..., "user_model": ...}]}
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    from openai import DefaultHttpxClient, OpenAI
    from tool_sandbox.common.execution_context import RoleType
    from tool_sandbox.common.tool_discovery import ToolBackend
    from tool_sandbox.roles.execution_environment import ExecutionEnvironment
    from tool_sandbox.roles.openai_api_agent import OpenAIAPIAgent
    from tool_sandbox.roles.openai_api_user import OpenAIAPIUser
    from tool_sandbox.scenarios import named_scenarios

    def client() -> OpenAI:
        # openai 1.17 builds its own httpx client with `proxies`, which httpx 0.28
        # removed: its default client, built here (as distillery's world builds it).
        return OpenAI(base_url=spec["url"], api_key="EMPTY", http_client=DefaultHttpxClient())

    class Agent(OpenAIAPIAgent):
        def __init__(self, model: str) -> None:
            self.model_name = model
            self.openai_client = client()

    class User(OpenAIAPIUser):
        def __init__(self, model: str) -> None:
            self.model_name = model
            self.openai_client = client()

    random.seed(42)  # tool_sandbox.cli.main, before the scenarios are built
    scenarios = named_scenarios(preferred_tool_backend=ToolBackend.DEFAULT)
    with open(spec["out"], "w", encoding="utf-8") as out:
        for run in spec["runs"]:
            roles = {
                RoleType.USER: User(run["user_model"]),
                RoleType.EXECUTION_ENVIRONMENT: ExecutionEnvironment(),
                RoleType.AGENT: Agent(run["agent_model"]),
            }
            result = scenarios[run["scenario"]].play_and_evaluate(
                roles=roles,
                output_directory=Path(spec["output_dir"]),
                scenario_name=run["scenario"],
            )
            evaluation = result.evaluation_result
            out.write(
                json.dumps(
                    {
                        "agent_model": run["agent_model"],
                        "similarity": evaluation.similarity,
                        "milestone_similarity": evaluation.milestone_similarity,
                        "turn_count": evaluation.turn_count,
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main(sys.argv[1])
