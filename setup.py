"""Package layout; everything else about the distribution is in pyproject.toml.

The design card puts orchestrator/, workers/ and conf/ at the top of the repository;
they install as distillery.orchestrator, distillery.workers and distillery.conf, so
installing distillery claims no generic top-level module names (`import orchestrator`
stays free for everyone else).
"""

from setuptools import find_packages, setup

TOP_LEVEL_FOLDERS = {
    "distillery.orchestrator": "orchestrator",
    "distillery.workers": "workers",
    "distillery.conf": "conf",
}

packages = find_packages(include=["distillery", "distillery.*"])
package_dir = {"distillery": "distillery"}
for package, folder in TOP_LEVEL_FOLDERS.items():
    package_dir[package] = folder
    packages += [package, *(f"{package}.{sub}" for sub in find_packages(folder))]

setup(packages=packages, package_dir=package_dir)
