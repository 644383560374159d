"""Test utilities for users and distillery's own tests: a scripted OpenAI-compatible
server (scripted_server.py, real HTTP in its own process) and its reply scripts
(scripts.py: generic; bfcl_scripts.py: BFCL players), plus the MLflow comparison sweep
(mlflow_ui.py) that bench/mlflow_compare.py renders.

Start the server from a shell with
``python -m distillery.testing.scripted_server --script MOD:FN --port 8001``, or from
Python with ``run_stub_server("distillery.testing.scripts:always_text")``. The server
needs starlette and uvicorn (the ``dev`` extra). Nothing else in distillery imports
this package.
"""
