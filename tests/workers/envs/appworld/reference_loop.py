"""The reference: ACE's own AppWorld ReAct agent, run as the AMD authors ran it.

Run by the interpreter of AppWorld's venv (never imported by distillery or the tests):
``python reference_loop.py SPEC.json``. It imports ACE's `evaluation_react.py` (the
`SimplifiedReActAgent`) and the agent base it uses, `evaluation_agent.py`, from the
vendored `experiments` folder (../shared/vendor/ace-appworld, Apache-2.0) as the
package `appworld_experiments` they import themselves as, and plays each run of the
spec with their own `solve_tasks`: their prompt rendering, code extraction, output
wrapping, history and stopping rule, against AppWorld itself.

Pieces that cannot run here are re-implemented. The model client
(`lite_llm_generator.LiteLLMGenerator`) imports litellm (pydantic 2, which AppWorld's
venv cannot hold); two helpers ACE's fork of AppWorld adds to `appworld.common.utils`
(`chunk_and_return`, `maybe_create_parent_directory`) are not in the released AppWorld
0.1.3.post1 and are added to it here (`_fork_helpers`). The stand-in below sends what the authors' client sends
(`non_cached_chat_completion`: model, messages, then max_tokens, stop, temperature and
top_p when set, chat_template_kwargs as extra body, nothing else) to the same scripted
OpenAI-compatible server, and returns the reply's message as theirs does (the text
after a `<think>` line when chat_template_kwargs are configured). Scoring is AppWorld's
own `world.evaluate()`, taken as the world closes.

The spec (JSON): experiments (the vendored folder), prompt_file, playbook_file,
base_url, generation (the model config's other keys), max_steps, runs ([{model,
task_id}]) and out (the results file: one JSON object per run).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import httpx


class LiteLLMGenerator:
    """Stand-in for the authors' `LiteLLMGenerator` (see the module docstring)."""

    def __init__(self, name: str, base_url: str, **generation: Any) -> None:
        self.model = name
        self.base_url = base_url.rstrip("/")
        self.generation = generation

    def generate(self, messages: list[dict], tools: list | None = None, **kwargs: Any) -> dict:
        options = {**self.generation, **kwargs}
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        for key in ("max_tokens", "stop", "temperature", "top_p"):
            if options.get(key) is not None:
                body[key] = options[key]
        if "chat_template_kwargs" in options:
            body["chat_template_kwargs"] = options["chat_template_kwargs"]
        reply = httpx.post(f"{self.base_url}/chat/completions", json=body, timeout=120)
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
        if "chat_template_kwargs" in options and message.get("content") is not None:
            message["content"] = message["content"].split("<think>\n")[-1]
        return {**message, "cost": 0.0}

    def log_calls_to(self, file_path: str | None = None, world: Any = None) -> None:
        return None


def _package(name: str, path: Path) -> None:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]  # submodules load from there; __init__ is not run
    sys.modules[name] = module


def _fork_helpers() -> None:
    """The two helpers of ACE's AppWorld fork the agent imports (chunking the task list
    over processes, making a log file's folder), as their names say."""
    import appworld.common.utils as utils

    def chunk_and_return(items: list, num_chunks: int, chunk_index: int) -> list:
        size, extra = divmod(len(items), num_chunks)
        start = chunk_index * size + min(chunk_index, extra)
        return items[start : start + size + (chunk_index < extra)]

    def maybe_create_parent_directory(path: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    for helper in (chunk_and_return, maybe_create_parent_directory):
        if not hasattr(utils, helper.__name__):
            setattr(utils, helper.__name__, helper)


def load_agent_class(experiments: Path) -> type:
    """ACE's `SimplifiedReActAgent`, imported from the vendored folder with only the
    model client replaced (the packages' __init__ files import every agent, litellm's
    users included, so the packages are made without running them)."""
    _fork_helpers()
    _package("appworld_experiments", experiments)
    _package("appworld_experiments.code", experiments / "code")
    _package("appworld_experiments.code.ace", experiments / "code" / "ace")
    client = types.ModuleType("appworld_experiments.code.ace.lite_llm_generator")
    client.LiteLLMGenerator = LiteLLMGenerator  # type: ignore[attr-defined]
    sys.modules[client.__name__] = client
    from appworld_experiments.code.ace.evaluation_react import SimplifiedReActAgent

    return SimplifiedReActAgent


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    data = Path(os.environ["APPWORLD_ROOT"]) / "data"
    # As distillery's world does: AppWorld's outputs go to a private root.
    root = tempfile.mkdtemp(prefix="appworld-reference-")
    os.symlink(data, os.path.join(root, "data"))
    os.environ["APPWORLD_ROOT"] = root
    from appworld import AppWorld

    agent_class = load_agent_class(Path(spec["experiments"]))
    scores: dict[str, dict] = {}
    close = AppWorld.close

    def evaluate_then_close(world: AppWorld) -> None:
        tracker = world.evaluate()
        scores[world.task_id] = {
            "success": bool(tracker.success),
            "passes": tracker.pass_count,
            "num_tests": tracker.num_tests,
        }
        close(world)

    AppWorld.close = evaluate_then_close  # type: ignore[method-assign]
    try:
        with open(spec["out"], "w") as out:
            for index, run in enumerate(spec["runs"]):
                agent = agent_class(
                    generator_model_config={
                        "name": run["model"],
                        "base_url": spec["base_url"],
                        # a run's own: the authors' settings of its student
                        **run.get("generation", spec["generation"]),
                    },
                    generator_prompt_file_path=spec["prompt_file"],
                    trained_playbook_file_path=run.get("playbook_file", spec["playbook_file"]),
                    ignore_multiple_calls=True,
                    max_steps=spec["max_steps"],
                    logger_config={"verbose": False, "color": False},
                    appworld_config={"random_seed": 123},
                )
                scores.clear()
                agent.solve_tasks([run["task_id"]], experiment_name=f"reference-{index}")
                result = {**run, **scores[run["task_id"]], "steps": agent.step_number}
                out.write(json.dumps(result) + "\n")
                out.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
