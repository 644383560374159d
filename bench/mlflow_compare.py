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
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distillery.testing.mlflow_ui import (  # noqa: E402
    Chromium,
    comparison_sweep,
    find_chromium,
    mlflow_server,
)


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
        if find_chromium() is None:
            raise SystemExit("chromium is not installed: apt-get install chromium")
        with Chromium(args.width, args.height) as browser:
            browser.screenshot(compare_url, out, ["multi_turn_base_124"], args.wait_s)
        print(f"wrote {out} from {compare_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
