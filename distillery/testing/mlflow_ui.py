"""A sweep seen as a user sees it in MLflow: a real `mlflow server` on loopback over the
sweep's store, read through MLflow's own REST API and rendered in headless Chromium
(driven through its DevTools protocol: `Chromium`; Debian's `chromium` package).

The sweep is the AMD acceptance case (tests/orchestrator/test_amd_acceptance.py): an
oracle teacher's memory lets a student that knows no procedure of its own solve two of
four tasks it fails zero-shot, so the two evaluation runs disagree task by task.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.tracking.results import SweepResult
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.llm.servers import free_port

COMPARISON_TASKS = [f"multi_turn_base_{n}" for n in (120, 124, 127, 146)]


def comparison_sweep(
    root: Path, progress: bool = False, gate: str | os.PathLike[str] | None = None
) -> SweepResult:
    """Zero-shot and AMD (WF+ST+FN) of one scripted student on four BFCL tasks, into
    `root/runs` with MLflow in `root/mlflow.db` (see the module docstring). `gate`: the
    student's server holds every request until that file exists (a test looks at the
    sweep's runs while its first student stage is under way)."""
    script = "distillery.testing.bfcl_scripts:memory_procedure_text"
    with run_stub_server(script=script, gate=gate) as url:
        argv = rewrite_role_overrides(
            [
                f"output_dir={root / 'runs'}",
                f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
                "agent.retry_backoff_s=0",
                f"benchmark.task_ids=[{','.join(COMPARISON_TASKS)}]",
                "benchmark.limit=null",
                "methods=[zero_shot,amd_wf_st_fn]",
                "protocol=self_excluded",
                "memory.retrieval.threshold_st=0.2",
                "memory.retrieval.subtask_query=per_turn",
                "student=external",
                f"student.base_url={url}",
                "student.model=scripted",
                "student.action_format=prompt",
                "student.max_retries=1",
                "student.retry_backoff_s=0",
                # A held request waits for the test (runtime knob: no stage changes).
                "student.request_timeout_s=900",
                "tracking.progress_interval_s=1",
            ]
        )
        configs = [to_config(c) for _, c in sweep_points(argv, multirun=False)]
        return run_sweep(configs, progress=progress)


@contextlib.contextmanager
def mlflow_server(db: Path, artifacts: Path, log: Path | None = None) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 over a SQLite store; yields its base URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{db}",
        "--default-artifact-root",
        artifacts.resolve().as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    sink = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("mlflow server did not become healthy in 120 s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        if log:
            sink.close()  # type: ignore[union-attr]


def rest(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    response = httpx.request(method, f"{url}/api/{path}", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def evaluation_runs(url: str, experiment_id: str) -> list[dict[str, Any]]:
    """The experiment's GenAI evaluation runs (the UI's Evaluations view lists these)."""
    found = rest(
        url,
        "POST",
        "2.0/mlflow/runs/search",
        {
            "experiment_ids": [experiment_id],
            "filter": "tags.`mlflow.runType` = 'genai_evaluate'",
            "max_results": 100,
        },
    )
    return found.get("runs", [])


def run_traces(url: str, experiment_id: str, run_id: str) -> list[dict[str, Any]]:
    """Trace infos (with their assessments) of one run, all pages."""
    traces: list[dict[str, Any]] = []
    token = None
    while True:
        body: dict[str, Any] = {
            "locations": [
                {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment_id}}
            ],
            "filter": f"metadata.`mlflow.sourceRun` = '{run_id}'",
            "max_results": 100,
        }
        if token:
            body["page_token"] = token
        page = rest(url, "POST", "3.0/mlflow/traces/search", body)
        traces += page.get("traces", [])
        token = page.get("next_page_token")
        if not token:
            return traces


def verdicts(trace_infos: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """task id -> {assessment name: value} from trace infos as the REST API returns
    them (the task id is the trace's session)."""
    out: dict[str, dict[str, Any]] = {}
    for info in trace_infos:
        task = info["trace_metadata"]["mlflow.trace.session"]
        values: dict[str, Any] = {}
        for assessment in info.get("assessments", []):
            feedback = assessment.get("feedback", {})
            values[assessment["assessment_name"]] = feedback.get("value")
        out[task] = values
    return out


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """Headless Chromium on one page, driven through the DevTools protocol: `text`
    opens a URL and returns the page's text once it shows what is waited for (MLflow's
    UI is a single-page app that keeps polling its server, so "loaded" is when the data
    is on screen); `screenshot` saves a PNG of it."""

    def __init__(self, width: int = 1600, height: int = 1000) -> None:
        self.width, self.height = width, height
        self._process: subprocess.Popen[bytes] | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0

    def __enter__(self) -> Chromium:
        browser = find_chromium()
        if browser is None:
            raise RuntimeError("chromium is not installed: apt-get install chromium")
        self._profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self.port = free_port()
        self._process = subprocess.Popen(
            [
                browser,
                "--headless=new",
                "--no-sandbox",  # root in a container; the page is our own loopback server
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={self.width},{self.height}",
                f"--remote-debugging-port={self.port}",
                "--remote-allow-origins=*",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._profile is not None:
            self._profile.cleanup()

    def text(self, url: str, wait_for: Sequence[str], wait_s: float = 180.0) -> str:
        """The page's text once every string of `wait_for` is on it."""
        return asyncio.run(self._visit(url, list(wait_for), wait_s, screenshot=False))

    def screenshot(
        self, url: str, out: Path, wait_for: Sequence[str], wait_s: float = 180.0
    ) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(asyncio.run(self._visit(url, list(wait_for), wait_s, screenshot=True)))

    async def _visit(self, url: str, wait_for: list[str], wait_s: float, screenshot: bool) -> Any:
        import aiohttp  # a Ray dependency

        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with http.get(f"http://127.0.0.1:{self.port}/json/list") as reply:
                        pages = [t for t in await reply.json() if t["type"] == "page"]
                    if pages:
                        break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("chromium's DevTools endpoint did not come up")
                await asyncio.sleep(0.5)
            async with http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                ids = iter(range(1, 1_000_000))

                async def call(method: str, **params: object) -> dict:
                    number = next(ids)
                    await ws.send_json({"id": number, "method": method, "params": params})
                    while True:
                        message = await ws.receive_json()
                        if message.get("id") == number:
                            if "error" in message:
                                raise RuntimeError(f"{method}: {message['error']}")
                            return message.get("result", {})

                await call(
                    "Emulation.setDeviceMetricsOverride",
                    width=self.width,
                    height=self.height,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                # A fresh load each time: the UI is a single-page app that keeps what it
                # fetched, and the same URL again would show the same (stale) data.
                await call("Page.navigate", url="about:blank")
                await call("Page.navigate", url=url)
                deadline = time.monotonic() + wait_s
                probe = (
                    "document.body ? ["
                    + ",".join(
                        f"document.body.innerText.includes({json.dumps(w)})" for w in wait_for
                    )
                    + "].every(Boolean) && document.body.innerText : ''"
                )
                while True:
                    found = await call("Runtime.evaluate", expression=probe, returnByValue=True)
                    text = found.get("result", {}).get("value")
                    if isinstance(text, str) and text:
                        break
                    if time.monotonic() > deadline:
                        seen = await call(
                            "Runtime.evaluate",
                            expression="document.body ? document.body.innerText : ''",
                            returnByValue=True,
                        )
                        shown = str(seen.get("result", {}).get("value", ""))[:1500]
                        raise TimeoutError(
                            f"{wait_for!r} not all on {url} after {wait_s:.0f} s; it shows: {shown}"
                        )
                    await asyncio.sleep(1.0)
                if not screenshot:
                    return text
                # MLflow 3 opens its Assistant side panel on first visit; close it so the
                # page gets the width.
                await call("Runtime.evaluate", expression=_CLOSE_ASSISTANT)
                await asyncio.sleep(6.0)  # let the last requests land and the layout settle
                shot = await call("Page.captureScreenshot", format="png")
                return base64.b64decode(shot["data"])


_CLOSE_ASSISTANT = """
for (const b of document.querySelectorAll('button')) {
  const r = b.getBoundingClientRect();
  const label = (b.getAttribute('aria-label') || '') + ' ' + (b.title || '');
  if (/close/i.test(label) && r.left > window.innerWidth * 0.6 && r.top < 80) { b.click(); }
}
"""
