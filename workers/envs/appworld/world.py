"""The AppWorld world: runs INSIDE AppWorld's own venv (appworld 0.1.3.post1, pydantic<2).

The benchmark side of `benchmark=appworld` (the contract is `isolated/server.py`'s):
stdlib + AppWorld's library only, started by path, never imported by distillery. The
agent's action is a Python code block; it runs in AppWorld's own stateful interpreter
(`AppWorld.execute`: its IPython shell with its safety guard and time limit), and an
episode is scored by AppWorld's own evaluator (`AppWorld.evaluate`: the task's
`evaluation.py` against the databases the code left). distillery never executes model
code itself.

Data: AppWorld reads ``$APPWORLD_ROOT/data`` (tasks/<id>/{specs.json, dbs,
ground_truth}, api_docs, datasets/<split>.txt); the adapter sets APPWORLD_ROOT to the
user's folder (`worker_environment`). Each episode's world points AppWorld at a private
root whose ``data`` is a link to that folder, so its experiment outputs (output
databases, logs) never land in the user's folder nor meet another episode's, and are
removed with the world.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import tempfile

EXECUTE = "execute"
EXPERIMENT = "distillery"
# What an execution after `complete_task` answers (the loop ends the episode at the
# step that completes the task, so only a later call of that same step meets it).
COMPLETED = (
    "The task is already complete (apis.supervisor.complete_task was called); "
    "nothing more is executed."
)
SPLITS = ("test_normal", "test_challenge", "dev", "train")

PROMPT = """I am your supervisor and you are a super intelligent AI Assistant whose job is \
to achieve my day-to-day tasks completely autonomously.

To do this, you interact with apps (e.g. spotify, venmo) through their APIs on my behalf, \
in a multi-step conversation with a Python REPL: you write Python code, the environment \
executes it and shows you its output, and based on that you write the code of the next \
step, until the task is done. The apps are available as `apis.<app_name>.<api_name>(...)`.

These three APIs tell you what is available:
print(apis.api_docs.show_app_descriptions())  # the apps
print(apis.api_docs.show_api_descriptions(app_name='supervisor'))  # the APIs of one app
print(apis.api_docs.show_api_doc(app_name='supervisor', api_name='show_account_passwords'))

My name is {first_name} {last_name}. My personal email is {email} and my phone number is \
{phone_number}. Your task is given in the next message.

Rules:
- Reply with your reasoning, then exactly one block of Python code in ```python ... ``` \
fences; it is executed and its printed output comes back to you. Only the first block of \
a reply runs; a reply without one runs no code.
- The state persists between steps: variables you define stay defined.
- Look up API documentation before using an API; do not guess parameters.
- Use the supervisor app (apis.supervisor) for my account passwords, addresses and \
payment cards.
- Make all decisions autonomously; never ask me anything.
- When the task is done, call apis.supervisor.complete_task(); if the task asks a \
question, pass the answer: apis.supervisor.complete_task(answer=<answer>). Only the \
answer itself, no full sentence.
- You have at most {max_steps} steps."""
NATIVE = (
    PROMPT.split("Rules:")[0]
    + "Rules: run code with the `execute` tool (its output comes back as the tool's "
    "result; the state persists between calls); reply without a tool call to end the "
    "episode; when the task is done, call apis.supervisor.complete_task(answer=...) "
    "(answer only for questions); make all decisions autonomously; you have at most "
    "{max_steps} steps."
)
EXECUTE_DOC = {
    "name": EXECUTE,
    "description": "Execute Python code in AppWorld's stateful REPL (`apis` is defined) "
    "and return what it prints.",
    "parameters": {
        "type": "dict",
        "properties": {"code": {"type": "string", "description": "Python code to run."}},
        "required": ["code"],
    },
}
TOOL = {
    "type": "function",
    "function": {**EXECUTE_DOC, "parameters": {**EXECUTE_DOC["parameters"], "type": "object"}},
}
MAX_STEPS = 40
_CANARY = re.compile(r"^# Canary String:.*$\n?", re.MULTILINE)


class CallFailed(Exception):
    """Protocol 2 (`isolated/server.py`): running the model's code broke AppWorld's own
    harness (its interpreter catches the program's errors and prints them; what
    escapes `AppWorld.execute` was still caused by that code): the call's failure, an
    observation, never an infrastructure error."""

    def __init__(self, message: str, results: list) -> None:
        super().__init__(message)
        self.results = results


def versions() -> dict:
    return {name: importlib.metadata.version(name) for name in ("appworld", "pydantic")}


def data_dir() -> str:
    """The user's AppWorld data folder, checked: a clear refusal says what to do."""
    root = os.environ.get("APPWORLD_ROOT", "")
    data = os.path.join(root, "data")
    if not root or not os.path.isdir(os.path.join(data, "tasks")):
        raise FileNotFoundError(
            f"no AppWorld data at {data!r} (APPWORLD_ROOT={root!r}): run `appworld "
            "download data --root <folder>` on a machine with internet and set "
            "benchmark.options.root to that folder"
        )
    return data


def _read_json(path: str) -> object:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _solution(task_dir: str) -> str | None:
    """AppWorld's ground-truth code (`def solution(apis, requester)`) and its call, or
    None where the data holds no solution (AppWorld's minimal ground truth)."""
    for name in ("compiled_solution.py", "solution.py"):
        path = os.path.join(task_dir, "ground_truth", name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                code = _CANARY.sub("", handle.read()).strip()
            if code:
                return code + "\n\nsolution(apis, requester)"
    return None


def _app_descriptions() -> str:
    """The apps a task may use, as the authors' prompt lists them (evaluation_react.py
    `initialize`: `world.task.app_descriptions`, AppWorld's `Task` keeping every app
    but admin, as JSON with indent 1). The same for every task."""
    from appworld.apps import APP_TO_DESCRIPTION, get_all_apps

    apps = get_all_apps(skip_admin=True)
    listed = [{"name": app, "description": APP_TO_DESCRIPTION[app]} for app in apps]
    return json.dumps(listed, indent=1)


def _required_apis(task_id: str) -> str:
    """`str(world.task.ground_truth.required_apis)` (a template variable of the authors'
    prompt, unused by their prompts); "" where the data holds no ground truth."""
    from appworld.ground_truth import GroundTruth

    try:
        return str(GroundTruth.load(task_id=task_id, mode="minimal").required_apis)
    except Exception:  # a split released without ground truth
        return ""


def list_tasks(options: dict) -> list[dict]:
    split = options.get("split", "test_normal")
    if split not in SPLITS:
        raise ValueError(f"unknown AppWorld split {split!r}; one of {', '.join(SPLITS)}")
    data = data_dir()
    split_file = os.path.join(data, "datasets", f"{split}.txt")
    if not os.path.isfile(split_file):
        raise FileNotFoundError(f"the AppWorld data at {data!r} has no split {split!r}")
    from appworld.task import load_task_ids, task_id_to_generator_id

    descriptions = _app_descriptions()
    out = []
    for task_id in load_task_ids(split):
        task_dir = os.path.join(data, "tasks", task_id)
        specs = _read_json(os.path.join(task_dir, "specs.json"))
        supervisor = specs.get("supervisor") or specs["main_user"]
        facts = {k: supervisor[k] for k in ("first_name", "last_name", "email", "phone_number")}
        metadata_path = os.path.join(task_dir, "ground_truth", "metadata.json")
        truth = _read_json(metadata_path) if os.path.isfile(metadata_path) else {}
        solution = _solution(task_dir)
        scenario = task_id_to_generator_id(task_id)
        out.append(
            {
                "task_id": task_id,
                "turns": [specs["instruction"]],
                "tools": [TOOL],
                "function_docs": [EXECUTE_DOC],
                "group_id": scenario,
                "metadata": {
                    "split": split,
                    "scenario_id": scenario,
                    "datetime": specs.get("datetime"),
                    "difficulty": truth.get("difficulty"),
                    "supervisor": facts,
                    "prompt_variables": {
                        "app_descriptions": descriptions,
                        "relevant_apis": _required_apis(task_id),
                    },
                },
                "system_prompts": {
                    "prompt": PROMPT.format(**facts, max_steps=MAX_STEPS),
                    "native": NATIVE.format(**facts, max_steps=MAX_STEPS),
                },
                "oracle": [[solution]] if solution is not None else [],
            }
        )
    return out


class World:
    """One episode: one `AppWorld` over a private root (see the module docstring)."""

    def __init__(self, options: dict, task_id: str) -> None:
        data = data_dir()
        self.root = tempfile.mkdtemp(prefix="distillery-appworld-")
        os.symlink(os.path.abspath(data), os.path.join(self.root, "data"))
        # AppWorld's path store re-reads the variable on every use: this process (one
        # world) now writes its outputs under the private root.
        os.environ["APPWORLD_ROOT"] = self.root
        try:
            from appworld import AppWorld

            # random_seed: ACE's and the AMD authors' 123 unless the options say
            # otherwise (adapter.py ACE_RANDOM_SEED; AppWorld's own default is 100).
            self.world = AppWorld(
                task_id=task_id,
                experiment_name=EXPERIMENT,
                random_seed=int(options.get("random_seed", 123)),
            )
            # ACE's agent re-seeds Python's random once the world is open
            # (base_agent.py `initialize`: set_random_seed(appworld_config's seed)).
            from appworld.common.random import set_random_seed

            set_random_seed(int(options.get("random_seed", 123)))
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)  # close() is never called then
            raise

    def step(self, calls: list[dict]) -> list[dict]:
        results = []
        for call in calls:
            code = call["kwargs"].get("code") if call["name"] == EXECUTE else None
            if not isinstance(code, str):
                error = f"{call['name']}(): not an execute(code=...) call"
                results.append({"content": f"Error: {error}", "error": error})
            elif self.world.task_completed():
                results.append({"content": COMPLETED, "error": "task already completed"})
            else:
                try:
                    output = self.world.execute(code)
                except BaseException as exc:  # noqa: BLE001 - the model's code did it
                    # (KeyboardInterrupt and SystemExit too: the worker has no terminal.)
                    raise CallFailed(
                        f"AppWorld could not run the code: {type(exc).__name__}: {exc}", results
                    ) from exc
                # AppWorld's own loop stops once the task is completed: so does ours.
                done = self.world.task_completed()
                results.append({"content": output, "error": None, "task_done": done})
        return results

    def end_turn(self) -> None:
        return None  # one user turn; AppWorld keeps no per-turn state

    def evaluate(self) -> dict:
        tracker = self.world.evaluate()
        details = {
            "num_tests": tracker.num_tests,
            "passes": tracker.pass_count,
            "failures": tracker.fail_count,
            "difficulty": tracker.difficulty,
            "task_completed": self.world.task_completed(),
        }
        if tracker.success:
            return {"success": True, "error_type": None, "error_message": None, "details": details}
        failed = "; ".join(f["requirement"] for f in tracker.failures)[:2000]
        message = f"{tracker.pass_count}/{tracker.num_tests} tests passed; failed: {failed}"
        return {
            "success": False,
            "error_type": "appworld:tests_failed",
            "error_message": message,
            "details": details,
        }

    def close(self) -> None:
        try:
            self.world.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
