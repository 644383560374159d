"""Render MLflow's task-by-task comparison of zero-shot and AMD in headless Chromium.

    python bench/mlflow_compare.py [--workdir DIR] [--out docs/mlflow_compare.png]

Runs the comparison sweep of distillery/testing/mlflow_ui.py (an oracle teacher's memory
lets a scripted student solve two of four BFCL tasks it fails zero-shot; ~5 min on 2
cores, reused from the ledger when DIR already holds it), starts `mlflow server` on
loopback over its store and screenshots the experiment's Evaluations view with the AMD
run selected and compared to zero-shot: one row per task, each run's verdict
(success, error type, steps, tokens) side by side. Needs Debian's `chromium` package
(apt-get install chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distillery.testing.mlflow_ui import comparison_sweep, mlflow_server  # noqa: E402
from distillery.workers.llm.servers import free_port  # noqa: E402

_CLOSE_ASSISTANT = """
for (const b of document.querySelectorAll('button')) {
  const r = b.getBoundingClientRect();
  const label = (b.getAttribute('aria-label') || '') + ' ' + (b.title || '');
  if (/close/i.test(label) && r.left > window.innerWidth * 0.6 && r.top < 80) { b.click(); }
}
"""


def screenshot(url: str, out: Path, width: int, height: int, wait_for: str, wait_s: float) -> None:
    """Open `url` in headless Chromium and save a PNG once the page shows `wait_for`
    (MLflow's UI is a single-page app that keeps polling its server, so "loaded" is
    when the data is on screen), through the DevTools protocol."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [
                browser,
                "--headless=new",
                "--no-sandbox",  # root in a container; the page is our own loopback server
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--remote-debugging-port={port}",
                "--remote-allow-origins=*",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            png = asyncio.run(_capture(port, url, width, height, wait_for, wait_s))
        finally:
            process.terminate()
            process.wait(timeout=30)
    out.write_bytes(png)


async def _capture(
    port: int, url: str, width: int, height: int, wait_for: str, wait_s: float
) -> bytes:
    import aiohttp  # a Ray dependency

    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 60
        while True:
            try:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as reply:
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
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            await call("Page.navigate", url=url)
            deadline = time.monotonic() + wait_s
            probe = f"document.body && document.body.innerText.includes({json.dumps(wait_for)})"
            while True:
                found = await call("Runtime.evaluate", expression=probe, returnByValue=True)
                if found.get("result", {}).get("value") is True:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{wait_for!r} not on the page after {wait_s:.0f} s")
                await asyncio.sleep(1.0)
            # MLflow 3 opens its Assistant side panel on first visit; close it so the
            # comparison gets the width.
            await call("Runtime.evaluate", expression=_CLOSE_ASSISTANT)
            await asyncio.sleep(6.0)  # let the last requests land and the layout settle
            shot = await call("Page.captureScreenshot", format="png")
            return base64.b64decode(shot["data"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="where the sweep and its store live")
    parser.add_argument("--out", default="docs/mlflow_compare.png")
    parser.add_argument("--width", type=int, default=1800)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--wait-s", type=float, default=180.0, help="page render limit")
    args = parser.parse_args()

    root = Path(args.workdir or tempfile.mkdtemp(prefix="distillery-ui-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = comparison_sweep(root, progress=True)
    print(f"sweep ready in {time.perf_counter() - started:.0f} s under {root}")
    point = result.points[0]
    zero_shot, amd = point.method("zero_shot"), point.method("amd_wf_st_fn")
    meta = json.loads((root / "runs" / "sweeps" / result.sweep_id / "sweep.json").read_text())
    experiment = meta["mlflow_experiment_id"]
    out = Path(args.out)
    with mlflow_server(root / "mlflow.db", root / "mlartifacts", root / "mlflow_server.log") as url:
        compare_url = (
            f"{url}/#/experiments/{experiment}/evaluation-runs"
            f"?selectedRunUuid={amd.mlflow_run_id}&compareToRunUuid={zero_shot.mlflow_run_id}"
        )
        screenshot(compare_url, out, args.width, args.height, "multi_turn_base_124", args.wait_s)
        print(f"wrote {out} from {compare_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
