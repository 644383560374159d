import sys
from pathlib import Path

import pytest

from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.servers import (
    ServerProcess,
    find_smollm2_gguf,
    free_port,
    llama_cpp_command,
    server_process_for,
    vllm_command,
)


def test_vllm_launch_line():
    cfg = ModelConfig(
        name="q",
        backend="vllm",
        model="Qwen/Qwen3-4B",
        gpus_per_server=2,
        tensor_parallel_size=2,
        tool_call_parser="hermes",
        max_model_len=32768,
        extra_args=("--dtype", "bfloat16"),
    )
    cmd = vllm_command(cfg, "127.0.0.1", 8000)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen3-4B"]
    joined = " ".join(cmd)
    assert "--tensor-parallel-size 2" in joined
    assert "--enable-prefix-caching" in cmd
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in joined
    assert "--max-model-len 32768" in joined
    assert "--served-model-name Qwen/Qwen3-4B" in joined
    assert cmd[-2:] == ["--dtype", "bfloat16"]
    no_cache = vllm_command(
        cfg.model_copy(update={"enable_prefix_caching": False, "tool_call_parser": None}), "h", 1
    )
    assert "--no-enable-prefix-caching" in no_cache and "--tool-call-parser" not in no_cache


def test_llama_cpp_launch_line():
    cfg = ModelConfig(name="s", backend="llama_cpp", model="smol", n_ctx=4096, n_threads=2)
    cmd = llama_cpp_command(cfg, "/m.gguf", "127.0.0.1", 8001)
    assert cmd[:3] == [sys.executable, "-m", "distillery.workers.llm.llama_server"]
    joined = " ".join(cmd)
    assert "--action_format native" in joined and "--chat_template_file" not in joined
    assert "--model /m.gguf" in joined and "--model_alias smol" in joined
    assert "--interrupt_requests False" in joined and "--logits_all False" in joined
    assert "--n_ctx 4096" in joined and "--host 127.0.0.1" in joined
    templated = cfg.model_copy(update={"chat_template_file": "t.jinja", "action_format": "prompt"})
    joined = " ".join(llama_cpp_command(templated, "/m.gguf", "127.0.0.1", 8001))
    assert "--action_format prompt" in joined
    assert f"--chat_template_file {Path('t.jinja').resolve()}" in joined


def test_server_process_health_checks_and_stops(tmp_path):
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "distillery.testing.scripted_server",
        "--script",
        "distillery.testing.scripts:always_text",
        "--port",
        str(port),
    ]
    server = ServerProcess(command, f"http://127.0.0.1:{port}/v1", tmp_path / "s.log", 30)
    assert server.start() == f"http://127.0.0.1:{port}/v1"
    assert server.healthy()
    server.stop()
    assert not server.healthy()


_ACTOR_BODY = """
import sys, time
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.servers import LlmServerImpl
command = [sys.executable, "-m", "distillery.testing.scripted_server", "--script",
           "distillery.testing.scripts:always_text", "--port", "{port}"]
cfg = ModelConfig(name="s", backend="command", model="stub", command=command,
                  startup_timeout_s=60)
actor = LlmServerImpl(cfg, sys.argv[1])
actor.start()
print(actor.server_pid(), flush=True)
time.sleep(600)
"""


def test_a_server_actor_stopped_by_sigterm_stops_its_server_without_a_traceback(tmp_path):
    """Ray ends a worker with SIGTERM; its default handler raises SystemExit wherever
    the main thread is, and inside a garbage-collection callback that printed a
    traceback on the user's console after the one-line start-up error."""
    import os
    import signal
    import subprocess

    body = subprocess.Popen(
        [sys.executable, "-c", _ACTOR_BODY, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert body.stdout is not None
        server_pid = int(body.stdout.readline())
        body.send_signal(signal.SIGTERM)
        _, err = body.communicate(timeout=60)
    finally:
        body.kill()
    assert body.returncode == 0, err
    assert "Traceback" not in err, err
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)


def test_a_server_that_dies_at_start_reports_its_log(tmp_path):
    command = [sys.executable, "-c", "import sys; print('no such model'); sys.exit(3)"]
    server = ServerProcess(command, "http://127.0.0.1:9/v1", tmp_path / "s.log", 30)
    with pytest.raises(RuntimeError, match="no such model"):
        server.start()


def test_a_server_that_prints_its_key_has_it_redacted_in_its_log_and_error(tmp_path):
    """vLLM logs every non-default argument, an --api-key too: the log is written
    through the redaction, and so is the start-up error quoting the launch line."""
    from distillery import redaction

    key = "sk-server-arg-canary-42"
    command = [
        sys.executable,
        "-c",
        "import sys; print('args:', sys.argv[1:]); sys.exit(3)",
        "--api-key",
        key,
    ]
    server = ServerProcess(command, "http://127.0.0.1:9/v1", tmp_path / "s.log", 30)
    try:
        with pytest.raises(RuntimeError) as caught:
            server.start()
    finally:
        redaction.clear_secrets()
    assert "args: ['--api-key', '<redacted>']" in str(caught.value)
    assert key not in str(caught.value)
    assert key not in (tmp_path / "s.log").read_text()
    assert "<redacted>" in (tmp_path / "s.log").read_text()


def test_bundled_gguf_is_found_without_importing_llm():
    path = find_smollm2_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000
    assert "llm" not in sys.modules


def _llama_available() -> bool:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.llama
@pytest.mark.skipif(not _llama_available(), reason="llama-cpp-python[server] not installed")
def test_real_smollm2_through_llama_cpp(tmp_path):
    import asyncio

    from distillery.workers.llm.client import ChatClient

    # Nothing here may depend on the machine's speed: the limits only catch a hang.
    cfg = ModelConfig(
        name="smol", backend="llama_cpp", model="smol", n_ctx=2048, max_tokens=16,
        action_format="prompt", startup_timeout_s=3600, request_timeout_s=3600,
    )  # fmt: skip
    server = server_process_for(cfg, tmp_path)
    url = server.start()
    try:
        client = ChatClient.from_config(cfg, url)
        result = asyncio.run(client.chat([{"role": "user", "content": "Say hi."}], max_tokens=8))
    finally:
        server.stop()
    assert result.text.strip()  # greedy: the same few words every time
    assert result.usage.prompt_tokens > 0 and 0 < result.usage.completion_tokens <= 8


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "cd",
            "description": "Change the current directory.",
            "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}},
        },
    }
]


@pytest.mark.llama
@pytest.mark.slow
@pytest.mark.skipif(not _llama_available(), reason="llama-cpp-python[server] not installed")
def test_real_smollm2_serves_native_tool_calling_conversations(tmp_path):
    """The bundled model behind a Hermes template (its own has no tool-call syntax):
    tools offered, then the second step of a tool-calling episode, whose history holds
    an assistant message with null content and a tool message, both served. Whether a
    135M model calls a tool is its own business; the replies' parsing is tested with
    scripted text (test_llama_server)."""
    import asyncio

    from distillery.workers.llm.client import ChatClient

    template = Path(__file__).parent / "chat_templates" / "hermes.jinja"
    cfg = ModelConfig(
        name="smol", backend="llama_cpp", model="smol", n_ctx=2048, max_tokens=8,
        action_format="native", chat_template_file=str(template),
        startup_timeout_s=3600, request_timeout_s=3600, max_retries=0,
    )  # fmt: skip
    first = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "cd docs"},
    ]
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "cd", "arguments": '{"folder": "docs"}'},
    }
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Now in docs."},
    ]

    async def both(client):
        return await client.chat(first, tools=TOOLS, max_tokens=8), await client.chat(
            second, tools=TOOLS, max_tokens=8
        )

    server = server_process_for(cfg, tmp_path)
    url = server.start()
    try:
        opened, answered = asyncio.run(both(ChatClient.from_config(cfg, url)))
    finally:
        server.stop()
    for result in (opened, answered):
        assert result.attempts == 1 and 0 < result.usage.completion_tokens <= 8
    assert answered.usage.prompt_tokens > opened.usage.prompt_tokens  # the history was rendered
    assert "tool-call syntax hermes" in server.log_path.read_text()


@pytest.mark.llama
@pytest.mark.slow
@pytest.mark.skipif(not _llama_available(), reason="llama-cpp-python[server] not installed")
def test_llama_cpp_replicas_as_ray_actors(tmp_path):
    import httpx
    import ray

    from distillery.workers.llm.pool import start_pool

    cfg = ModelConfig(
        name="smol", backend="llama_cpp", model="smol", n_ctx=1024, replicas=2,
        action_format="prompt", startup_timeout_s=3600,
    )  # fmt: skip
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        pool = start_pool(cfg, tmp_path)
        try:
            assert len(set(pool.endpoints)) == 2
            for url in pool.endpoints:
                assert httpx.get(f"{url}/models", timeout=60).status_code == 200
        finally:
            pool.shutdown()
        for url in pool.endpoints:
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"{url}/models", timeout=2)
    finally:
        ray.shutdown()
