"""Render MLflow's task-by-task comparison of zero-shot and AMD in headless Chromium.

    python bench/mlflow_compare.py [--workdir DIR] [--out docs/mlflow_compare.png]

Runs the comparison sweep of tests/support/mlflow_ui.py (an oracle teacher's memory
lets a scripted student solve two of four BFCL tasks it fails zero-shot; ~5 min on 2
cores, reused from the ledger when DIR already holds it), starts `mlflow server` on
loopback over its store and screenshots the experiment's Evaluations view with the AMD
run selected and compared to zero-shot: one row per task, each run's verdict
(success, error type, steps, tokens) side by side. Needs Debian's `chromium` package
(apt-get install chromium). Also writes the runs table view next to it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.mlflow_ui import comparison_sweep, mlflow_server  # noqa: E402


def screenshot(url: str, out: Path, width: int, height: int, wait_ms: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                "--headless=new",
                "--no-sandbox",  # root in a container; the page is our own loopback server
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--virtual-time-budget={wait_ms}",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=None, help="where the sweep and its store live")
    parser.add_argument("--out", default="docs/mlflow_compare.png")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--wait-ms", type=int, default=25_000, help="page render budget")
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
        screenshot(compare_url, out, args.width, args.height, args.wait_ms)
        print(f"wrote {out} from {compare_url}")
        runs_png = out.with_name(out.stem + "_runs.png")
        screenshot(f"{url}/#/experiments/{experiment}/runs", runs_png, args.width, 600, 15_000)
        print(f"wrote {runs_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
