"""distillery: teacher runs distilled into memory that student agents read.

The driver is distillery.orchestrator (the top-level orchestrator/ folder), what runs
inside Ray is distillery.workers (workers/), the Hydra configs are distillery.conf
(conf/); setup.py maps them. An installed distillery (wheel or editable) needs nothing
here. A checkout imported without being installed, such as the working_dir a
`distillery submit` uploads to a Ray cluster, finds the three folders through this
package's path.
"""

from pathlib import Path as _Path

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "setup.py").is_file() and (_checkout / "orchestrator" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 (a package's __path__)
