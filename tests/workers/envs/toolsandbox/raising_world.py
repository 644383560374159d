"""Run by the ToolSandbox venv's interpreter (test_call_failures.py): the real world
module behind the real server's request handling, with ToolSandbox's execution
environment raising while it executes the agent's call. Prints the step's and the
evaluation's answers as JSON."""

import importlib.util
import json
import sys


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


server = _load("raising_server", sys.argv[1])
world = _load("raising_world", sys.argv[2])
name = sys.argv[3]

from tool_sandbox.roles.execution_environment import ExecutionEnvironment  # noqa: E402

handler = server._Server(world)
handler.handle("reset", {"options": {"scripted_user": {name: []}}, "task_id": name})


def raising(self, *args, **kwargs):
    raise RecursionError("maximum recursion depth exceeded while copying the context")


ExecutionEnvironment.respond = raising
call = {
    "name": "add_contact",
    "args": [],
    "kwargs": {"name": "Ada", "phone_number": "+12345678"},
    "call_id": "c1",
    "source": "add_contact(name='Ada', phone_number='+12345678')",
}
step = handler.handle("step", {"calls": [call]})
print(json.dumps({"step": step, "evaluate": handler.handle("evaluate", {})}))
