"""Provenance recorded on every sweep: package versions come from the benchmark's own list."""

from importlib.metadata import version

from distillery.orchestrator.tracking.results import package_versions


def test_package_versions_include_the_benchmarks_own_packages() -> None:
    versions = package_versions(["bfcl_multi_turn_base"])
    assert versions["version.bfcl-eval"] == version("bfcl-eval")
    assert versions["version.ray"] == version("ray")
    # No benchmark, no benchmark packages: nothing BFCL-specific is hard-coded.
    assert "version.bfcl-eval" not in package_versions([])
