"""bfcl-eval's own multi-turn pipeline, driven by a scripted student (no network).

`play_bfcl` runs a task as ``bfcl generate`` runs one, through its
`multi_threaded_inference` (which records an entry whose inference raised as
"Error during inference") and `OpenAICompletionsHandler.inference` (its real
`inference_multi_turn_FC` / `inference_multi_turn_prompting` loops, tool conversion,
decoders and result formatting), and scores the result with the eval runner's own
`_evaluate_single_multi_turn_entry` (decoding + `multi_turn_checker`), as
``bfcl evaluate`` would. Only the network is replaced: the handler's own openai client
talks to the scripted student through an httpx mock transport, so requests are what
the openai client puts on the wire and replies are read (and re-sent) exactly as the
openai client reads them, retries included.

`play_distillery` runs the same student through distillery's episode loop and its
real `ChatClient` (request encoding, retries, reply parsing), against the same kind of
mock transport, with the request parameters an `EpisodeRunner` would send. Both record
every request the student saw, so a test can compare them request by request.

Needs the test extras (tree_sitter, tenacity, overrides: see pyproject's `dev`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import itertools
import json
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import openai
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from distillery.testing.scripted_server import completion
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import LlmPolicy
from distillery.workers.envs.bfcl import BfclMultiTurnBase, BfclOptions
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.transport import (
    CappedTransport,
    httpx,  # openai's own HTTP package
)
from distillery.workers.llm.types import InfraError

Student = Callable[[dict[str, Any]], dict[str, Any]]
CATEGORY = "multi_turn_base"
# `bfcl generate`'s default temperature; the student's config sends the same.
TEMPERATURE = 0.001
# Fields that change nothing the model is shown: the model id, and `store`, which
# BFCL's handler sends as false (OpenAI's default for chat completions; vLLM ignores it).
UNCOMPARED = ("model", "store")
# What a student returns to answer with an HTTP error instead of a completion.
HTTP_STATUS = "http_status"
_NAMES = itertools.count()


@dataclass
class Verdict:
    valid: bool | None  # None: not scored (distillery: an infrastructure failure)
    error_type: str | None
    steps_per_turn: list[int]  # decoded (scored) steps per played turn
    requests: list[dict[str, Any]] = field(default_factory=list)  # what the student saw
    limits_fired: dict[str, int] = field(default_factory=dict)  # distillery's protections


def reply_completion(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    """The stub server's chat completion, with tool-call ids that depend only on the
    conversation (so both pipelines see the same ids) and raw-string arguments kept
    as they are (an invalid JSON string stays invalid)."""
    if "message" in reply:  # a message written whole by the script: sent as it is
        return completion(request, reply)
    raw = {}
    calls = []
    for index, call in enumerate(reply.get("tool_calls") or []):
        if isinstance(call["arguments"], str):
            raw[index] = call["arguments"]
            call = {**call, "arguments": {}}
        calls.append(call)
    body = completion(request, {**reply, "tool_calls": calls} if calls else reply)
    message = body["choices"][0]["message"]
    for index, call in enumerate(message.get("tool_calls") or []):
        call["id"] = f"call_{len(request['messages'])}_{index}"
        if index in raw:
            call["function"]["arguments"] = raw[index]
    return body


def _seen(request: dict[str, Any]) -> dict[str, Any]:
    """The request as the model is shown it: every field but `UNCOMPARED`."""
    return {k: v for k, v in request.items() if k not in UNCOMPARED}


def _answer(request: httpx.Request, student: Student, requests: list[dict[str, Any]]):
    body = json.loads(request.content)
    requests.append(_seen(body))
    reply = student(body)
    if HTTP_STATUS in reply:  # retried at once by either client (`retry-after-ms`)
        error = {"error": {"message": "scripted failure", "type": "server_error"}}
        return httpx.Response(reply[HTTP_STATUS], json=error, headers={"retry-after-ms": "1"})
    return httpx.Response(200, json=reply_completion(body, reply))


# ------------------------------------------------------------------------- BFCL side


def _without_registry(module: str) -> types.ModuleType:
    """A bfcl-eval module that imports its model registry, which imports every vendor
    SDK of the leaderboard; these modules only need the name, so an empty registry
    stands in while they are imported."""
    registry = "bfcl_eval.constants.model_config"
    if module not in sys.modules:
        fake = types.ModuleType(registry)
        fake.MODEL_CONFIG_MAPPING = {}
        previous = sys.modules.get(registry)
        sys.modules[registry] = fake
        try:
            __import__(module)
        finally:
            if previous is None:
                sys.modules.pop(registry, None)
            else:
                sys.modules[registry] = previous
    return sys.modules[module]


def _eval_runner() -> types.ModuleType:
    return _without_registry("bfcl_eval.eval_checker.eval_runner")


def _generation() -> types.ModuleType:
    """`bfcl generate`'s module (its `multi_threaded_inference`)."""
    return _without_registry("bfcl_eval._llm_response_generation")


def bfcl_entries() -> dict[str, dict[str, Any]]:
    """The test entries exactly as ``bfcl generate`` loads them (docs and hints added)."""
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = {e["id"]: e for e in load_dataset_entry(CATEGORY)}
    for truth in load_ground_truth_entry(CATEGORY):
        entries[truth["id"]]["ground_truth"] = truth["ground_truth"]
    return entries


def _handler(
    student: Student, native: bool, requests: list[dict[str, Any]], real_client: bool
) -> Any:
    from bfcl_eval.model_handler.api_inference.openai_completion import (
        OpenAICompletionsHandler,
    )
    from openai._models import construct_type
    from openai.types.chat import ChatCompletion

    class WireHandler(OpenAICompletionsHandler):
        """The handler with the openai client's two ends only, for speed: the request
        as the client encodes it (a message object re-sent as its fields as sent,
        `model_dump(exclude_unset=True)`), the reply read as the client reads it
        (`construct_type`, no validation). The client's typed request transform costs
        ~30 ms a request and changes nothing here; `real_client` runs it."""

        def generate_with_backoff(self, **kwargs: Any) -> tuple[ChatCompletion, float]:
            request = httpx.Request(
                "POST", "http://bfcl-reference.invalid", content=json.dumps(kwargs, default=_dump)
            )
            response = _answer(request, student, requests)
            if response.status_code != 200:
                raise AssertionError("an HTTP error needs real_client=True (its retries)")
            return construct_type(type_=ChatCompletion, value=response.json()), 0.0

    name = f"bfclref_{next(_NAMES)}"
    cls = OpenAICompletionsHandler if real_client else WireHandler

    def client(**_: Any) -> openai.OpenAI:
        # The handler's own client (its defaults: two retries), on the scripted network
        # (built here: a default client loads the system's certificates, ~80 ms).
        transport = httpx.MockTransport(lambda request: _answer(request, student, requests))
        return openai.OpenAI(
            api_key="unused",
            base_url="http://bfcl-reference.invalid/v1",
            http_client=httpx.Client(transport=transport),
        )

    with mock.patch(f"{OpenAICompletionsHandler.__module__}.OpenAI", client):
        return cls(
            model_name=name,
            temperature=TEMPERATURE,
            registry_name=f"{name}-FC" if native else name,
            is_fc_model=native,
        )


def _dump(value: Any) -> Any:
    return value.model_dump(exclude_unset=True, mode="json")


def _drop_globals(prefix: str) -> None:
    namespace = vars(multi_turn_utils)
    for name in [n for n in namespace if n.startswith(prefix)]:
        del namespace[name]


def play_bfcl(
    entry: dict[str, Any], student: Student, native: bool, real_client: bool = False
) -> Verdict:
    requests: list[dict[str, Any]] = []
    handler = _handler(student, native, requests, real_client)
    prefix = handler.model_name_underline_replaced
    try:
        # BFCL prints every step (and a failed entry's traceback, through tqdm).
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            written = _generation().multi_threaded_inference(
                handler, copy.deepcopy(entry), include_input_log=False, exclude_state_log=True
            )
            result = written["result"]
            scored = _eval_runner()._evaluate_single_multi_turn_entry(
                handler,
                entry["id"],
                result,
                entry["ground_truth"],
                copy.deepcopy(entry),
                f"{prefix}_score",
                CATEGORY,
            )
    finally:
        _drop_globals(prefix)
    steps = []
    for turn in result if isinstance(result, list) else []:
        count = 0
        for step in turn:
            try:
                decoded = handler.decode_execute(step, has_tool_call_tag=False)
            except Exception:
                continue
            count += not multi_turn_utils.is_empty_execute_response(decoded)
        steps.append(count)
    error = scored.get("error") or {}
    return Verdict(bool(scored["valid"]), error.get("error_type"), steps, requests)


# ------------------------------------------------------------------- distillery side


# A student served as the paper's students are (vLLM), sampling as the configs set it.
STUDENT_MODEL = ModelConfig(
    name="scripted",
    backend="vllm",
    model="scripted",
    temperature=TEMPERATURE,
    max_tokens=2048,
    seed=0,
    max_retries=2,  # as many attempts as the openai client's default gives BFCL
    retry_backoff_s=0.0,
)


class ScriptedBackend:
    """A `ChatBackend`: distillery's real `ChatClient` (encoding, retries, reply
    parsing) whose network is the scripted student."""

    def __init__(self, student: Student, model: ModelConfig = STUDENT_MODEL) -> None:
        self.requests: list[dict[str, Any]] = []
        transport = httpx.MockTransport(lambda request: _answer(request, student, self.requests))

        def capped(max_bytes: int) -> httpx.AsyncClient:
            # The client's own size cap, over the scripted network instead of sockets.
            return httpx.AsyncClient(transport=CappedTransport(transport, max_bytes))

        with mock.patch(f"{ChatClient.__module__}.capped_http_client", capped):
            self.client = ChatClient.from_config(model, "http://scripted.invalid/v1")

    async def chat(self, episode_id: str, messages: list[dict[str, Any]], **kwargs: Any):
        return await self.client.chat(messages, **kwargs)

    def end_episode(self, episode_id: str) -> None:
        return None


def play_distillery(
    bench: BfclMultiTurnBase,
    task_id: str,
    student: Student,
    native: bool,
    options: BfclOptions | None = None,
    model: ModelConfig = STUDENT_MODEL,
) -> Verdict:
    if options is not None:
        bench = BfclMultiTurnBase(settings=options)
    (task,) = bench.load_tasks(task_ids=[task_id])
    backend = ScriptedBackend(student, model)
    fmt = "native" if native else "prompt"
    conventions = conventions_of(bench)
    sent = conventions.sent_sampling(model)  # as an EpisodeRunner sends them
    policy = LlmPolicy(
        backend,
        "scripted",
        fmt,
        sent["temperature"],
        sent["max_tokens"],
        sent["seed"],
        sent["top_p"],
    )
    env = bench.make_env(task, f"agreement-{task_id}")
    try:
        loop = run_agent_loop(env, policy, bench.max_steps_per_turn, conventions=conventions)
        try:
            outcome = asyncio.run(loop)
        except InfraError as exc:  # retried and recorded by the runner, never scored
            return Verdict(None, f"infra_error: {exc}", [], backend.requests)
        finally:
            asyncio.run(backend.client.aclose())
        score = env.score()
        steps = [len([s for s in turn if s]) for turn in env._turns]
    finally:
        env.close()
    fired = dict(outcome.limits_fired + env.limits_fired)
    return Verdict(score.success, score.error_type, steps, backend.requests, fired)
