"""distillery: teacher runs distilled into memory that student agents read.

The driver is distillery.orchestrator (the top-level orchestrator/ folder), what runs
inside Ray is distillery.workers (workers/), the Hydra configs are distillery.conf
(conf/). In the repository, distillery/orchestrator, distillery/workers and
distillery/conf are links to those folders, so `distillery` is an ordinary package
wherever it is imported from: an installed wheel (whose build copies the folders in),
an editable install, a checkout on sys.path (the working_dir a `distillery submit`
uploads to a Ray cluster) and static tools (pyright) all resolve the same modules, and
nothing else of the repository (tests/, bench/) is part of the package.
"""
