"""Keep a run's output to the progress display and the summary.

Third-party libraries announce things a distillery user cannot act on: Ray's start-up
banner and its token-authentication notice on a private local cluster, MLflow creating its database tables and flushing its trace queue at exit,
deprecation warnings from inside MLflow's SQL store. `distillery -v` keeps all of them;
otherwise they are lowered to warnings (Ray, MLflow: through their own environment
variables, so Ray's workers, which inherit the driver's environment, are quiet too) or
filtered. Warnings and errors always get through.
"""

from __future__ import annotations

import logging
import os
import warnings

# Library loggers whose INFO lines are announcements, not results.
_ANNOUNCERS = ("mlflow", "alembic", "ray", "filelock", "httpx", "sentence_transformers")
# Warnings raised inside libraries about their own internals.
_LIBRARY_WARNINGS = (
    # MLflow's SQL store on SQLAlchemy 2 ("The ``noload`` loader strategy is deprecated").
    ("ignore", DeprecationWarning, r"(mlflow|sqlalchemy|alembic|pydantic)(\.|$)"),
    ("ignore", FutureWarning, r"(mlflow|transformers|sentence_transformers)(\.|$)"),
)


def quiet_third_party(verbose: bool = False) -> None:
    """Lower third-party announcements to warnings unless `verbose`. Safe to call
    before or after the libraries are imported, and more than once."""
    if verbose:
        return
    # Read by MLflow when it is imported (and by every Ray worker that imports it).
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    # Read by Ray when it is imported: its "Started a local Ray instance" banner.
    os.environ.setdefault("RAY_LOGGER_LEVEL", "warning")
    # Ray's notice that it enabled token authentication on the private local cluster
    # (its default): nothing to act on. Its warnings about a real auth problem are
    # errors and still show.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR
    )
    for name in _ANNOUNCERS:  # already imported: their loggers are configured by now
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)
    for _, category, module in _LIBRARY_WARNINGS:  # every one is "ignore"
        warnings.filterwarnings("ignore", category=category, module=module)
