"""`toolsandbox`: ToolSandbox's scenarios, played in ToolSandbox's own execution
context behind the process boundary and scored by its milestone/minefield evaluation.

ToolSandbox is on no package index and pins an old openai, langchain and transformers,
so it lives in a venv of its own built from a checkout the user names with
``TOOLSANDBOX_CHECKOUT`` (default: ``../shared/vendor/ToolSandbox`` next to the repo)::

    TOOLSANDBOX_CHECKOUT=/path/to/ToolSandbox \\
        python -m distillery.workers.envs.isolated install toolsandbox

The install copies the checkout first: pip builds a source tree in place and would
write its egg-info into the user's checkout. The venv's name hashes the checkout's
path; its content enters the fingerprint, so an edited checkout is another benchmark.

The user is ToolSandbox's own simulated user (its OpenAI user role, in the world) with
the model and endpoint of the options (`user_model`, `user_base_url`,
`user_api_key_env`) instead of the GPT-4o at api.openai.com it hard-codes: the loop plays
the scenario's opening message and then whatever that user answers to each of the
agent's closing replies (`user_turns="environment"`), until it ends the conversation or
the scenario's message limit ends it (`world_ends_episode`). The model name enters
episode identity; the endpoint and the key's variable do not (where the same model is
served is operational). An unreachable or refusing user endpoint is an infrastructure
error of the episode, never the agent's failure. `scripted_user` replaces it with fixed
turns (tests, replays): a deviation, recorded as one.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from distillery.workers.envs.conventions import AgentConventions, named_tool_messages
from distillery.workers.envs.isolated.adapter import IsolatedBenchmark, IsolatedOptions
from distillery.workers.envs.isolated.venv import EnvSpec, check

CHECKOUT_VARIABLE = "TOOLSANDBOX_CHECKOUT"
# The repository's parent holds shared/vendor in this project's layout (and CI's).
DEFAULT_CHECKOUT = Path(__file__).resolve().parents[3] / ".." / "shared" / "vendor" / "ToolSandbox"
WORLD = Path(__file__).resolve().parent / "world.py"
# ToolSandbox's CLI default user (`GPT_4_o_2024_05_13_User`).
USER_MODEL = "gpt-4o-2024-05-13"
# Where the user's model is served, not what it is: kept out of episode identity.
USER_ENDPOINT = frozenset({"user_base_url", "user_api_key_env"})

# Run by the venv's interpreter after pip has installed the checkout's pins: install a
# copy of the checkout (argv[1]) itself.
_INSTALL_COPY = (
    "import shutil, subprocess, sys, tempfile, pathlib\n"
    "with tempfile.TemporaryDirectory() as tmp:\n"
    "    copy = pathlib.Path(tmp) / 'ToolSandbox'\n"
    "    shutil.copytree(sys.argv[1], copy, ignore=shutil.ignore_patterns("
    "'.git', 'build', '*.egg-info', 'data', '__pycache__'))\n"
    "    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', "
    "'--disable-pip-version-check', str(copy)], check=True)\n"
)


def checkout() -> Path:
    """The ToolSandbox checkout the venv is built from."""
    chosen = os.environ.get(CHECKOUT_VARIABLE)
    return (Path(chosen) if chosen else DEFAULT_CHECKOUT).resolve()


def checkout_digest(path: Path) -> str:
    """A hash of the checkout's package sources and its pins."""
    digest = hashlib.sha256()
    files = [path / "pyproject.toml", *sorted((path / "tool_sandbox").rglob("*.py"))]
    for file in files:
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def pins(path: Path) -> tuple[str, ...]:
    """The checkout's own dependency pins (its pyproject), none when it is absent."""
    try:
        project = tomllib.loads((path / "pyproject.toml").read_text())
    except OSError:
        return ()
    return tuple(project["project"]["dependencies"])


def env_spec(path: Path | None = None) -> EnvSpec:
    source = path or checkout()
    # The pins are the requirements (so they enter the venv's digest and `versions`);
    # the package itself comes from the copy installed after them, without deps.
    return EnvSpec(
        "toolsandbox",
        requirements=pins(source),
        python="3.11",
        post_install=(("-c", _INSTALL_COPY, str(source)),),
    )


class ToolSandboxOptions(IsolatedOptions):
    """`benchmark.options` of `toolsandbox`."""

    variant: Literal[
        "base",
        "3_distraction_tools",
        "10_distraction_tools",
        "all_tools",
        "tool_description_scrambled",
        "arg_type_scrambled",
        "arg_description_scrambled",
        "tool_name_scrambled",
    ] = Field(
        default="base",
        description="Which scenarios: the base ones (no distraction tools, the default) "
        "or one of ToolSandbox's augmentations of them.",
    )
    network: bool = Field(
        default=True,
        description="Include the scenarios whose tools call RapidAPI over the network, "
        "as ToolSandbox and the AMD paper run them (all 129 base scenarios; RAPID_API_KEY "
        "must be set, checked before a run starts). False excludes them and counts them: "
        "the deviation network_scenarios_excluded, recorded.",
    )
    user_model: str = Field(
        default=USER_MODEL,
        description="The simulated user's model (ToolSandbox's own user role, decoding "
        "as ToolSandbox sends it: the server's defaults).",
    )
    user_base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint of the user's model (None: OpenAI's)."
    )
    user_api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Name of the environment variable holding the user endpoint's key "
        "(unset with a user_base_url: no key).",
    )
    scripted_user: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Scripted user instead of the simulated one (a deviation: tests, "
        "replays): by scenario name, the turns said after each closing reply of the "
        "agent; then the user ends the conversation (unlisted scenarios: at once).",
    )

    def identity(self) -> dict[str, Any]:
        return {k: v for k, v in super().identity().items() if k not in USER_ENDPOINT}

    def deviations(self) -> tuple[str, ...]:
        # Not declared deviations (the scripted user is no bool; network is on by
        # default), recorded as ones all the same.
        found = super().deviations()
        if not self.network:
            found = (*found, "network_scenarios_excluded")
        return (*found, "scripted_user") if self.scripted_user else found

    def required_environment(self) -> dict[str, str]:
        needed = {}
        if self.network:
            needed["RAPID_API_KEY"] = (
                "ToolSandbox's scenarios with RapidAPI tools call it (network=true, the "
                "paper's 129 base scenarios): export your RapidAPI key, or run without them "
                "with +benchmark.options.network=false (recorded as the deviation "
                "network_scenarios_excluded)"
            )
        if not self.scripted_user and self.user_base_url is None:
            needed[self.user_api_key_env] = (
                f"ToolSandbox's simulated user ({self.user_model}) calls OpenAI's API: "
                "export the key, or serve the user's model elsewhere "
                "(+benchmark.options.user_base_url=...)"
            )
        return needed


class ToolSandbox(IsolatedBenchmark):
    name = "toolsandbox"
    # world.py's sha256 when the code lock came (every key as it was); pinned by it since.
    world_version = "c72b5e01607a13b140efa7fe426edcda8c7a2832a9488d7204e7a22dfe29c20d"
    # ToolSandbox limits a scenario, not a turn: `max_messages` (30 in every scenario)
    # new messages, which a turn of executed calls (two messages each) reaches within 15
    # steps; the world ends the episode there. This bounds only replies whose calls
    # never reach ToolSandbox's context (undecodable, or refused before it).
    max_steps_per_turn = 15
    groups_are_scenarios = False
    options_model = ToolSandboxOptions
    settings: ToolSandboxOptions  # an instance of options_model (the base builds it)
    env_spec = env_spec()
    world = WORLD
    # As ToolSandbox's runner sends the history back (its `to_openai_messages`): a
    # tool-call reply's text "" and each result naming its function (the agreement test,
    # tests/workers/envs/toolsandbox/test_agreement.py, compares every request).
    conventions = AgentConventions(
        user_turns="environment",
        world_ends_episode=True,
        native_results=named_tool_messages,
        tool_call_text="",
    )
    # ToolSandbox would execute a call of an unknown tool (or with positional arguments)
    # and record its error as two messages of the scenario; the world refuses it before
    # ToolSandbox's console (the code it would run is built from the model's names), so
    # such calls do not count towards `max_messages` nor the turn count.
    known_deviations = ("invalid_calls_refused_before_the_context",)

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        path = checkout()
        source = checkout_digest(path) if path.is_dir() else "absent"
        # How the history goes back to the model (ToolSandbox's runner's way: a
        # tool-call reply's text, results naming their function) changes what it sees.
        conv = cls.conventions
        results = getattr(conv.native_results, "__name__", "?")
        history = f"history:text={conv.tool_call_text!r},results={results}"
        return (*super().fingerprint(), f"toolsandbox:{source}", history)

    @classmethod
    def versions(cls) -> dict[str, str]:
        """The pins as installed (see the base) and the ToolSandbox package itself."""
        found = super().versions()
        if found:
            package = check(cls.env_spec).distributions.get("tool_sandbox")
            found["tool_sandbox"] = package or "absent"
        return found

    def worker_environment(self) -> dict[str, str]:
        # The RapidAPI tools and the user's client read their keys from the environment
        # (the keys never travel in options, identity or logs).
        settings = self.settings
        found = {}
        key = os.environ.get("RAPID_API_KEY")
        if key and settings.network:
            found["RAPID_API_KEY"] = key
        user_key = os.environ.get(settings.user_api_key_env)
        if user_key and not settings.scripted_user:
            found[settings.user_api_key_env] = user_key
        return found

    def needs_network(self) -> bool:
        # The simulated user's model is served over HTTP; the RapidAPI tools call out.
        # A scripted user with the RapidAPI scenarios excluded talks to nothing.
        return self.settings.network or not self.settings.scripted_user

    def excluded_network_scenarios(self) -> int:
        """How many scenarios of the chosen variant were left out for needing RapidAPI."""
        tasks = self.load_tasks(limit=1)
        return int(tasks[0].metadata.get("excluded_network_scenarios", 0)) if tasks else 0
