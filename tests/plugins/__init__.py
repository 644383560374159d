"""A benchmark (and its configs) and a memory method of another package, registered
only through entry points: `toy_plugin/` is a package as a third party would write
it, outside distillery's source tree and never installed; `install_toy_plugin` makes
it visible the way pip would, by writing its distribution's metadata (`*.dist-info`
with `entry_points.txt`) into a folder on sys.path."""

from __future__ import annotations

from pathlib import Path

# The folder that holds the `toy_plugin` package (a sys.path entry).
PLUGIN_ROOT = Path(__file__).resolve().parent

# group -> {entry name: value}. A test adds a group by passing its own copy with more
# entries.
ENTRY_POINTS: dict[str, dict[str, str]] = {
    "distillery.benchmarks": {"toy": "toy_plugin.bench:ToyBenchmark"},
    "distillery.conf": {"toy_plugin": "toy_plugin.conf"},
    "distillery.memory_methods": {
        "toy_recall": "toy_plugin.memory:ToyRecall",
        "toy_hint": "toy_plugin.hints:HintMethod",
    },
    "distillery.stage_kinds": {"toy_retry": "toy_plugin.hints:RetryStage"},
}


def install_toy_plugin(
    site: Path, entry_points: dict[str, dict[str, str]] | None = None
) -> list[str]:
    """Write the `toy-plugin` distribution's metadata into `site` and return the
    sys.path entries that make it importable and discoverable (`site` first), for
    sys.path in-process and PYTHONPATH in a subprocess."""
    groups = ENTRY_POINTS if entry_points is None else entry_points
    info = site / "toy_plugin-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    text = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()) + "\n"
        for group, entries in groups.items()
    )
    (info / "entry_points.txt").write_text(text)
    return [str(site), str(PLUGIN_ROOT)]
