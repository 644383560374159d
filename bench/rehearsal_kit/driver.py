"""Runs the distillery CLI in this process and, at its exit, writes the process's own
resource usage (resource.getrusage: peak RSS, user + system CPU) to a JSON file, so the
rehearsal measures the driver alone (not the Ray workers or servers it starts).

    python bench/rehearsal_kit/driver.py USAGE.json experiment=... [overrides]
"""

from __future__ import annotations

import atexit
import json
import resource
import runpy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    usage_path = Path(sys.argv[1])
    sys.argv = ["distillery", *sys.argv[2:]]
    started = time.monotonic()

    def write_usage() -> None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        usage_path.write_text(
            json.dumps(
                {
                    "max_rss_mb": own.ru_maxrss / 1024,  # Linux: kilobytes
                    "cpu_s": own.ru_utime + own.ru_stime,
                    "wall_s": time.monotonic() - started,
                }
            )
        )

    atexit.register(write_usage)
    runpy.run_module("distillery.orchestrator.cli.app", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
