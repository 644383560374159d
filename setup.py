"""Package layout; everything else about the distribution is in pyproject.toml.

The design card puts orchestrator/, workers/ and conf/ at the top of the repository;
they are the package's subpackages distillery.orchestrator, distillery.workers and
distillery.conf through the links distillery/orchestrator -> ../orchestrator (and
workers, conf), which a build follows (the wheel holds the files themselves). So
installing distillery claims no generic top-level module names (`import orchestrator`
stays free for everyone else), and a checkout imports exactly as an installed wheel.
"""

from setuptools import find_packages, setup

# find_packages follows the links (os.walk with followlinks).
packages = find_packages(include=["distillery", "distillery.*"])

setup(packages=packages)
